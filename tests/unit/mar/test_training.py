"""MAR pre-training and the GRPO loop (ddmrl.mar.pretrain, ddmrl.mar.grpo): the tokens each AR step trains, the
baseline row as MAR-GRPO's stabilisers switched off (and each switch alone), what the frozen head leaves alone, and a
killed run resumed from its checkpoint ending as an uninterrupted one."""

from __future__ import annotations

import copy
import dataclasses
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from ddmrl import config
from ddmrl.config import MarPretrainConfig, MarRunConfig, MarSamplerConfig
from ddmrl.mar.diffusion import training_schedule
from ddmrl.mar.encoding import encode, grids_to_codes
from ddmrl.mar.grpo import prepare, token_weights, train_mar_grpo, update
from ddmrl.mar.pretrain import mar_loss, random_mask, train_mar
from ddmrl.mar.sampler import MARRollout, generate, schedule_of
from ddmrl.tasks.geneval_mini import GenEvalMini, parse_grid
from ddmrl.tasks.store import training_draw
from ddmrl.training import distributed as dist
from ddmrl.training.resume import Checkpointer
from ddmrl.training.tracking import RunLog

REPO = Path(__file__).resolve().parents[3]


class Background(GenEvalMini):
    """geneval-mini rewarding the fraction of background cells: every group has a reward spread."""

    def reward(self, completion, example):
        return completion.count("<i0>") / 64


TASK = Background()
HELD_OUT = TASK.held_out(6, 0)
RUN = {"num_prompts": 2, "num_generations": 4, "save_steps": 0, "report_to": (),
       "sampler": MarSamplerConfig(ar_steps=4, diffusion_steps=4)}  # fmt: skip


def test_random_mask_counts():
    mask = random_mask(2000, 64, torch.Generator().manual_seed(0))
    counts = mask.sum(-1).float()
    assert counts.min() >= 1 and counts.max() <= 64
    # E[ceil(64 cos(pi u / 2))] = 64 * 2 / pi + about 0.5
    assert counts.mean().item() == pytest.approx(64 * 2 / torch.pi + 0.5, abs=1.0)


def test_pretraining_fits_a_fixed_batch(tiny):
    model, sched, gen = tiny(0), training_schedule(100), torch.Generator().manual_seed(0)
    examples = TASK.generate(8, seed=1)
    batch = (model.encode_prompts([e.gold["prompt"] for e in examples]),
             encode(grids_to_codes([parse_grid(e.answer) for e in examples])))  # fmt: skip
    with torch.no_grad():
        before = sum(mar_loss(model, sched, *batch, torch.Generator().manual_seed(9)).item() for _ in range(3))
    cfg = MarPretrainConfig(max_steps=60, learning_rate=3e-3, warmup_steps=5, log_every=20, save_steps=0, report_to=())
    train_mar(model, lambda step: batch, cfg, sched, gen)
    with torch.no_grad():
        after = sum(mar_loss(model, sched, *batch, torch.Generator().manual_seed(9)).item() for _ in range(3))
    assert after < 0.7 * before


