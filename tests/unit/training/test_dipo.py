"""DiPO (Zhu et al. 2025, DiRL, arXiv 2512.22234; OpenMOSS/DiRL): its round views, its advantages, its dynamic
sampling and its loss and gradient against a transcription of the release, and against the paper's Eq. 7.

The transcription below restates, in our words, what OpenMOSS/DiRL computes (``train/grpo.py``,
``train/rollout_dapo_server.py``, ``models/sdar/modeling_sdar.py``; ``scripts/grpo.sh`` for the settings):

* ``z_score_normalize``: a group's rewards minus their mean over the population std (ddof 0), 0 when that std is 0;
* DAPO's filter: a group is kept only if 0 < its mean correctness < 1 (and one rollout is right);
* ``generate_training_samples_for_one``: the step map of the full sequence (prompt -1, steps from 1) cut into blocks
  of ``block_size`` from position 0; at most block_size rounds, each taking every block's smallest remaining step:
  ``p_mask`` the positions of that step, ``masked_indices`` the positions of it or a later step, both within the
  response; a round with no target is dropped. ``collect_training_data`` (shrink 1): a response's rounds, then
  padding samples (no target, reward 0, ``is_real`` False) up to block_size;
* the loop (``batch_size_lm`` 1, one optimiser step per rollout batch): each sample's loss divided by the
  accumulation count (responses x block_size) and backpropagated; the loss (``compute_rl_loss``, ``loss_mean``): at
  the real targets, ratio exp(clamp(logp - logp_old, +-10)), -mean(min(r A, clip(r, 1 - eps, 1 + eps + 0.08) A)),
  plus beta times the mean k3 (exp(clamp(ref - logp, +-10)) - 1 + logp - ref). A padding sample's loss is the mean
  of no token (NaN in the release's log) and adds no gradient: it is skipped here but counted in the division.

The release's model (SDAR-8B through its block-diffusion forward) is not the method: both sides score their views
with the same tiny model (ddmrl's ``token_logps``), so the views, normalisations and clipping are what is compared.
The prompt is a whole number of blocks (the release aligns blocks to the sequence, ddmrl to the completion, which
agree then) and every completion position is a loss position (no EOS inside: docs/reproduction.md says how the
release's padding of the EOS block differs).
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import pytest
import torch
from float_error import (
    Computed,
    Condition,
    InFloat64,
    computed,
    condition,
    forward_passes_agree,
    loss_and_gradient_agree,
)

from ddmrl.config import method_config
from ddmrl.likelihood import token_logps
from ddmrl.likelihood.block import block_token_logps
from ddmrl.masking.views import dipo_rounds
from ddmrl.methods import METHODS
from ddmrl.models.tiny_block import TinyBlockDDMConfig, TinyBlockDDMForMaskedLM
from ddmrl.objectives import OBJECTIVES
from ddmrl.objectives.advantages import group_advantages
from ddmrl.objectives.dipo import step_counts
from ddmrl.rollout import Rollouts
from ddmrl.training.grpo import Batch, make_views, objective_inputs, step_views, view_targets

METHOD = METHODS["dipo"]
BLOCK = 4

# ------------------------------------------------------------------------------------------ the transcription


def released_z_score(rewards: list[float]) -> list[float]:
    """``z_score_normalize``."""
    mean = sum(rewards) / len(rewards)
    std = (sum((x - mean) ** 2 for x in rewards) / len(rewards)) ** 0.5
    return [(x - mean) / std if std != 0 else 0 for x in rewards]


def released_keeps(correctness: list[float]) -> bool:
    """The rollout's DAPO filter of one group."""
    mean = sum(correctness) / len(correctness)
    return 0 < mean < 1.0 and max(correctness) == 1.0


def released_rounds(step_map: torch.Tensor, labels: torch.Tensor, block_size: int) -> list[tuple]:
    """``generate_training_samples_for_one``: [(p_mask, masked_indices)] of one sequence, each [T] bool."""
    length = step_map.shape[0]
    response = labels != -100
    nb = (length + block_size - 1) // block_size
    step = torch.full((nb * block_size,), -1, dtype=torch.long)
    step[:length] = step_map
    step = step.view(nb, block_size)
    big = torch.iinfo(step.dtype).max
    out = []
    for _ in range(block_size):
        valid = step.gt(0)
        if not valid.any():
            break
        smallest = step.masked_fill(~valid, big).min(dim=1, keepdim=True).values  # [nb, 1]
        if (smallest == big).all():
            break
        now = step.eq(smallest) & valid & (smallest != big)
        later = (step >= smallest) & valid & (smallest != big)
        step = step.masked_fill(now, -1)
        p_mask, masked = now.view(-1)[:length] & response, later.view(-1)[:length] & response
        if p_mask.sum() > 0:
            out.append((p_mask, masked))
    return out


