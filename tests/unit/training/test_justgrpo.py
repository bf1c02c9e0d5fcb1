"""JustGRPO (Ni et al. 2026, LeapLabTHU/JustGRPO): left-to-right rollouts, its views (token j from the input with
positions >= j masked), and its loss and gradient against a transcription of the released ``logprob_loss``.

The transcription below restates, in our words, what LeapLabTHU/JustGRPO ``grpo.py`` (commit
eebe50e71f5b84ec6b3824cb502664577989db1b) computes; ``train.py`` calls it:

* ``compute_group_advantages``: (r - mean) / (std + 1e-4) over each prompt's G samples (std unbiased); the rows are
  laid out as ``prompt_ids.repeat(G, 1)``, sample-major (one prompt per process and micro-step in its recipe);
* ``valid_samples = (advantages != 0).sum()`` over the process's samples, averaged over processes;
* ``logprob_loss``: scale = gain / L / (valid_samples + 1e-5); for t = 0..L-1 the input prompt + completion[:t] +
  L - t mask tokens, the log-softmax (float32) of the logits at position P + t divided by the temperature (1.0),
  its completion token's log-prob lp, ratio = exp(lp - lp.detach()) (exactly 1), -min(ratio A, clip(ratio, 1 -/+
  eps) A), summed over the rows times scale and backpropagated at once (one forward and backward pass per token).
  No completion mask: every position is trained, the EOS padding included. Under bf16 autocast on the GPU (here
  float32 on the CPU, the precision of ddmrl's test models).
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from fake_rewards import varied_reward
from float_error import (
    EPS32,
    Computed,
    Condition,
    InFloat64,
    agree,
    computed,
    condition,
    forward_terms,
    loss_and_gradient_agree,
    scale,
)

import ddmrl.training.grpo as grpo_module
from ddmrl.config import ConfigError, SamplerConfig, method_config
from ddmrl.likelihood import token_logps
from ddmrl.methods import METHODS
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.objectives import OBJECTIVES
from ddmrl.objectives.advantages import group_advantages
from ddmrl.rollout import Rollouts, sampler_kwargs
from ddmrl.samplers import SAMPLERS
from ddmrl.tasks import make_task
from ddmrl.training.grpo import (
    Batch,
    loss_positions,
    make_views,
    objective_inputs,
    step_views,
    train_grpo,
    view_logps,
    view_targets,
)

METHOD = METHODS["justgrpo"]

# ------------------------------------------------------------------------------------------ the transcription


def released_group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """``compute_group_advantages``: rows laid out sample-major, [G * B]."""
    mean = rewards.view(group_size, -1).mean(dim=0).repeat(group_size)
    std = rewards.view(group_size, -1).std(dim=0).repeat(group_size)
    return (rewards - mean) / (std + 1e-4)


def released_logprob_loss(model, prompt_ids, completion_ids, advantages, valid_samples, mask_id, eps=0.2, gain=1.0,
                          temperature=1.0):  # fmt: skip
    """``logprob_loss`` of one process: backpropagates one scaled loss per completion position into ``.grad`` and
    returns (their sum, the per-token log-probs [N, L])."""
    batch_size, gen_length = completion_ids.shape
    prompt_len = prompt_ids.shape[1]
    scale = gain / gen_length / (valid_samples + 1e-5)
    total, logps = torch.zeros(()), []
    for t in range(gen_length):
        future = torch.full((batch_size, gen_length - t), mask_id, dtype=completion_ids.dtype)
        x = torch.cat([prompt_ids, completion_ids[:, :t], future], dim=1)
        logits = model(x).logits / temperature
        log_prob = F.log_softmax(logits[:, prompt_len + t, :].float(), dim=-1)
        token_log_prob = log_prob.gather(-1, completion_ids[:, t : t + 1]).squeeze(-1)
        ratio = (token_log_prob - token_log_prob.detach()).exp()
        clipped_ratio = ratio.clamp(1 - eps, 1 + eps)
        loss = -torch.min(ratio * advantages, clipped_ratio * advantages)
        step = loss.mul(scale).sum()
        step.backward()
        total, logps = total + step.detach(), [*logps, token_log_prob.detach()]
    return total, torch.stack(logps, 1)


def released_input(prompt_ids, completion_ids, t: int, mask_id: int) -> torch.Tensor:
    n, length = completion_ids.shape
    future = torch.full((n, length - t), mask_id, dtype=completion_ids.dtype)
    return torch.cat([prompt_ids, completion_ids[:, :t], future], dim=1)


# ------------------------------------------------------------------------------------------ helpers


def left_to_right_rollouts(tok, model, n: int, prompt_length: int, length: int, seed: int = 0) -> Rollouts:
    """n completions of random prompts from ddmrl's llada sampler with JustGRPO's default sampler, the first EOS
    of row 1 moved forward so that EOS padding is present."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(5, 10, (n, prompt_length), generator=g)
    sampler = METHOD.params().sampler
    out = SAMPLERS["llada"](model, prompt, length, mask_id=tok.mask_token_id, generator=g,
                            **sampler_kwargs(sampler, length))  # fmt: skip
    completion = out.completion_ids.clone()
    completion[1, length - 2 :] = tok.eos_token_id
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[1, length - 1 :] = False  # up to and including the first EOS
    return Rollouts(prompt, completion, completion_mask, out.reveal_step, [""] * n, out.nfe)


