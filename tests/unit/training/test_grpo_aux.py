"""The GRPO loop with an auxiliary policy (ddmrl.training.grpo, ddmrl.aux_policies): a learned unmasking policy on
a frozen or jointly trained model (sudoku4), Co-GRPO's schedule policy with the model (geneval-mini), the policy's
first ratio, its resume from a checkpoint, and a learning check (the speed reward alone teaches it fewer steps)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from fake_rewards import varied_reward

import ddmrl.training.grpo as grpo_module
from ddmrl.aux_policies.base import new_aux_policy
from ddmrl.config import SamplerConfig, method_config
from ddmrl.models.layout import for_task
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.tasks import make_task
from ddmrl.tasks.encoding import prompt_length
from ddmrl.training.grpo import train_grpo
from ddmrl.training.resume import Checkpointer
from ddmrl.training.tracking import RunLog


@pytest.fixture
def sudoku(monkeypatch, make_model):
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    return task, tok, make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)


SMALL = {"hidden_size": 16, "intermediate_size": 32, "learning_rate": 1e-2}


def unmask_config(freeze: bool = True, temperature: float = 0.0, **kw):
    shared = dict(max_steps=4, num_prompts=2, num_generations=4, num_iterations=2, learning_rate=1e-2,
                  sampler=SamplerConfig(block_length=4, steps=4, temperature=temperature))  # fmt: skip
    return method_config("unmask_policy", shared, **{"aux_policy": {**SMALL, "freeze_model": freeze}, **kw})


def snapshot(module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def moved(module, before) -> list[str]:
    return [n for n, p in module.named_parameters() if not torch.equal(p, before[n])]


def draw(task):
    return lambda it: task.generate(2, seed=100 + it)


def test_a_frozen_model_stays_put_while_every_parameter_of_the_unmasking_policy_moves(sudoku, monkeypatch):
    task, tok, model = sudoku
    cfg = unmask_config()
    aux = new_aux_policy(cfg.aux_policy, 4)
    model_before, aux_before = snapshot(model), snapshot(aux)
    seen = []
    real = grpo_module.aux_clip_loss

    def spy(logp, old, active, adv, eps):
        seen.append((logp.detach().clone(), old.clone(), active.clone()))
        return real(logp, old, active, adv, eps)

    monkeypatch.setattr(grpo_module, "aux_clip_loss", spy)
    views = []
    monkeypatch.setattr(grpo_module, "make_views", lambda *a, **k: views.append(1))
    curve, timing = train_grpo(model, None, tok, task, draw(task), cfg, 0, aux_policy=aux)  # no reference needed
    assert curve[-1]["step"] == 4 and len(curve) == 2  # num_iterations policy steps per rollout batch
    assert all(math.isfinite(r["loss"]) and r["loss"] == r["aux_loss"] for r in curve)
    assert curve[0]["aux/steps"] >= 5  # at least one step per block of sudoku's 20 tokens
    assert views == [] and timing.old_ref_logp < timing.update  # no views, no old or reference passes
    assert moved(model, model_before) == []
    assert sorted(moved(aux, aux_before)) == sorted(aux_before)
    logp, old, active = seen[0]  # the first step of a rollout batch: the rollout-time policy, ratio 1
    assert torch.allclose(logp[active], old[active], atol=1e-5)


def test_trained_jointly_both_the_model_and_the_policy_move(sudoku):
    task, tok, model = sudoku
    cfg = unmask_config(freeze=False, temperature=1.0)  # sampled tokens: the random model's rewards then differ
    aux = new_aux_policy(cfg.aux_policy, 4)
    model_before, aux_before = snapshot(model), snapshot(aux)
    curve, _ = train_grpo(model, None, tok, task, draw(task), cfg, 0, aux_policy=aux)
    assert all(math.isfinite(r["loss"]) for r in curve) and curve[0]["reward_std"] > 0
    assert sorted(moved(model, model_before)) == sorted(model_before)
    assert sorted(moved(aux, aux_before)) == sorted(aux_before)


def test_the_policy_must_match_the_config(sudoku):
    task, tok, model = sudoku
    with pytest.raises(ValueError, match="aux_policy.kind = 'unmasking' but the auxiliary policy given is None"):
        train_grpo(model, None, tok, task, draw(task), unmask_config(), 0)


def test_cogrpo_trains_the_model_and_the_schedule_on_geneval_mini(make_model):
    task = make_task("geneval_mini", partial_credit=True)
    tok = build_tokenizer([task.alphabet], task.special_tokens)
    base = make_model(max_positions=prompt_length(task) + 65, tokenizer=tok)
    policy, ref = for_task(base, tok, task), for_task(copy.deepcopy(base), tok, task)
    shared = dict(max_steps=4, num_prompts=2, num_generations=4, num_iterations=2, learning_rate=1e-2, beta=0.04,
                  sampler=SamplerConfig(name="maskgit", steps=6, temperature=1.0, cfg_scale=1.0))  # fmt: skip
    cfg = method_config("cogrpo", shared, aux_policy={"learning_rate": 0.05})
    assert cfg.shrink == 3 and cfg.remasking == "tracerl"
    aux = new_aux_policy(cfg.aux_policy, 6)
    model_before, aux_before = snapshot(base), snapshot(aux)
    curve, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=7 + it), cfg, 0, aux_policy=aux)
    assert curve[-1]["step"] == 4 and len(curve) == 2  # 6 steps / shrink 3 = 2 trace views over mu = 2 steps
    assert all(math.isfinite(r["loss"]) for r in curve)
    assert {"aux/ratio", "aux/temperature", "aux/cfg"} <= set(curve[0])
    assert sorted(moved(base, model_before)) == sorted(model_before)
    assert moved(aux, aux_before) == ["table", "log_std"]
    assert aux.table.detach()[-1, 0] == 0  # the last step's ratio has no effect and no gradient


def test_a_resumed_run_restores_the_policy_and_its_optimiser(sudoku, tmp_path):
    """Killed after a checkpoint (stood for by a finished run whose checkpoint was kept), the rerun resumes there and
    ends with the uninterrupted run's policy and curve."""
    task, tok, model = sudoku
    cfg = unmask_config(max_steps=8, save_steps=3)

    def run(ckpt):
        aux = new_aux_policy(cfg.aux_policy, 4)
        torch.manual_seed(0)
        aux.load_state_dict(start)
        policy = copy.deepcopy(model)
        curve, _ = train_grpo(policy, None, tok, task, draw(task), cfg, 0, RunLog(None), ckpt, aux_policy=aux)
        return curve, aux

    start = new_aux_policy(cfg.aux_policy, 4).state_dict()
    ref_curve, ref_aux = run(None)
    ckpt = Checkpointer(tmp_path / "ckpt", "aux", keep=1)
    _, first = run(ckpt)
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["step-00000006"]
    curve, resumed = run(ckpt)
    for (n, p), q in zip(resumed.named_parameters(), ref_aux.parameters(), strict=True):
        assert torch.equal(p, q), n
    strip = [{k: v for k, v in r.items() if k != "time"} for r in curve]
    assert strip == [{k: v for k, v in r.items() if k != "time"} for r in ref_curve]


def test_the_speed_reward_alone_teaches_the_policy_to_reveal_more_per_step(sudoku, monkeypatch):
    """Every completion is 'correct' (reward 1); with R = ((L - T + 1) / L)^1 the advantage favours the samples that
    took fewer steps, so GRPO raises the unmasking probabilities: fewer steps per sample after training."""
    task, tok, model = sudoku
    monkeypatch.setattr(task, "reward", lambda completion, example: 1.0)
    cfg = unmask_config(max_steps=48, num_prompts=4, aux_policy={**SMALL, "learning_rate": 3e-2, "speed_alpha": 1.0})
    torch.manual_seed(0)
    aux = new_aux_policy(cfg.aux_policy, 4)
    curve, _ = train_grpo(model, None, tok, task, draw(task), cfg, 0, aux_policy=aux)
    first = sum(r["aux/steps"] for r in curve[:3]) / 3
    last = sum(r["aux/steps"] for r in curve[-3:]) / 3
    assert last < first - 2, (first, last)
    assert curve[-1]["reward"] > curve[0]["reward"]
