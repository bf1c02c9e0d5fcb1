"""MAR pre-training and the GRPO loop (ddmrl.mar.pretrain, ddmrl.mar.grpo): the tokens each AR step trains, what the
frozen head leaves alone, and a killed run resumed from its checkpoint ending as an uninterrupted one."""

from __future__ import annotations

import copy

import pytest
import torch

from ddmrl.config import MarPretrainConfig, MarRunConfig, MarSamplerConfig
from ddmrl.mar.diffusion import training_schedule
from ddmrl.mar.encoding import encode, grids_to_codes
from ddmrl.mar.grpo import token_weights, train_mar_grpo
from ddmrl.mar.pretrain import mar_loss, random_mask, train_mar
from ddmrl.mar.sampler import MARRollout, schedule_of
from ddmrl.tasks.geneval_mini import GenEvalMini, parse_grid
from ddmrl.tasks.store import training_draw
from ddmrl.training.resume import Checkpointer
from ddmrl.training.tracking import RunLog


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
    assert token_weights(roll, "masked", True).tolist() == masked
    strict = [[[True, True, True]], [[True, False, False]], [[False, True, False]]]  # only the revealed from step 1
    assert token_weights(roll, "masked", True, threshold=1.5).tolist() == strict


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
