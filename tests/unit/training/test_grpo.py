"""One GRPO rollout batch per method on a tiny TinyDDM and the sudoku4 task (ddmrl.training.grpo).

A random tiny model scores 0 on every Sudoku completion (zero advantages, no policy gradient), so the task's reward
is replaced by a function of the completion text that varies across samples; TRL's test then applies: the loss is
finite and every trainable parameter moved.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from fake_rewards import varied_reward
from float_error import EPS32, rebatched_agree

import ddmrl.objectives.token_clip as losses_module
import ddmrl.training.grpo as grpo_module
from ddmrl.config import GRPOConfig, SamplerConfig, method_config
from ddmrl.methods import METHODS
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.tasks import make_task
from ddmrl.training.grpo import train_grpo


@pytest.fixture
def setup(monkeypatch, make_model):
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    return task, tok, policy, copy.deepcopy(policy)


# methods whose definition needs its own sampler: the shared one (blocks of 4) is replaced in their section
OWN_SAMPLER = {"justgrpo": SamplerConfig(block_length=1, temperature=1.0)}  # left to right, one token per step
# methods whose rollouts have their own shape: d-TreeRPO's tree of 2 x 2 leaves (num_generations 4)
OWN_KEYS = {"treerpo": {"tree_branch_factor": 2}}


def config(method: str, **kw) -> GRPOConfig:
    if method in OWN_SAMPLER:
        kw = {"sampler": OWN_SAMPLER[method], **kw}
    kw = {**OWN_KEYS.get(method, {}), **kw}
    base = dict(
        method=method,
        max_steps=2,
        num_prompts=2,
        num_generations=4,
        num_iterations=2,
        learning_rate=1e-2,
        beta=0.04,
        sampler=SamplerConfig(block_length=4, steps=4, temperature=1.0),
    )
    return method_config(method, base, **kw)


# the methods with an auxiliary policy (test_grpo_aux.py) or a rollout augmenter (test_grpo_igpo.py: IGPO needs a task
# with reasoning traces) have their own tests
TEXT = sorted(m for m in METHODS if METHODS[m].params().aux_policy.kind == "none" and not METHODS[m].augmenter)
TOKEN_CLIP = [m for m in TEXT if METHODS[m].objective == "token_clip"]


@pytest.mark.parametrize("method", TEXT)
def test_every_method_gives_a_finite_loss_and_moves_every_parameter(setup, method):
    """TRL's test, for every method record: one rollout batch, finite loss, every trainable parameter changed."""
    task, tok, policy, ref = setup
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    curve, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=100 + it), config(method), 0)
    assert curve[-1]["step"] == 2
    assert all(math.isfinite(row["loss"]) for row in curve)
    unchanged = [n for n, p in policy.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert unchanged == [], f"{method}: parameters that did not move: {unchanged}"


@pytest.mark.parametrize("method", TOKEN_CLIP)
def test_one_grpo_batch_updates_every_parameter(setup, method, monkeypatch):
    task, tok, policy, ref = setup
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    ref_before = {n: p.detach().clone() for n, p in ref.named_parameters()}
    seen = []
    real = losses_module.clipped_token_loss

    def spy(logps, old, refl, adv, eps, beta, eps_high=0.0):
        out = real(logps, old, refl, adv, eps, beta, eps_high)
        seen.append((out, adv.clone(), logps.detach(), old, refl))
        return out

    monkeypatch.setattr(losses_module, "clipped_token_loss", spy)
    curve, timing = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=100 + it), config(method), 0)
    assert len(curve) == 1 and curve[0]["step"] == 2
    row = curve[0]
    assert math.isfinite(row["loss"]) and math.isfinite(row["kl"])
    assert row["frac_reward_zero_std"] < 1.0 and row["reward_std"] > 0
    if method == "tracerl":  # its trace steps spread over the 2 optimiser steps
        first_step, later = seen[:1], seen[-1:]
    else:
        views = len(seen) // 2  # per inner step (one; CJ-GRPO: every sampler step)
        assert len(seen) == 2 * views and views >= 1
        first_step, later = seen[:views], seen[views:]
    assert bool((seen[0][1] != 0).any())
    # inner step 1: the policy has not moved yet, so the log-probs are the old and (ref = policy copy) the reference
    # ones, computed in other batches (up to rounding); the ratio is 1 and k3's KL 0 to float32's precision
    first_step_are_the_old_policy(first_step, policy, task)
    # the last inner step runs after one optimiser step: the ratio moved somewhere, beyond any rounding
    assert max(float((out.ratio - 1).abs().max()) for out, *_ in later) > 1e-3
    unchanged = [n for n, p in policy.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert unchanged == [], f"parameters that did not move: {unchanged}"
    assert all(torch.equal(p, ref_before[n]) for n, p in ref.named_parameters()), "the reference must stay frozen"
    assert timing.gen > 0 and timing.update > 0


def first_step_are_the_old_policy(calls, policy, task) -> None:
    """The spied ``clipped_token_loss`` calls of the first inner step: the log-probs equal the old and reference
    ones up to the rounding of another batching (:func:`float_error.rebatched_agree`), so no token is clipped and
    k3's KL, exp(d) - d - 1 of the |d| <= delta apart, is within delta^2 + 2 eps32 of 0 (exp's and the subtraction's
    roundings near 1)."""
    positions = task.prompt_length + 1 + task.completion_length
    for out, _, logps, old, refl in calls:
        rebatched_agree("the old log-probs", logps, old, policy, positions)
        rebatched_agree("the reference log-probs", logps, refl, policy, positions)
        delta = float((logps - refl).abs().max())
        assert float(out.kl.abs().max()) <= delta**2 + 2 * EPS32
        assert float((out.ratio - 1).abs().max()) < 1e-3  # far inside any clip range


def test_zero_advantages_and_no_kl_leave_the_policy_unchanged(setup, monkeypatch):
    """Equal rewards in every group: A = 0; with beta = 0 the loss is identically 0 and AdamW (no weight decay)
    makes no update."""
    task, tok, policy, ref = setup
    monkeypatch.setattr(task, "reward", lambda completion, example: 0.5)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    curve, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=it), config("rebrl", beta=0.0), 0)
    assert curve[0]["frac_reward_zero_std"] == 1.0 and curve[0]["loss"] == 0.0
    assert all(torch.equal(p, before[n]) for n, p in policy.named_parameters())