def released_rl_loss(logp, p_mask, masked, is_real, adv, logp_old, logp_ref, eps, beta):
    """``compute_rl_loss`` of one micro-batch; ``logp`` [B, T] the log-prob of each position's label."""
    keep = (p_mask & is_real[:, None])[masked]
    logp_p = logp[masked][keep]
    adv_p = adv[:, None].expand_as(p_mask)[masked][keep]
    ratio = (logp_p - logp_old[masked][keep]).clamp(-10.0, 10.0).exp()
    clipped = ratio.clamp(1 - eps, 1 + eps + 0.08)
    loss = -torch.minimum(ratio * adv_p, clipped * adv_p).mean()
    if beta > 0:
        d = logp_p - logp_ref[masked][keep]
        loss = loss + beta * ((-d).clamp(-10.0, 10.0).exp() - 1.0 + d).mean()
    return loss


class Sample(NamedTuple):
    """One expanded sample of the release: its row, round, targets and input mask over the completion [L]."""

    row: int
    round: int
    p_mask: torch.Tensor
    masked: torch.Tensor


def released_samples(reveal_step: torch.Tensor, prompt_length: int, rows: list[int]) -> tuple[list[Sample], int]:
    """``collect_training_data`` on the kept ``rows``: their real samples and the accumulation count (rows x
    block_size: the padding samples counted)."""
    n, length = reveal_step.shape
    out = []
    for i in rows:
        step_map = torch.cat([torch.full((prompt_length,), -1), reveal_step[i].long() + 1])  # steps from 1
        labels = torch.cat([torch.full((prompt_length,), -100), torch.ones(length, dtype=torch.long)])
        for r, (p, m) in enumerate(released_rounds(step_map, labels, BLOCK)):
            out.append(Sample(i, r, p[prompt_length:], m[prompt_length:]))
    return out, len(rows) * BLOCK


def release_input(batch: Rollouts, s: Sample, mask_id: int) -> torch.Tensor:
    return torch.cat([batch.prompt_ids[s.row], batch.completion_ids[s.row].masked_fill(s.masked, mask_id)])[None]


def released_loss(model, batch, samples, accumulation, adv, old, ref, mask_id, eps, beta) -> Computed:
    """The release's optimiser step: every sample's loss / accumulation backpropagated (``batch_size_lm`` 1)."""
    model.zero_grad(set_to_none=True)
    total = 0.0
    for s in samples:
        logp = token_logps(model, release_input(batch, s, mask_id), batch.completion_ids[s.row][None])  # [1, L]
        loss = released_rl_loss(logp, s.p_mask[None], s.masked[None], torch.ones(1, dtype=torch.bool),
                                adv[s.row][None], old[s.round, s.row][None], ref[s.round, s.row][None], eps,
                                beta) / accumulation  # fmt: skip
        loss.backward()
        total = total + loss.detach()
    return Computed(total, tuple(p.grad.clone() for p in model.parameters()))


def paper_loss(model, batch, samples, adv, old, ref, mask_id, eps, beta) -> Computed:
    """Eq. 7 on the release's samples: -(sum over the kept rows' targets of C_eps(r, A) - beta k3) / sum_i |tau_i|,
    |tau_i| the distinct sampler steps of row i (symmetric clip, no clamp)."""
    model.zero_grad(set_to_none=True)
    steps = sum(len(torch.unique(batch.reveal_step[i])) for i in {s.row for s in samples})
    total = 0.0
    for s in samples:
        logp = token_logps(model, release_input(batch, s, mask_id), batch.completion_ids[s.row][None])[0][s.p_mask]
        ratio = (logp - old[s.round, s.row][s.p_mask]).exp()
        a = adv[s.row]
        c = torch.minimum(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a)
        d = ref[s.round, s.row][s.p_mask] - logp
        loss = -(c - beta * (d.exp() - d - 1)).sum() / steps
        loss.backward()
        total = total + loss.detach()
    return Computed(total, tuple(p.grad.clone() for p in model.parameters()))