def _rollout() -> MARRollout:
    """A hand-built rollout: B = 1 image of N = 3 tokens, S = 3 AR steps revealing tokens 2, then 0, then 1."""
    masks = torch.tensor([[[1, 1, 1]], [[1, 1, 0]], [[0, 1, 0]], [[0, 0, 0]]], dtype=torch.bool)
    final = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    traj = torch.zeros(3, 2, 1, 3, 2)
    traj[0, 0] = torch.tensor([[[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]])  # step 0's drafts (token 2 revealed)
    traj[1, 0] = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])  # step 1: token 0 revealed, token 1 closer
    traj[2, 0] = torch.tensor([[[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])  # step 2: token 1 revealed
    return MARRollout(None, masks, None, traj, None, final, None, 3, 0)


def test_token_weights_by_hand():
    roll = _rollout()
    assert token_weights(roll, "committed", False).tolist() == [[[False, False, True]], [[True, False, False]],
                                                               [[False, True, False]]]  # fmt: skip
    masked = [[[True, True, True]], [[True, True, False]], [[False, True, False]]]
    assert token_weights(roll, "masked", False).tolist() == masked
    # consistency from step 1: token 1's draft went from (1, 0) to (0, 1) = final (cosine 0 -> 1): kept
    assert token_weights(roll, "masked", True, start=1).tolist() == masked
    strict = [[[True, True, True]], [[True, False, False]], [[False, True, False]]]  # only the revealed from step 1
    assert token_weights(roll, "masked", True, threshold=1.5, start=1).tolist() == strict
    # MAR-GRPO's release (the default) filters from step 2 (``i > 1``): step 1 keeps every unknown token
    assert token_weights(roll, "masked", True, threshold=1.5).tolist() == masked
    with pytest.raises(ValueError, match="start >= 1"):
        token_weights(roll, "masked", True, start=0)


def _run(model, section: dict, tmp_path=None, stop_after: int | None = None, steps: int = 4):
    cfg = MarRunConfig(**{**RUN, "max_steps": steps, **section})
    ref = copy.deepcopy(model).requires_grad_(False)
    draw = training_draw(TASK, HELD_OUT, 0, "grpo", cfg.num_prompts)
    ckpt = Checkpointer(tmp_path, "run", 2) if tmp_path is not None else None

    class Stop(RunLog):
        def log(self, row):
            super().log(row)
            if row["rollout_batch"] == stop_after:
                raise KeyboardInterrupt

    return train_mar_grpo(model, ref, TASK, draw, cfg, schedule_of(model, cfg.sampler), 7, Stop(), ckpt)


def test_a_frozen_head_stays_and_the_transformer_moves(tiny):
    base = tiny(3)
    frozen = copy.deepcopy(base)
    curve = _run(frozen, {"train_head": False, "mte_trajectories": 2, "consistency": True, "learning_rate": 1e-2})
    assert any(row["grad_norm"] > 0 for row in curve)
    for (name, p), q in zip(frozen.named_parameters(), base.parameters(), strict=True):
        assert torch.equal(p, q) == name.startswith("head."), name
    trained = copy.deepcopy(base)
    _run(trained, {"learning_rate": 1e-2})
    assert not torch.equal(trained.head.out.weight, base.head.out.weight)
    assert curve[-1]["samples"] == 4 * 2 * 4 and 0 < curve[-1]["mte_tokens"] <= 0.3


def test_a_killed_run_resumes_to_the_same_weights_and_curve(tiny, tmp_path):
    section = {"train_head": False, "mte_trajectories": 2, "consistency": True, "learning_rate": 1e-2,
               "save_steps": 2, "num_iterations": 2}  # fmt: skip
    whole = tiny(4)
    want = _run(whole, section, steps=8)
    killed = tiny(4)
    with pytest.raises(KeyboardInterrupt):
        _run(killed, section, tmp_path, stop_after=3, steps=8)  # checkpoints after batches 1 and 2 (steps 2, 4)
    resumed = tiny(4)
    got = _run(resumed, section, tmp_path, steps=8)
    drop = ("time", "rollout_seconds", "prepare_seconds", "update_seconds")
    assert [{k: v for k, v in r.items() if k not in drop} for r in got] == [
        {k: v for k, v in r.items() if k not in drop} for r in want
    ]
    for p, q in zip(whole.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q)


PLAIN = {"train_head": True, "mte_trajectories": 0, "consistency": False}


def _prepared(model, section: dict, seed: int = 0):
    """One rollout batch of 2 prompts x 4 images (drafts recorded) with fixed advantages, prepared under ``section``
    (the reference a copy of the policy: every KL term is 0 at the first update)."""
    cfg = MarRunConfig(**{**RUN, "max_steps": 1, "beta": 0.01, **section})
    schedule = schedule_of(model, cfg.sampler)
    prompts = [ex.gold["prompt"] for ex in HELD_OUT[:2] for _ in range(4)]
    roll = generate(model, model.encode_prompts(prompts), cfg.sampler.ar_steps, schedule,
                    torch.Generator().manual_seed(seed), drafts=True)  # fmt: skip
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, 0.0, -1.0, -1.0])
    ref = copy.deepcopy(model).requires_grad_(False)
    return cfg, schedule, roll, advantages, prepare(model, ref, schedule, roll, advantages, cfg, seed, 0)