def config(**kw):
    return method_config("justgrpo", dict(num_prompts=1, num_generations=8, num_iterations=1), **kw)


# ------------------------------------------------------------------------------------------ the method


def test_what_justgrpo_fixes_and_its_release_defaults():
    p = METHOD.params()
    assert METHOD.fixed() == {"remasking": "tracerl", "shrink": 1, "beta": 0.0, "loss_type": "token_mean"}
    assert p.loss_after_eos and p.epsilon == 0.2 and p.kl_target == "ref"
    s = p.sampler
    assert (s.name, s.block_length, s.steps, s.temperature, s.kv_cache, s.parallel) == ("llada", 1, 0, 1.0, "none",
                                                                                        "none")  # fmt: skip
    assert METHOD.objective == "valid_token_clip" and METHOD.weighting == "masked_mean"


@pytest.mark.parametrize(
    ("sampler", "key"),
    [
        ({"block_length": 4}, "sampler.block_length"),
        ({"steps": 64}, "sampler.steps"),
        ({"name": "maskgit"}, "sampler.name"),
        ({"remasking": "rcr"}, "sampler.remasking"),
        ({"schedule": "ass"}, "sampler.schedule"),
        ({"kv_cache": "prefix"}, "sampler.kv_cache"),
        ({"parallel": "threshold"}, "sampler.parallel"),
    ],
)
def test_a_sampler_that_is_not_left_to_right_is_refused_in_one_line(sampler, key):
    """A shared grpo.sampler (params.yaml's has blocks of 4 and a prefix cache) must be overridden in the section."""
    with pytest.raises(ConfigError) as info:
        method_config("justgrpo", {"sampler": {"block_length": 1, **sampler}})
    msg = str(info.value)
    assert msg.startswith(key) and "left to right" in msg and "\n" not in msg, msg
    shared = {"sampler": {"block_length": 4, "kv_cache": "prefix"}}  # deep-merged: the section overrides both
    assert method_config("justgrpo", shared, sampler={"block_length": 1, "kv_cache": "none"}).sampler.block_length == 1


def test_the_rollouts_are_left_to_right_one_token_per_forward_pass(tok, make_model):
    length = 7
    model = make_model(max_positions=3 + length, seed=3)
    batch = left_to_right_rollouts(tok, model, 4, 3, length)
    assert torch.equal(batch.reveal_step, torch.arange(length).expand(4, length))
    assert batch.nfe == length


# ------------------------------------------------------------------------------------------ (a) the views