# ------------------------------------------------------------------------------------------ helpers


def blockwise_rollouts(n: int, prompt_length: int, length: int, seed: int) -> Rollouts:
    """Random tokens and a random blockwise trajectory with parallel steps (the release's threshold decoding): the
    blocks in order, each revealed in 1-4 steps of 1 or more tokens, steps counted over the whole sequence."""
    g = torch.Generator().manual_seed(seed)
    reveal = torch.zeros(n, length, dtype=torch.long)
    for i in range(n):
        step = 0
        for b in range(0, length, BLOCK):
            order = torch.randperm(min(BLOCK, length - b), generator=g) + b
            cuts = sorted(set(torch.randint(1, len(order) + 1, (2,), generator=g).tolist()) | {len(order)})
            start = 0
            for c in cuts:
                reveal[i, order[start:c]] = step
                step, start = step + 1, c
    prompt = torch.randint(5, 10, (n, prompt_length), generator=g)
    completion = torch.randint(5, 10, (n, length), generator=g)
    return Rollouts(prompt, completion, torch.ones(n, length, dtype=torch.bool), reveal, [""] * n, 0)


def config(**kw):
    base = dict(num_prompts=2, num_generations=4, num_iterations=1, sampler={"block_length": BLOCK})
    return method_config("dipo", base, **kw)


REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])  # the second group all right: filtered


def release_advantages() -> tuple[torch.Tensor, list[int]]:
    """The rollout's advantages [N] of the kept rows (0 elsewhere) and the kept rows."""
    adv, rows = torch.zeros(8), []
    for k in range(2):
        group = REWARDS[4 * k : 4 * k + 4].tolist()
        if released_keeps(group):
            adv[4 * k : 4 * k + 4] = torch.tensor(released_z_score(group))
            rows += list(range(4 * k, 4 * k + 4))
    return adv, rows


def perturbed(shape, seed: int, size: float) -> torch.Tensor:
    return size * (2 * torch.rand(shape, generator=torch.Generator().manual_seed(seed)) - 1)


class Sides(NamedTuple):
    ours: Computed
    theirs: Computed
    cond: Condition | None


def both_sides(tok, model, batch, adv, release: bool, beta: float, dtype) -> Sides:
    """ddmrl's one optimiser step (mu 1: every round view) and the release's (``release``) or Eq. 7's, at old and
    reference log-probs off the current ones by up to 0.5 nats (the clip and the KL active)."""
    cfg = config(beta=beta, dipo_release_loss=release, epsilon_high=0.28 if release else 0.0,
                 scale_rewards="population")  # fmt: skip
    n = batch.completion_ids.shape[0]
    views, weights, z, inputs = make_views(cfg, batch, 3, tok.pad_token_id, tok.mask_token_id)
    b = Batch(batch, REWARDS, adv.to(dtype), torch.zeros(2, dtype=torch.bool), views, weights, z, inputs,
              view_targets(views, batch.completion_ids))  # fmt: skip
    ids = step_views(views, 0, 0, cfg)
    assert ids == tuple(range(BLOCK))  # every round in the one step
    with torch.no_grad():
        current = torch.stack([token_logps(model, inputs[v], b.target_ids[v]) for v in ids])  # [V, N, L]
    old = (current + perturbed(current.shape, 1, 0.5).to(dtype)).detach()
    ref = (current + perturbed(current.shape, 2, 0.5).to(dtype)).detach()
    logps = torch.stack([token_logps(model, inputs[v], b.target_ids[v]) for v in ids])
    x = objective_inputs(b, old, ref, logps, ids, slice(None), 4)
    loss = OBJECTIVES[METHOD.objective](x, cfg).loss
    params = list(model.parameters())
    cond = condition(loss, [logps], params, batch.prompt_ids.shape[1] + batch.completion_ids.shape[1])
    ours = computed(loss, params)
    samples, accumulation = released_samples(batch.reveal_step, batch.prompt_ids.shape[1], release_advantages()[1])
    other = copy.deepcopy(model)
    a = adv.to(dtype)
    if release:
        theirs = released_loss(other, batch, samples, accumulation, a, old, ref, tok.mask_token_id, 0.2, beta)
    else:
        theirs = paper_loss(other, batch, samples, a, old, ref, tok.mask_token_id, 0.2, beta)
    assert n == 8
    return Sides(ours, theirs, cond if dtype == torch.float64 else None)