def test_the_baseline_row_is_plain_grpo_over_every_masked_tokens_transitions(tiny):
    """Stabilisers off: every token unknown at an AR step is trained on its own trajectory (no MTE), the head gets
    gradient, and at the first update (ratio 1, KL 0) each AR step's loss is minus the mean advantage over its
    trained tokens, by hand: loss = mean_s [ -sum_{b,n} w_sbn A_b / sum w_s ]."""
    model = tiny(5)
    model.train()
    cfg, schedule, roll, adv, batch = _prepared(model, PLAIN)
    assert batch.mte is None and batch.mte_selected is None
    assert torch.equal(batch.weights, roll.masks[:-1])
    assert batch.ar_steps == list(range(cfg.sampler.ar_steps)) and batch.steps.tolist() == [1, 2, 3]
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the gradients only
    stats = update(model, opt, dist.local_accelerator(model), batch, schedule, cfg)
    w = batch.weights.float()  # [S, B, N]
    hand = (-(w * adv[None, :, None]).sum((1, 2)) / w.sum((1, 2))).mean()
    assert stats["loss"] == pytest.approx(hand.item(), abs=1e-5)
    assert stats["kl"] == pytest.approx(0.0, abs=1e-8) and stats["clip_ratio"] == 0.0
    assert model.head.out.weight.grad is not None and model.head.out.weight.grad.abs().sum() > 0


def test_each_stabiliser_is_a_switch_of_its_own(tiny):
    """Consistency-aware selection only drops drafts (every revealed token stays); MTE only adds M trajectories per
    token and marks each image's top-k % most uncertain tokens; neither changes what the other selects."""
    model = tiny(6)
    model.train()
    _, _, roll, _, plain = _prepared(model, PLAIN)
    _, _, _, _, consistent = _prepared(model, {**PLAIN, "consistency": True})
    assert bool((consistent.weights <= plain.weights).all()) and bool((roll.committed <= consistent.weights).all())
    assert consistent.weights.sum() < plain.weights.sum()  # this rollout has drafts that moved away
    assert consistent.mte is None
    _, _, _, _, mte = _prepared(model, {**PLAIN, "mte_trajectories": 3, "mte_top_percent": 0.25})
    assert torch.equal(mte.weights, plain.weights)
    k, (b, n, c) = len(schedule_of(model, MarSamplerConfig(ar_steps=4, diffusion_steps=4))), roll.final.shape
    assert mte.mte.shape == (3, k + 1, b, n, c)
    assert mte.mte_selected.sum(-1).tolist() == [n // 4] * b


def test_the_extended_profiles_mar_rows_differ_only_in_the_stabilisers(tmp_path):
    """On equal terms: the baseline row and MAR-GRPO share every hyperparameter but the three switches."""
    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    raw = yaml.safe_load((REPO / "params.yaml").read_text()) | {"profile": "extended"}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    mar = config.load(tmp_path / "params.yaml").mar
    plain, stable = (dataclasses.asdict(mar.run_config(s)) for s in ("grpo_plain", "mar_grpo"))
    assert {k for k in plain if plain[k] != stable[k]} == {"train_head", "mte_trajectories", "consistency"}
    assert (plain["train_head"], plain["mte_trajectories"], plain["consistency"]) == (True, 0, False)
    assert (stable["train_head"], stable["mte_trajectories"] > 0, stable["consistency"]) == (False, True, True)