def test_training_is_reproducible_from_the_seed(setup):
    """Every draw comes from generators derived from the seed: two runs from the same initial weights agree."""
    task, tok, policy, ref = setup
    twin = copy.deepcopy(policy)
    cfg = config("unigrpo")
    a, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=it), cfg, 5)
    b, _ = train_grpo(twin, copy.deepcopy(ref), tok, task, lambda it: task.generate(2, seed=it), cfg, 5)
    for k in ("loss", "reward", "kl", "clip_ratio"):
        assert a[0][k] == b[0][k], k
    assert all(torch.equal(p, q) for p, q in zip(policy.parameters(), twin.parameters(), strict=True))


def test_non_finite_rewards_skip_the_rollout_batch_and_are_counted(setup, monkeypatch):
    """on_nonfinite: skip — a NaN reward skips its rollout batch (no optimiser step, counted); the run still ends."""
    task, tok, policy, ref = setup
    calls = []

    def flaky(completion, example):
        calls.append(1)
        return float("nan") if len(calls) <= 8 else varied_reward(completion, example)  # first batch: 8 rewards

    monkeypatch.setattr(task, "reward", flaky)
    curve, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=it), config("unigrpo"), 0)
    assert curve[-1]["step"] == 2 and curve[-1]["nonfinite_skipped"] == 1


def test_non_finite_rewards_stop_the_run_with_a_diagnostic(setup, monkeypatch):
    from ddmrl.training.grpo import NonFiniteError

    task, tok, policy, ref = setup
    monkeypatch.setattr(task, "reward", lambda completion, example: float("inf"))
    with pytest.raises(NonFiniteError, match="non-finite reward or advantage"):
        train_grpo(
            policy, ref, tok, task, lambda it: task.generate(2, seed=it), config("unigrpo", on_nonfinite="stop"), 0
        )


def test_persistent_non_finite_rewards_give_up_after_ten_batches(setup, monkeypatch):
    from ddmrl.training.grpo import MAX_CONSECUTIVE_SKIPS, NonFiniteError

    task, tok, policy, ref = setup
    monkeypatch.setattr(task, "reward", lambda completion, example: float("nan"))
    with pytest.raises(NonFiniteError, match=f"{MAX_CONSECUTIVE_SKIPS} consecutive"):
        train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=it), config("unigrpo"), 0)


def test_guided_logps_are_used_for_old_reference_and_current_log_probs(setup, monkeypatch):
    """``logp_cfg: guided``: every log-prob of the loop is taken under the rollout sampler's CFG scale, so the ratio
    is 1 and the KL 0 (to float32's precision) before the first optimiser step; ``none`` takes them without
    guidance."""
    task, tok, policy, ref = setup
    scales, seen = [], []
    real_logps, real_loss = grpo_module.token_logps, losses_module.clipped_token_loss
    monkeypatch.setattr(
        grpo_module, "token_logps", lambda *a, **kw: (scales.append(kw["cfg_scale"]), real_logps(*a, **kw))[1]
    )
    monkeypatch.setattr(
        losses_module, "clipped_token_loss", lambda *a: (seen.append((out := real_loss(*a), *a[:3])), out)[1]
    )
    sampler = SamplerConfig(block_length=4, steps=4, temperature=1.0, cfg_scale=2.0)
    for logp_cfg, want in (("guided", 2.0), ("none", 0.0)):
        scales.clear()
        cfg = config("unigrpo", sampler=sampler, logp_cfg=logp_cfg)
        train_grpo(copy.deepcopy(policy), ref, tok, task, lambda it: task.generate(2, seed=it), cfg, 0)
        assert scales and set(scales) == {want}, logp_cfg
        out, logps, old, refl = seen[-2]
        first_step_are_the_old_policy([(out, None, logps.detach(), old, refl)], policy, task)