# ------------------------------------------------------------------------------------------ the method


def test_what_dipo_fixes_and_its_defaults():
    p = METHOD.params()
    assert METHOD.fixed() == {"remasking": "dipo"}
    assert (METHOD.objective, METHOD.weighting) == ("dipo", "masked_mean")
    assert p.beta == 0.0 and p.epsilon == 0.2 and p.epsilon_high == 0.0 and p.kl_target == "ref"
    assert p.scale_rewards == "group" and not p.dipo_release_loss
    assert config(scale_rewards="population").scale_rewards == "population"


# ------------------------------------------------------------------------------------------ (a) advantages, filter


def test_the_advantages_are_the_releases_z_scores_and_its_filtered_groups_are_zero():
    adv, rows = release_advantages()
    ours, zero_std = group_advantages(REWARDS, 4, "population")
    assert rows == [0, 1, 2, 3] and zero_std.tolist() == [False, True]
    assert torch.allclose(ours, adv, rtol=0, atol=4 * torch.finfo(torch.float32).eps)
    assert torch.equal(ours[4:], torch.zeros(4))  # the filtered group: exactly 0, so the objective drops its rows
    inexact = torch.full((6,), 0.3)  # equal rewards of float32 std 3e-8 (a rounded mean): still exactly 0
    assert torch.equal(group_advantages(inexact, 6, "population")[0], torch.zeros(6))


# ------------------------------------------------------------------------------------------ (b) the views


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_round_views_are_the_releases_samples(tok, seed):
    """View rho of row i masks the release's masked_indices and trains its p_mask, for every real sample; the rounds
    a row lacks are empty views (the release's padding samples); a view's steps are its blocks with a target."""
    batch = blockwise_rollouts(6, 4, 10, seed)
    views, weights, _, _ = make_views(config(), batch, 3, tok.pad_token_id, tok.mask_token_id)
    samples, _ = released_samples(batch.reveal_step, 4, list(range(6)))
    assert views.masks.shape == (BLOCK, 6, 10) and not views.prompt_masks.any()
    seen = set()
    for s in samples:
        assert torch.equal(views.masks[s.round, s.row], s.masked), s
        assert torch.equal(views.target_masks[s.round, s.row], s.p_mask), s
        seen.add((s.round, s.row))
    for r in range(BLOCK):
        for i in range(6):
            if (r, i) not in seen:
                assert not views.target_masks[r, i].any()
    assert torch.equal(weights, views.target_masks.float())
    steps = step_counts(views.target_masks, BLOCK).sum(0)  # [N]
    assert steps.tolist() == [len(torch.unique(batch.reveal_step[i])) for i in range(6)]
    assert torch.equal(views.target_masks.sum(0), torch.ones(6, 10, dtype=torch.long))  # each token once


def test_rounds_rank_the_steps_within_each_block():
    steps = torch.tensor([[0, 0, 2, 1, 3, 5, 4, 5, 6, 7]])
    assert dipo_rounds(steps, 4).tolist() == [[0, 0, 2, 1, 0, 2, 1, 2, 0, 1]]


def test_the_rounds_spread_over_the_optimiser_steps(tok):
    batch = blockwise_rollouts(4, 4, 8, 0)
    views, *_ = make_views(config(num_iterations=2, num_generations=4, num_prompts=1), batch, 3, tok.pad_token_id,
                           tok.mask_token_id)  # fmt: skip
    assert views.steps == ((0, 1), (2, 3))


# ------------------------------------------------------------------------------------------ (c) loss and gradient