@pytest.mark.parametrize("mu", [1, 2, 3, 7])
def test_every_token_is_a_target_once_from_its_left_context_with_the_future_masked(tok, make_model, mu):
    """TraceRL's views with shrink 1 on a left-to-right rollout are the release's inputs: view j holds positions < j
    of the completion and masks positions >= j; its one target is token j; the L views are spread in order over the
    mu optimiser steps, each used once (mu <= L; with more steps than tokens they cycle, one view per step)."""
    n, prompt_length, length = 3, 2, 5
    model = make_model(max_positions=prompt_length + length, seed=1)
    batch = left_to_right_rollouts(tok, model, n, prompt_length, length)
    cfg = config(num_iterations=mu, num_generations=3)
    scored = loss_positions(cfg, batch)
    assert scored.completion_mask.all()  # loss_after_eos: the EOS padding is trained
    views, weights, z, inputs = make_views(cfg, scored, 11, tok.pad_token_id, tok.mask_token_id)
    assert views.masks.shape == (length, n, length) and z is None and not views.prompt_masks.any()
    positions = torch.arange(length)
    for j in range(length):
        assert torch.equal(views.masks[j], (positions >= j).expand(n, length))
        assert torch.equal(views.target_masks[j], (positions == j).expand(n, length))
        assert torch.equal(weights[j], (positions == j).float().expand(n, length))
        assert torch.equal(inputs[j], released_input(batch.prompt_ids, batch.completion_ids, j, tok.mask_token_id))
    assert torch.equal(views.target_masks.sum(0), torch.ones(n, length, dtype=torch.long))
    order = [v for step in views.steps for v in step]
    assert len(views.steps) == mu
    if mu <= length:
        assert order == list(range(length))
        assert max(map(len, views.steps)) - min(map(len, views.steps)) <= 1
    else:
        assert order == [s % length for s in range(mu)]


# ------------------------------------------------------------------------------------------ (b) the release


