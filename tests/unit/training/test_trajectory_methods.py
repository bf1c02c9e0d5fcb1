"""CJ-GRPO and MDPO through the GRPO loop's own functions (ddmrl.training.grpo: make_views, view_targets,
view_advantages, objective_inputs, view_logps) on recorded rollouts of a tiny model.

CJ-GRPO's loss is checked against a transcription of its released ``compute_loss`` and ``_get_per_token_logps``
(yjyddq/EOSER-ASS-RL, ``cj-grpo/cj_grpo_trainer_eoser_ass.py``) and against a computation by hand; MDPO's batch
against its definition (the views' steps, targets, confidences and advantages come from the stored trajectory).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from fake_rewards import varied_reward
from float_error import agree, condition, in_float64

from ddmrl.config import SamplerConfig, method_config
from ddmrl.masking.views import top_steps
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.objectives.advantages import mdpo_step_advantages
from ddmrl.objectives.base import ObjectiveInputs
from ddmrl.objectives.token_clip import token_clip
from ddmrl.rollout import Rollouts, rewards, rollout, step_rewards
from ddmrl.samplers.llada import generate
from ddmrl.tasks import make_task
from ddmrl.training.grpo import (
    Batch,
    make_views,
    objective_inputs,
    train_grpo,
    view_advantages,
    view_logps,
    view_targets,
)

MASK, PAD, EOS = 0, 1, 3
P, L, N = 3, 12, 4


def perturbed(model, scale: float, seed: int):
    """A copy of ``model`` with every weight moved by N(0, scale^2) (another policy: ratios differ from 1)."""
    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return other


def recorded(model, **kw) -> Rollouts:
    """N rollouts (2 prompts x G 2) with a stored trajectory, every position valid (the released CJ-GRPO code
    counts every completion position; ddmrl counts those up to the first EOS, here all of them)."""
    prompts = torch.randint(5, 10, (N // 2, P), generator=torch.Generator().manual_seed(0)).repeat_interleave(2, 0)
    kw = {"mask_id": MASK, "block_length": 4, "steps": 6, "temperature": 1.0, **kw}
    out = generate(model, prompts, L, record_trajectory=True, generator=torch.Generator().manual_seed(0), **kw)
    valid = torch.ones(N, L, dtype=torch.bool)
    return Rollouts(prompts, out.completion_ids, valid, out.reveal_step, [""] * N, out.nfe, out.trajectory)


def cj_config(**kw):
    base = {"num_iterations": 2, "num_generations": 2, "num_prompts": 2, "beta": 0.04, "epsilon": 0.5}
    return method_config("cj_grpo", base, sampler=SamplerConfig(temperature=1.0), **kw)


# --------------------------------------------------------------------------- CJ-GRPO


def released_cj_loss(model, old_model, ref_model, prompt_ids, reversed_traj, advantages, epsilon, beta):
    """``_get_per_token_logps`` (logits of the state x_i, targets the state after it, x_{i+1}) and ``compute_loss``
    of the released trainer, transcribed for one micro-batch (``reversed_traj``: the S + 1 completion states)."""
    steps = len(reversed_traj) - 1
    unmask = [(reversed_traj[i] == MASK) & (reversed_traj[i + 1] != MASK) for i in range(steps)]

    def logps_of(m):
        out = []
        for i in range(steps):
            logits = m(torch.cat([prompt_ids, reversed_traj[i]], 1)).logits[:, -L:].float()
            out.append(torch.log_softmax(logits, -1).gather(-1, reversed_traj[i + 1][..., None]).squeeze(-1))
        return out

    cur, old, ref = logps_of(model), logps_of(old_model), logps_of(ref_model)
    loss = torch.zeros((), dtype=cur[0].dtype)  # float64 with float64 models (tests/float_error.py)
    for i in range(steps):
        per_token_logps = cur[i]
        per_token_kl = torch.exp(ref[i] - per_token_logps) - (ref[i] - per_token_logps) - 1
        coef_1 = torch.exp(per_token_logps - old[i])
        coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon)
        per_token_loss = -torch.min(coef_1 * advantages.unsqueeze(1), coef_2 * advantages.unsqueeze(1))
        per_token_loss = per_token_loss + beta * per_token_kl
        loss += (per_token_loss * unmask[i]).sum() / unmask[i].sum() / steps
    return loss


def cj_losses(models, batch, cfg, adv):
    """ddmrl's loss (the loop's functions) and the released one on ``batch``'s trajectory; ``models``: the old,
    reference and current policies, in the dtype of the computation (``adv``'s); the condition measures of ddmrl's
    loss (from float64 values only), a function of the current, old and reference log-probs."""
    old_model, ref, model = models
    views, weights, z, inputs = make_views(cfg, batch, 0, PAD, MASK)
    targets = view_targets(views, batch.completion_ids)
    b = Batch(batch, torch.zeros(N), adv, torch.zeros(2), views, weights.to(adv.dtype), z, inputs, targets)
    with torch.no_grad():
        old, ref_l = view_logps(old_model, inputs, targets), view_logps(ref, inputs, targets)
    old, ref_l = old.requires_grad_(), ref_l.requires_grad_()  # leaves, for the condition measures
    ids = views.steps[0]
    assert ids == tuple(range(batch.trajectory.states.shape[0])), "every stored step in every optimiser step"
    logps = torch.stack([view_logps(model, inputs[v : v + 1], targets[v : v + 1])[0] for v in ids])
    got = token_clip(objective_inputs(b, old, ref_l, logps, ids, slice(0, N), 2), cfg).loss
    traj = [*batch.trajectory.states, batch.completion_ids]
    want = released_cj_loss(model, old_model, ref, batch.prompt_ids, traj, adv, 0.5, 0.04)
    cond = condition(got, [logps, old, ref_l], [], P + L) if adv.dtype == torch.float64 else None
    return got.detach(), want.detach(), cond


@pytest.mark.parametrize("sampler", [{}, {"schedule": "ass", "eoser": True, "eos_id": EOS, "steps": 0}])
def test_cj_grpo_loss_is_the_released_trajectory_loss(make_model, sampler):
    """Three policies (old, reference, current) and real rollouts: the loop's loss at an optimiser step (every
    stored step, token_clip averaging the steps' token means) equals the released loss.

    Tolerance from float32's error (tests/float_error.py), not from one CPU's rounding: both sides also run in
    float64 (the three models, the weights and the advantages; the rollouts and views are the float32 ones) and
    agree there to 1e-10 of the condition measure S = sum_t |c_t l_t| over the T current, old and reference
    log-probs l_t (c_t = d loss / d l_t), the check of the formulas; in float32 each is within T eps32 S of its
    float64 value and the two within 2 T eps32 S."""
    old_model = make_model(max_positions=P + L)
    batch = recorded(old_model, **sampler)
    cfg = cj_config()
    models = (old_model, perturbed(old_model, 0.05, 2), perturbed(old_model, 0.05, 1))  # old, reference, current
    adv = torch.tensor([0.7, -0.7, 1.2, -1.2])
    got, want, _ = cj_losses(models, batch, cfg, adv)
    got64, want64, cond = cj_losses(in_float64(*models), batch, cfg, adv.double())
    agree("the loss", (got, got64), (want, want64), *cond.of_loss())


def test_cj_grpo_loss_by_hand():
    """S = 2 steps, one rollout of 3 tokens, A = 1, epsilon 0.2, beta 0: step 0 unmasked token 0 (ratio e^0.1,
    inside the clip range), step 1 tokens 1 and 2 (ratios e^0.3 -> clipped to 1.2, and e^-0.1).
        loss = -(1/2) [ e^0.1 + (1.2 + e^-0.1) / 2 ]"""
    targets = torch.tensor([[[True, False, False]], [[False, True, True]]])
    logps = torch.zeros(2, 1, 3, dtype=torch.float64)
    old = -torch.tensor([[[0.1, 0.0, 0.0]], [[0.0, 0.3, -0.1]]], dtype=torch.float64)
    x = ObjectiveInputs(logps, old, None, torch.tensor([1.0], dtype=torch.float64), targets.double(), None,
                        torch.ones(2, 1), targets, torch.ones(1, 3, dtype=torch.bool), 1)  # fmt: skip
    loss = token_clip(x, cj_config(beta=0.0, epsilon=0.2)).loss
    assert loss.item() == pytest.approx(-0.5 * (math.exp(0.1) + (1.2 + math.exp(-0.1)) / 2), rel=1e-12)


# --------------------------------------------------------------------------- MDPO


def test_mdpo_batch_trains_the_top_steps_predictions_with_their_confidences_and_advantages(make_model):
    model = make_model(max_positions=P + L)
    batch = recorded(model)
    traj = batch.trajectory
    step_r = torch.rand(N, traj.states.shape[0], generator=torch.Generator().manual_seed(1))
    step_adv = mdpo_step_advantages(step_r, 2)
    cfg = method_config("mdpo", {"num_iterations": 2, "num_generations": 2, "num_prompts": 2}, sample_train_steps=4)
    views, weights, _, inputs = make_views(cfg, batch, 0, PAD, MASK, step_adv)
    sel = top_steps(step_adv, 4).T  # [K, N]
    assert torch.equal(views.states.step, sel) and views.steps == ((0, 1), (2, 3))
    rows = torch.arange(N)[None]
    assert torch.equal(view_targets(views, batch.completion_ids), traj.predictions[sel, rows])
    assert torch.equal(inputs[..., P:], traj.states[sel, rows])
    assert torch.equal(weights, (traj.states[sel, rows] == MASK) * traj.confidence[sel, rows])
    assert torch.equal(view_advantages(views, step_adv), step_adv.gather(1, sel.T).T)
    assert view_advantages(views, None) is None


def test_step_rewards_score_each_steps_prediction_and_the_last_is_the_completions(monkeypatch, make_model):
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    model = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    examples = task.generate(2, seed=0)
    sampler = SamplerConfig(block_length=4, steps=10, temperature=1.0)
    batch = rollout(model, tok, task, examples, 2, sampler, torch.Generator().manual_seed(0), record_trajectory=True)
    r = step_rewards(tok, task, examples, batch, 2)
    assert r.shape == (4, 10)
    assert torch.equal(r[:, -1], rewards(task, examples, batch, 2)), "the last step's prediction is the completion"
    for s in (0, 4):
        texts = task.decode(tok, batch.trajectory.predictions[s])
        assert r[:, s].tolist() == pytest.approx([varied_reward(t, None) for t in texts])
    with pytest.raises(ValueError, match="trajectory"):
        step_rewards(tok, task, examples, batch._replace(trajectory=None), 2)


@pytest.mark.parametrize("method", ["mdpo", "cj_grpo"])
def test_one_run_records_trajectories_and_moves_the_policy(monkeypatch, make_model, method):
    """Two optimiser steps of each method with RCR rollouts; MDPO logs the share of over-denoised rollouts."""
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    before = [p.detach().clone() for p in policy.parameters()]
    base = {"max_steps": 2, "num_prompts": 2, "num_generations": 4, "num_iterations": 2, "learning_rate": 1e-2}
    sampler = SamplerConfig(block_length=4, steps=10, temperature=1.0, remasking="rcr")
    own = {"sample_train_steps": 4} if method == "mdpo" else {}  # MDPO's key
    cfg = method_config(method, base, sampler=sampler, **own)
    curve, _ = train_grpo(policy, copy.deepcopy(policy), tok, task, lambda it: task.generate(2, seed=it), cfg, 0)
    assert curve[-1]["step"] == 2 and math.isfinite(curve[-1]["loss"])
    assert ("over_denoising" in curve[-1]) == (method == "mdpo")
    assert all(not torch.equal(p, q) for p, q in zip(policy.parameters(), before, strict=True))