@pytest.mark.parametrize(("release", "beta"), [(True, 0.0), (True, 0.1), (False, 0.0), (False, 0.1)])
def test_loss_and_gradient_equal_the_release_and_eq7_on_identical_inputs(tok, make_model, release, beta):
    """One optimiser step over the round views of two groups (one filtered), at old and reference log-probs that put
    the clip and the KL to work: with ``dipo_release_loss`` ddmrl's loss and gradient are the release's (its upper
    clip 1 + eps + 0.08 as epsilon_high 0.28, population-std advantages); by default they are Eq. 7's.

    Tolerances from float32's error (tests/float_error.py): both sides also run in float64 (the model, the
    advantages and the log-probs) and agree there to 1e-10 of the condition measure S, the check of the formulas; in
    float32 each is within n eps32 S of its float64 value and the two within 2 n eps32 S (n = T for the loss,
    T (P + L) for a gradient)."""
    prompt_length, length = 4, 10
    model = make_model(max_positions=prompt_length + length, seed=2)
    batch = blockwise_rollouts(8, prompt_length, length, seed=5)
    adv = release_advantages()[0]
    f32 = both_sides(tok, model, batch, adv, release, beta, torch.float32)
    f64 = both_sides(tok, InFloat64(model), batch, adv.double(), release, beta, torch.float64)
    assert f32.ours.loss != 0
    loss_and_gradient_agree(f32.ours, f32.theirs, f64.ours, f64.theirs, f64.cond)


# ------------------------------------------------------------------------------------------ (d) exact states


def test_under_block_attention_a_round_view_scores_each_step_at_its_own_state(tok):
    """On a block-diffusion model (TinyBlockDDM, ``ddmrl.likelihood.block``) the log-prob of every target of round
    view rho equals its log-prob at the sampler's state before its step (every position revealed at that step or
    later masked: the trajectory's own state, one view per sampler step): a noised block sees the clean blocks
    before it and never a later one, so the other blocks' rounds do not reach it. Tolerance from float32's error
    (two passes of one network on other inputs: tests/float_error.py)."""
    prompt_length, length = 4, 12
    torch.manual_seed(0)
    cfg = TinyBlockDDMConfig(vocab_size=len(tok), hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
                             max_position_embeddings=prompt_length + length, mask_token_id=tok.mask_token_id,
                             block_size=BLOCK)  # fmt: skip
    model = TinyBlockDDMForMaskedLM(cfg).eval()
    batch = blockwise_rollouts(5, prompt_length, length, seed=7)
    views, _, _, inputs = make_views(config(num_prompts=1, num_generations=5), batch, 3, tok.pad_token_id,
                                     tok.mask_token_id)  # fmt: skip
    steps = batch.reveal_step

    def run(m):
        ours, theirs = torch.zeros(5, length), torch.zeros(5, length)
        with torch.no_grad():
            for v in range(views.masks.shape[0]):
                logp = block_token_logps(m, inputs[v], batch.completion_ids, block_length=BLOCK)
                ours = torch.where(views.target_masks[v], logp.to(ours.dtype), ours)
            for s in range(int(steps.max()) + 1):
                state = torch.cat([batch.prompt_ids, batch.completion_ids.masked_fill(steps >= s, tok.mask_token_id)],
                                  1)  # fmt: skip
                logp = block_token_logps(m, state, batch.completion_ids, block_length=BLOCK)
                theirs = torch.where(steps == s, logp.to(theirs.dtype), theirs)
        return ours, theirs

    forward_passes_agree("a round's log-probs", run, model, prompt_length + 2 * length)


def test_credit_of_every_token_is_one_over_the_steps_of_its_optimiser_step(tok, make_model):
    """Eq. 7 at ratio 1: d loss / d log p(k) = -A_i / S, S the sampler steps of the optimiser step's views over the
    rows of nonzero advantage, so every token of such a row has credit 1 / S (``ddmrl.diagnostics.token_credit``),
    every token of a zero-advantage row none."""
    from ddmrl.diagnostics import token_credit

    batch = blockwise_rollouts(8, 4, 10, seed=3)
    model = make_model(max_positions=14, seed=1)
    adv = release_advantages()[0]  # the second group's rows 0
    for mu in (1, 2):
        cfg = config(num_iterations=mu)
        credit = token_credit(model, cfg, batch, adv, 3, tok.pad_token_id, tok.mask_token_id)
        views, *_ = make_views(cfg, batch, 3, tok.pad_token_id, tok.mask_token_id)
        want = torch.zeros(8, 10)
        for ids in views.steps:
            targets = views.target_masks[list(ids)] & (adv != 0)[None, :, None]
            want += targets.sum(0) / step_counts(targets, BLOCK).sum().clamp_min(1)  # a step with no target: 0
        assert torch.allclose(credit, want, rtol=1e-6, atol=0), mu
        assert torch.equal(credit[4:], torch.zeros(4, 10))