def ddmrl_batch(tok, model, batch, advantages, g, mu):
    """The loop's batch of ``batch`` with ``advantages`` [N] (zero_std unused), and its old pass."""
    n = advantages.numel()
    cfg = config(num_iterations=mu, num_generations=g, num_prompts=n // g)
    scored = loss_positions(cfg, batch)
    views, weights, z, inputs = make_views(cfg, scored, 5, tok.pad_token_id, tok.mask_token_id)
    targets = view_targets(views, batch.completion_ids)
    b = Batch(scored, torch.zeros(n), advantages, torch.zeros(n // g, dtype=torch.bool), views, weights, z, inputs,
              targets)  # fmt: skip
    with torch.no_grad():
        old = view_logps(model, inputs, b.target_ids)  # [V, N, L] the old pass of the loop
    return cfg, b, old


def step_loss(cfg, b, old, model, step: int):
    """The objective of optimiser step ``step`` as the loop's :func:`update` computes it (one micro-batch), and the
    token log-probs [V, N, L] of its views."""
    ids = step_views(b.views, step, 0, cfg)
    logps = torch.stack([token_logps(model, b.inputs[v], b.target_ids[v]) for v in ids])
    x = objective_inputs(b, old, None, logps, ids, slice(None), cfg.num_generations)
    return OBJECTIVES[METHOD.objective](x, cfg), logps


class Sides(NamedTuple):
    """ddmrl's loss over the rollout batch's optimiser steps and its gradient, and the release's, in one dtype; each
    token's old log-prob from its own view [N, L] and the release's; the objectives of the steps; the condition
    measures of the sums (from float64 values only)."""

    ours: Computed
    release: Computed
    diagonal: torch.Tensor
    logps_release: torch.Tensor
    steps: list
    views: list[int]
    cond: Condition | None


def both_sides(tok, model, batch, advantages, mu: int) -> Sides:
    """ddmrl (the loop's views, old pass and objective) on ``mu`` optimiser steps at a fixed policy, each step's loss
    weighted by its share of the L views (each token counted once), and the release's ``logprob_loss``; its loss and
    gradient times (valid + 1e-5) / valid, the one difference of the formulas (its normaliser L (valid + 1e-5),
    ddmrl's L valid), computed in float64."""
    n, length = batch.completion_ids.shape
    valid = int((advantages != 0).sum())  # over the process's samples
    release_model = copy.deepcopy(model)
    release_model.zero_grad(set_to_none=True)
    loss_rel, logps_rel = released_logprob_loss(release_model, batch.prompt_ids, batch.completion_ids, advantages,
                                                valid, tok.mask_token_id)  # fmt: skip
    scale = (valid + 1e-5) / valid
    grads_rel = tuple(p.grad.double() * scale for p in release_model.parameters())
    release = Computed(loss_rel.double() * scale, grads_rel)

    cfg, b, old = ddmrl_batch(tok, model, batch, advantages, 8, mu)
    diagonal = old[torch.arange(length), :, torch.arange(length)].T  # [N, L] token j from view j
    steps = [step_loss(cfg, b, old, model, s) for s in range(mu)]
    loss = sum(out.loss * logps.shape[0] / length for out, logps in steps)
    params = list(model.parameters())
    logps = [logps for _, logps in steps]
    positions = batch.prompt_ids.shape[1] + length
    cond = condition(loss, logps, params, positions) if advantages.dtype == torch.float64 else None
    outs, views = [out for out, _ in steps], [x.shape[0] for x in logps]
    return Sides(computed(loss, params), release, diagonal, logps_rel, outs, views, cond)


GROUP_REWARDS = torch.tensor([1.0, 0.0, 0.5, 0.5, 1.0, 0.0, 0.5, 0.5])  # four samples at the group mean: A = 0

ADVANTAGES = {
    # one group of 8 (the release's G 16 per prompt, smaller): valid_samples = 4; the advantages sum to 0, so the
    # loss at ratio 1 is 0 and the gradient carries the comparison
    "one_group": group_advantages(GROUP_REWARDS, 8)[0],
    # advantages of nonzero sum, two of them 0 (valid_samples = 6): the loss itself is nonzero
    "unbalanced": torch.tensor([1.0, 0.0, -0.5, 0.8, 0.0, -1.2, 2.0, 0.3]),
}


def test_the_group_advantages_are_the_releases():
    """One prompt per process (the release's recipe): its sample-major layout is ddmrl's consecutive group."""
    want = released_group_advantages(GROUP_REWARDS, 8)
    assert torch.allclose(group_advantages(GROUP_REWARDS, 8, "group", METHOD.advantage_eps(config()))[0], want)
    assert int((want != 0).sum()) == 4


@pytest.mark.parametrize("case", sorted(ADVANTAGES))
def test_loss_gradient_and_log_probs_equal_the_release_on_identical_inputs(tok, make_model, case):
    """mu = 1 (the release's one optimiser step per rollout batch), EOS padding in row 1: ddmrl's old log-probs are
    the release's per-token log-probs; its loss and gradient are the release's times valid / (valid + 1e-5) (the
    release's denominator L (valid + 1e-5) against ddmrl's L valid).

    Tolerances of the loss and gradient from float32's error (tests/float_error.py): both sides also run in float64
    (the model and the advantages) and agree there to 1e-10 of the condition measure S, the check of the formulas;
    in float32 each is within n eps32 S of its float64 value and the two within 2 n eps32 S (n = T for the loss,
    T (P + L) for a gradient)."""
    advantages = ADVANTAGES[case]
    n, prompt_length, length = advantages.numel(), 3, 6
    model = make_model(max_positions=prompt_length + length, seed=2)
    batch = left_to_right_rollouts(tok, model, n, prompt_length, length, seed=4)
    f32 = both_sides(tok, model, batch, advantages, mu=1)
    f64 = both_sides(tok, InFloat64(model), batch, advantages.double(), mu=1)

    # the old log-probs, forward passes of two codes: tolerances as the loss's, S the largest |log-prob| and n the
    # pass's longest chain of sums (float_error.forward_terms)
    diagonal = (f32.diagonal, f64.diagonal), (f32.logps_release, f64.logps_release)
    agree("the old log-probs", *diagonal, scale(f64.diagonal), forward_terms(model, prompt_length + length))
    (out,) = f32.steps
    assert f32.views == [length]  # mu = 1: one forward pass per completion token in the step
    assert out.terms == {"kl": 0.0, "clip_ratio": 0.0}  # ratio 1 at the first step: no clipping, no KL
    if case == "unbalanced":  # the release's L N terms -A_i / (L (valid + 1e-5)) of ratio 1, summed in float32
        valid = int((advantages != 0).sum())
        want, s = -float(advantages.double().sum()) / valid, float(advantages.abs().double().sum()) / valid
        assert abs(float(f32.release.loss) - want) <= length * n * EPS32 * s  # (times (valid + 1e-5) / valid)
    loss_and_gradient_agree(f32.ours, f32.release, f64.ours, f64.release, f64.cond)


def test_the_views_spread_over_several_steps_sum_to_the_release_loss(tok, make_model):
    """mu = 3 at a fixed policy: sum over the steps of (views in the step / L) x its loss and gradient are the
    release's (times valid / (valid + 1e-5)), each token counted once; the steps take 2 forward passes each (L = 6).
    Tolerances from float32's error, as in the test above."""
    advantages = ADVANTAGES["unbalanced"]
    n, prompt_length, length = advantages.numel(), 2, 6
    model = make_model(max_positions=prompt_length + length, seed=5)
    batch = left_to_right_rollouts(tok, model, n, prompt_length, length, seed=6)
    f32 = both_sides(tok, model, batch, advantages, mu=3)
    f64 = both_sides(tok, InFloat64(model), batch, advantages.double(), mu=3)
    assert f32.views == [2, 2, 2] and f32.release.loss != 0
    loss_and_gradient_agree(f32.ours, f32.release, f64.ours, f64.release, f64.cond)


def test_samples_of_zero_advantage_leave_the_token_mean():
    """valid_token_clip is token_clip with the zero-advantage rows' weights set to 0: with every advantage nonzero
    they agree; otherwise the mean is over the other rows."""
    from ddmrl.objectives.base import ObjectiveInputs

    g = torch.Generator().manual_seed(0)
    n, length = 4, 3
    logps, old = (-torch.rand(1, n, length, generator=g) for _ in range(2))
    targets = torch.ones(1, n, length, dtype=torch.bool)

    def inputs(adv):
        return ObjectiveInputs(logps, old, None, adv, targets.float(), None, torch.ones(1, n), targets,
                               torch.ones(n, length, dtype=torch.bool), n)  # fmt: skip

    cfg = config()
    full = torch.tensor([1.0, -0.5, 0.7, -1.2])
    valid_mean, token_mean = OBJECTIVES["valid_token_clip"], OBJECTIVES["token_clip"]
    assert torch.equal(valid_mean(inputs(full), cfg).loss, token_mean(inputs(full), cfg).loss)
    half = torch.tensor([1.0, 0.0, 0.0, -1.2])  # two of four rows valid: the mean over them, twice the plain mean
    assert torch.allclose(valid_mean(inputs(half), cfg).loss, token_mean(inputs(half), cfg).loss * 2)


# ------------------------------------------------------------------------------------------ (c) one GRPO step


def test_one_rollout_batch_trains_every_parameter_at_one_forward_per_token_per_step(monkeypatch, make_model):
    """Sudoku (L = 20) with two optimiser steps per rollout batch: the old pass evaluates the L views without
    gradient (in one batched pass here), the update takes L forward passes with gradient (L / mu = 10 per optimiser
    step); every parameter moves, the loss is finite, no KL."""
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    before = {k: p.detach().clone() for k, p in policy.named_parameters()}
    calls = []
    real = grpo_module.token_logps

    def counting(model, inputs, targets, **kw):
        calls.append(inputs.shape[0])
        return real(model, inputs, targets, **kw)

    monkeypatch.setattr(grpo_module, "token_logps", counting)
    cfg = method_config("justgrpo", dict(max_steps=2, num_prompts=2, num_generations=4, num_iterations=2,
                                         learning_rate=1e-2))  # fmt: skip
    curve, _ = train_grpo(policy, None, tok, task, lambda it: task.generate(2, seed=100 + it), cfg, 0)
    assert len(curve) == 1 and curve[0]["step"] == 2 and math.isfinite(curve[0]["loss"])
    assert curve[0]["kl"] == 0.0
    n, length = 2 * 4, task.completion_length
    assert calls == [length * n] + [n] * length  # the old pass (all L views at once), then one pass per token
    unchanged = [k for k, p in policy.named_parameters() if p.requires_grad and torch.equal(p, before[k])]
    assert unchanged == []


def test_the_shared_sampler_of_the_tests_is_replaced_by_the_section():
    cfg = method_config("justgrpo", dict(sampler=SamplerConfig(block_length=4, steps=4, temperature=1.0)),
                        sampler=SamplerConfig(block_length=1, temperature=1.0))  # fmt: skip
    assert cfg.sampler.block_length == 1 and cfg.sampler.steps == 0
