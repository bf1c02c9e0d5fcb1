"""ESPO (Ou et al. 2025, arXiv 2512.03759): its views (stratified counts, complementary pairs), its ELBO, its
sequence ratio, clipping and KL, against transcriptions of the released code and of DARE's padding-aware port.

The transcription below restates, in our words, what ML-GSAI/ESPO ``espo/espo_trainer.py`` (commit
b5f2dac4c54073a2f36c00bb28bc754a99730159) computes for a LLaDA model (``get_logits`` keeps every position):

* ``forward_process``: after ``set_seed(seed)``, T = the completion length, k = ``torch.randint(0, T + 1, ())``,
  x = round(linspace(k, k + (b - 1)(T + 1) / b, b)) mod (T + 1) (row i masks x_i tokens), then per row the first
  x_i entries of a fresh ``randperm(T)``; ``p_mask`` = x / (T + 1). The prompt is never masked.
* ``_get_elbo`` (reduce_var): -CE / p_mask at the masked completion positions (logits of the masked input),
  -CE / (T / (T + 1) - p_mask) at the others (logits of the complementary input), halved, summed over the
  completion; ``_get_elbo_mc``: the mean over num_mc seeds.
* ``compute_loss``: coef = exp((elbo - old) / T), -min(coef A, clip(coef, 1 - eps_low, 1 + eps_high) A) summed over
  the batch / B, plus beta k2(elbo, ref) summed / (B T) (``compute_approx_kl``: (elbo - ref)^2 / 2).

yjyddq/DARE (commit 83ae8a305a53a914cce563aedceeac88566891cb) ports it with padding: ``compute_espo_sequence_elbo``
(``verl/trainer/ppo/dllm_core_algos.py``) sums over the valid response tokens only, with T their number.
"""

from __future__ import annotations

import copy
import math
import random
from typing import NamedTuple

import float_error
import pytest
import torch
import torch.nn.functional as F
from fake_rewards import varied_reward
from float_error import Computed, Condition, agree, computed, condition, in_float64, loss_and_gradient_agree

from ddmrl.config import SamplerConfig, method_config
from ddmrl.diagnostics import token_credit
from ddmrl.likelihood import sequence_elbo, token_logps
from ddmrl.masking.views import ESPO_SEEDS, Views, apply_view, build_views, espo_counts
from ddmrl.methods import METHODS
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.objectives import OBJECTIVES
from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.weights import token_weights
from ddmrl.rollout import Rollouts
from ddmrl.seeding import generator
from ddmrl.tasks import make_task
from ddmrl.training.grpo import make_views, train_grpo

# ------------------------------------------------------------------------------------------ the transcription


def released_forward_process(batch: torch.Tensor, prompt_length: int, mask_id: int, seed: int, dtype=torch.float32):
    """(noisy batch [b, P + L], p_mask [b, P + L] in ``dtype``) of ``forward_process``, the global RNGs seeded as
    ``set_seed`` does (CPU)."""
    random.seed(seed)
    torch.manual_seed(seed)
    b, length = batch.shape
    target_len = length - prompt_length
    k = torch.randint(0, target_len + 1, ())
    x = torch.round(torch.linspace(float(k), k + (b - 1) * ((target_len + 1) / b), steps=b)).long()
    x = x % (target_len + 1)
    indices = torch.arange(target_len).repeat(b, 1)
    is_mask = indices < x.unsqueeze(1)
    for i in range(b):
        is_mask[i] = is_mask[i][torch.randperm(target_len)]
    is_mask = torch.cat((torch.zeros(b, prompt_length, dtype=torch.bool), is_mask), dim=1)
    noisy = torch.where(is_mask, mask_id, batch)
    return noisy, (x.to(dtype) / (target_len + 1)).unsqueeze(1).repeat(1, length)


def released_elbo(model, input_ids, logits_to_keep: int, mask_id: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    """``_get_elbo`` (reduce_var) of one iteration in ``dtype`` (float32: the release's): [B]."""
    prompt_length = input_ids.shape[1] - logits_to_keep
    perturbed, p_mask = released_forward_process(input_ids, prompt_length, mask_id, seed, dtype)
    targets, p_kept = input_ids[:, -logits_to_keep:], p_mask[:, -logits_to_keep:]
    loss = torch.zeros(input_ids.shape[0], logits_to_keep, dtype=dtype)
    masked = (perturbed == mask_id)[:, -logits_to_keep:]
    logits = model(perturbed).logits[:, -logits_to_keep:].float()
    loss[masked] = F.cross_entropy(logits[masked], targets[masked], reduction="none") / p_kept[masked]
    coupled = input_ids.clone()
    coupled[:, -logits_to_keep:] = torch.where(masked, coupled[:, -logits_to_keep:], mask_id)
    coupled_logits = model(coupled).logits[:, -logits_to_keep:].float()
    loss[~masked] = F.cross_entropy(coupled_logits[~masked], targets[~masked], reduction="none") / (
        logits_to_keep / (logits_to_keep + 1) - p_kept[~masked]
    )
    return -(loss / 2).sum(-1)


def released_elbo_mc(model, input_ids, logits_to_keep, mask_id, seeds: list[int], dtype=torch.float32) -> torch.Tensor:
    """``_get_elbo_mc``: the mean over the num_mc seeds of one iteration. [B]."""
    return torch.stack([released_elbo(model, input_ids, logits_to_keep, mask_id, s, dtype) for s in seeds]).mean(0)


def released_loss(elbo, old, ref, advantages, logits_to_keep, epsilon_low, epsilon_high, beta):
    """``compute_loss`` on [B] ELBOs of one iteration."""
    coef_1 = torch.exp((elbo - old) / logits_to_keep)
    coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
    loss = -torch.min(coef_1 * advantages, coef_2 * advantages).sum() / elbo.shape[0]
    kl = (elbo - ref) ** 2 / 2.0  # compute_approx_kl(..., "k2")
    return loss + beta * kl.sum() / (elbo.shape[0] * logits_to_keep)


def dare_sequence_elbo(logits, targets, mask_indices, p_mask, valid, coupled_logits):
    """DARE's ``compute_espo_sequence_elbo`` of one row ([L, V] logits of the completion, [L] the rest)."""
    masked = mask_indices & valid
    elbo = -(F.cross_entropy(logits[masked], targets[masked], reduction="none") / p_mask[masked]).sum()
    complementary = valid & ~mask_indices
    target_length = valid.sum().to(p_mask.dtype)  # float32 in the release; p_mask's dtype, for float64 runs
    denominator = target_length / (target_length + 1.0) - p_mask[complementary]
    elbo = elbo - (F.cross_entropy(coupled_logits[complementary], targets[complementary], reduction="none")
                   / denominator).sum()  # fmt: skip
    return elbo / 2.0


# ------------------------------------------------------------------------------------------ the views


def test_the_counts_are_stratified_and_each_uniform_over_zero_to_t():
    """Each row's count is uniform on {0..T_i} over u (exactly, on a fine grid of u); the N rows of one draw are
    spread evenly (their counts differ by about (T + 1) / N)."""
    lengths = torch.tensor([5, 5, 5, 3])
    grid = [(i + 0.5) / 840 for i in range(840)]  # 840 = lcm of 1..8: every cell of width 1/(T+1) holds as many
    counts = torch.stack([espo_counts(lengths, u) for u in grid])  # [U, N]
    for i, t in enumerate(lengths.tolist()):
        assert torch.equal(torch.bincount(counts[:, i], minlength=t + 1), torch.full((t + 1,), 840 // (t + 1)))
    c = espo_counts(torch.full((4,), 7), 0.3)  # T + 1 = 8, N = 4: the rows two counts apart, cyclically
    assert sorted(((c - c[0]) % 8).tolist()) == [0, 2, 4, 6]


@pytest.mark.parametrize("seed", [0, 5])
def test_each_pair_masks_every_valid_token_exactly_once_and_the_prompt_never(seed):
    n, length, mu, mc = 4, 6, 2, 2
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[1, 3:] = False  # up to and including the first EOS
    views = build_views(
        "espo", mu=mu, seed=seed, completion_mask=completion_mask, prompt_ids=torch.full((n, 2), 7), pad_id=1,
        views_per_step=mc,
    )  # fmt: skip
    assert views.masks.shape == (2 * mc * mu, n, length) and not views.prompt_masks.any()
    assert views.steps == ((0, 1, 2, 3), (4, 5, 6, 7))
    lengths = completion_mask.sum(1)
    for v in range(0, 2 * mc * mu, 2):
        first, second = views.masks[v], views.masks[v + 1]
        assert torch.equal(first.int() + second.int(), completion_mask.int())  # once each, padding never
        counts = first.sum(1)
        assert torch.allclose(views.t[v], counts / (lengths + 1)) and torch.allclose(
            views.t[v + 1], (lengths - counts) / (lengths + 1)
        )
    again = build_views(
        "espo", mu=mu, seed=seed, completion_mask=completion_mask, prompt_ids=torch.full((n, 2), 7), pad_id=1,
        views_per_step=mc,
    )  # fmt: skip
    assert torch.equal(again.masks, views.masks)


def test_the_elbo_weight_of_a_view_masking_c_of_t_tokens_is_t_plus_1_over_c_over_the_step_views():
    completion_mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    views = build_views(
        "espo", mu=1, seed=2, completion_mask=completion_mask, prompt_ids=torch.full((2, 1), 7), pad_id=1,
        views_per_step=3,
    )  # fmt: skip
    w, z = token_weights("espo_elbo", views, completion_mask)
    assert z is None
    t = completion_mask.sum(1)  # [N]
    for v in range(6):
        c = views.masks[v].sum(1)
        want = views.masks[v] * torch.where(c > 0, (t + 1) / c.clamp_min(1), 0.0)[:, None] / 6
        assert torch.allclose(w[v], want.float())


def test_the_legacy_views_are_the_release_draws():
    """``espo_legacy``: each (step, sample) seed in [0, 4096) drives the release's own forward_process: the same
    masks (its complement beside it) and ratios, over every completion position."""
    n, prompt_length, length, mu, mc, seed = 5, 2, 7, 3, 2, 11
    batch = torch.randint(5, 10, (n, prompt_length + length), generator=torch.Generator().manual_seed(0))
    views = build_views(
        "espo", mu=mu, seed=seed, completion_mask=torch.ones(n, length, dtype=torch.bool),
        prompt_ids=batch[:, :prompt_length], pad_id=1, views_per_step=mc, legacy=True,
    )  # fmt: skip
    seeds = torch.randint(0, ESPO_SEEDS, (mu, mc), generator=generator(seed, "espo_seeds")).tolist()
    for j in range(mu):
        for s in range(mc):
            noisy, p_mask = released_forward_process(batch, prompt_length, 0, seeds[j][s])
            v = 2 * (mc * j + s)
            assert torch.equal(views.masks[v], noisy[:, prompt_length:] == 0)
            assert torch.equal(views.masks[v + 1], noisy[:, prompt_length:] != 0)
            assert torch.allclose(views.t[v], p_mask[:, 0]) and torch.allclose(views.t[v + 1], 7 / 8 - p_mask[:, 0])


def test_the_release_rounds_half_offsets_to_even_counts():
    """Why the release's draws are a switch, not the default: with N = 2 rows and T + 1 = 7, the second row's count
    round(k + 3.5) (halves to even) is one of 4, 6, 8, 10 before the modulo, so it is never 0, 2 or 5: not uniform
    on {0..6}, and the ELBO estimate of that row is biased; ddmrl's counts are uniform."""
    counts = []
    for s in range(100):
        noisy, _ = released_forward_process(torch.full((2, 7), 5), 1, 0, s)
        counts.append(int((noisy[1] == 0).sum()))
    assert set(counts) == {4, 6, 1, 3}
    ours = torch.stack([espo_counts(torch.tensor([6, 6]), (i + 0.5) / 70)[1] for i in range(70)])
    assert torch.equal(torch.bincount(ours), torch.full((7,), 10))


# ------------------------------------------------------------------------------------------ against the release


def perturbed(model, seed: int, scale: float = 0.05):
    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return other


class Step(NamedTuple):
    """ddmrl's optimiser step: its views, the policy's token log-probs [V, N, L] and the sequence ELBOs [N] of the
    policy (with gradient), the old and the reference models, and the objective's output; the condition measures S
    of the old and reference ELBOs (float_error.weighted_scale)."""

    views: Views
    logps: torch.Tensor
    elbo: torch.Tensor
    old: torch.Tensor
    ref: torch.Tensor
    out: ObjectiveOutput
    scales: tuple[float, float]


def ddmrl_step(cfg, models, prompt, completion, completion_mask, advantages, mask_id, seed, step) -> Step:
    """ddmrl's optimiser step ``step`` as the loop computes it; ``models``: the policy, old and reference models.
    In float64 (``advantages``' dtype) the views' ratios c / (T + 1) are exact, as the float64 release's are."""
    policy, old_model, ref_model = models
    views = build_views(
        "espo", mu=cfg.num_iterations, seed=seed, completion_mask=completion_mask, prompt_ids=prompt, pad_id=1,
        views_per_step=cfg.views_per_step, legacy=METHODS["espo"].legacy_views(cfg),
    )  # fmt: skip
    if advantages.dtype == torch.float64:
        views = views._replace(t=views.masks.sum(-1).double() / (completion_mask.sum(-1) + 1))
    weights, _ = token_weights("espo_elbo", views, completion_mask)
    ids = list(views.steps[step])
    inputs = [apply_view(prompt, completion, views, v, mask_id) for v in ids]
    with torch.no_grad():
        old = torch.stack([token_logps(old_model, x, completion) for x in inputs])
        ref = torch.stack([token_logps(ref_model, x, completion) for x in inputs])
    logps = torch.stack([token_logps(policy, x, completion) for x in inputs])
    targets = views.masks[ids] & completion_mask[None]
    x = ObjectiveInputs(logps, old, ref, advantages, weights[ids], None, views.t[ids], targets, completion_mask, 2)
    out = OBJECTIVES[METHODS["espo"].objective](x, cfg)
    w = weights[ids]
    scales = float_error.weighted_scale(w, old, (0, 2)), float_error.weighted_scale(w, ref, (0, 2))
    return Step(views, logps, sequence_elbo(logps, w), sequence_elbo(old, w), sequence_elbo(ref, w), out, scales)


class Sides(NamedTuple):
    """ddmrl's ELBOs (old, reference), loss and gradient and the release's in one dtype, and the condition measures
    of the sums (from float64 values only)."""

    ours: Computed
    release: Computed
    elbos: tuple[torch.Tensor, torch.Tensor]
    elbos_release: tuple[torch.Tensor, torch.Tensor]
    elbo_scales: tuple[float, float]
    clip_ratio: float
    kl: float
    cond: Condition | None


def legacy_sides(cfg, models, prompt, completion, advantages, mask_id, seed) -> Sides:
    """ddmrl's second optimiser step (legacy views) and the release's ``_get_elbo_mc`` on its seeds and
    ``compute_loss``; ``models``: the policy, old and reference models."""
    policy, old_model, ref_model = models
    length = completion.shape[1]
    everything = torch.ones_like(completion, dtype=torch.bool)
    step = ddmrl_step(cfg, models, prompt, completion, everything, advantages, mask_id, seed, 1)
    params = list(policy.parameters())
    ours = computed(step.out.loss, params)

    seeds = torch.randint(0, ESPO_SEEDS, (2, 2), generator=generator(seed, "espo_seeds")).tolist()[1]  # step 1
    input_ids, dtype = torch.cat([prompt, completion], 1), advantages.dtype
    with torch.no_grad():
        old_rel = released_elbo_mc(old_model, input_ids, length, mask_id, seeds, dtype)
        ref_rel = released_elbo_mc(ref_model, input_ids, length, mask_id, seeds, dtype)
    elbo_rel = released_elbo_mc(policy, input_ids, length, mask_id, seeds, dtype)
    loss_rel = released_loss(elbo_rel, old_rel, ref_rel, advantages, length, cfg.epsilon, cfg.epsilon_high, cfg.beta)
    release = Computed(loss_rel.detach(), torch.autograd.grad(loss_rel, params))
    positions = prompt.shape[1] + length
    cond = condition(step.out.loss, step.logps, params, positions) if dtype == torch.float64 else None
    elbos, kl = (step.old, step.ref), step.out.terms["kl"]
    return Sides(ours, release, elbos, (old_rel, ref_rel), step.scales, step.out.terms["clip_ratio"], kl, cond)


@pytest.mark.parametrize("seed", [3, 8])
def test_legacy_elbo_loss_and_gradient_equal_the_release_on_its_masks(make_model, tok, seed):
    """``espo_legacy`` + ``loss_after_eos``: old, reference and current policies differ (ratios away from 1, some
    clipped, KL > 0), two Monte Carlo samples, the second of two optimiser steps. ddmrl's old and reference ELBOs
    equal the release's ``_get_elbo_mc`` on its seeds, and its loss and gradient equal ``compute_loss``.

    Tolerances of the loss and gradient from float32's error (tests/float_error.py): both sides also run in float64
    (the models, the views' ratios and the advantages) and agree there to 1e-10 of the condition measure S, the check
    of the formulas; in float32 each is within n eps32 S of its float64 value and the two within 2 n eps32 S (n = T
    for the loss, T (P + L) for a gradient)."""
    prompt_length, length, n = 3, 6, 4
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(5, 10, (n, prompt_length), generator=g)
    completion = torch.randint(5, 10, (n, length), generator=g)
    completion[1, 4:] = tok.eos_token_id  # EOS padding: the release trains it like any other position
    old_model = make_model(max_positions=prompt_length + length, seed=1)
    models = (perturbed(old_model, 12, scale=0.5), old_model, perturbed(old_model, 11))  # policy, old, reference
    advantages = torch.tensor([1.0, -0.5, 0.8, -1.2])
    cfg = method_config(
        "espo", dict(num_iterations=2, epsilon=0.02, epsilon_high=0.03, beta=0.05), views_per_step=2,
        espo_legacy=True, loss_after_eos=True,
    )  # fmt: skip
    f32 = legacy_sides(cfg, models, prompt, completion, advantages, tok.mask_token_id, seed)
    f64 = legacy_sides(cfg, in_float64(*models), prompt, completion, advantages.double(), tok.mask_token_id, seed)

    terms = float_error.forward_terms(old_model, prompt_length + length) + 2 * length
    for i, what in enumerate(("old", "reference")):
        ours, release = (f32.elbos[i], f64.elbos[i]), (f32.elbos_release[i], f64.elbos_release[i])
        agree(f"the {what} ELBOs", ours, release, f64.elbo_scales[i], terms)
    assert 0 < f32.clip_ratio < 1 and f32.kl > 0  # the check covers the clipped branch and the KL
    assert f64.clip_ratio == f32.clip_ratio  # the same sequences clipped in both precisions
    loss_and_gradient_agree(f32.ours, f32.release, f64.ours, f64.release, f64.cond)


def default_loss(models, prompt, completion, completion_mask, advantages, mask_id, cfg):
    """ddmrl's first optimiser step on default views and its loss restated on its ELBOs, normalised by |y|: (the
    step, the restated loss, the condition measures of the loss from float64 values only)."""
    step = ddmrl_step(cfg, models, prompt, completion, completion_mask, advantages, mask_id, 9, 0)
    y = completion_mask.sum(1)
    ratio = torch.exp((step.elbo - step.old) / y)
    pg = -torch.min(ratio * advantages, ratio.clamp(1 - cfg.epsilon, 1 + cfg.epsilon) * advantages).mean()
    loss = pg + cfg.beta * ((step.elbo - step.ref) ** 2 / 2 / y).mean()
    positions = prompt.shape[1] + completion.shape[1]
    cond = condition(loss, step.logps, (), positions) if advantages.dtype == torch.float64 else None
    return step, loss.detach(), cond


def test_the_default_elbo_is_dares_padding_aware_one_on_the_same_masks(make_model, tok):
    """Paper intent (no switch): only the valid completion tokens (up to and including the first EOS) are masked and
    summed, T their number; DARE's ``compute_espo_sequence_elbo`` gives the same ELBO of every row on ddmrl's masks.
    The loss normalises the ratio's log and the KL by that T (|y|): ddmrl's loss is the loss restated on its ELBOs,
    to float32's error (tests/float_error.py: the float64 losses agree to 1e-10 of the condition measure S, the
    float32 ones within 2 T eps32 S)."""
    prompt_length, length, n = 2, 7, 4
    g = torch.Generator().manual_seed(4)
    prompt = torch.randint(5, 10, (n, prompt_length), generator=g)
    completion = torch.randint(5, 10, (n, length), generator=g)
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[0, 3:] = False
    completion_mask[2, 5:] = False
    old_model = make_model(max_positions=prompt_length + length, seed=3)
    models = (perturbed(old_model, 14, scale=0.5), old_model, perturbed(old_model, 13))  # policy, old, reference
    advantages = torch.tensor([0.7, -1.0, 1.5, -0.2])
    cfg = method_config("espo", dict(num_iterations=1, epsilon=0.02, beta=0.05))
    args = prompt, completion, completion_mask
    step, loss, _ = default_loss(models, *args, advantages, tok.mask_token_id, cfg)
    step64, loss64, cond = default_loss(in_float64(*models), *args, advantages.double(), tok.mask_token_id, cfg)
    views = step.views
    mask, complement = views.masks[0], views.masks[1]

    def dare_elbos(model, p_mask):
        with torch.no_grad():
            logits = model(apply_view(prompt, completion, views, 0, tok.mask_token_id)).logits[:, prompt_length:]
            coupled = model(apply_view(prompt, completion, views, 1, tok.mask_token_id)).logits[:, prompt_length:]
        return torch.stack([
            dare_sequence_elbo(logits[i], completion[i], mask[i], p_mask[i], completion_mask[i], coupled[i])
            for i in range(n)
        ])  # fmt: skip

    # the ELBOs (forward passes, weighted sums of their log-probs): tolerances as the loss's, S the largest
    # sum_t |w_t| times the largest |log-prob| and n the pass's longest chain of sums plus the views' tokens
    terms = float_error.forward_terms(old_model, prompt_length + length) + 2 * length
    p_mask, p_mask64 = (x.t[0][:, None].expand(n, length) for x in (views, step64.views))
    for i, (model, model64) in enumerate(zip(models[1:], in_float64(*models[1:]), strict=True)):  # old, reference
        ours, ours64 = (step.old, step64.old) if i == 0 else (step.ref, step64.ref)
        dare = (dare_elbos(model, p_mask), dare_elbos(model64, p_mask64))
        agree(("the old ELBOs", "the reference ELBOs")[i], (ours, ours64), dare, step64.scales[i], terms)
    assert torch.equal(mask | complement, completion_mask)
    agree("the loss", (step.out.loss, step64.out.loss), (loss, loss64), *cond.of_loss())


def test_legacy_needs_every_completion_position_and_is_refused_elsewhere():
    with pytest.raises(Exception, match="espo_legacy = True: reproduces the release.*set loss_after_eos true"):
        method_config("espo", espo_legacy=True)
    with pytest.raises(ValueError, match="legacy views reproduce maskgrpo_fading or espo or rldf, not unigrpo"):
        build_views("unigrpo", mu=1, seed=0, completion_mask=torch.ones(1, 3, dtype=torch.bool),
                    prompt_ids=torch.ones(1, 1, dtype=torch.long), pad_id=1, legacy=True)  # fmt: skip


def test_credit_of_a_token_is_its_elbo_weight_over_the_batch_and_its_length(tok, make_model):
    """ddmrl.diagnostics at ratio 1: d loss / d log p_v(k) = -A_i omega_v(k) / (N |y_i|), so a token's credit is its
    ELBO weights summed over the views and steps, over N |y_i| (the views built through the loop's make_views)."""
    n, length, prompt_length, mu = 4, 6, 3, 2
    g = torch.Generator().manual_seed(0)
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[2, 4:] = False
    batch = Rollouts(
        torch.randint(5, 10, (n, prompt_length), generator=g), torch.randint(6, 10, (n, length), generator=g),
        completion_mask, torch.stack([torch.randperm(length, generator=g) for _ in range(n)]), [""] * n, 0,
    )  # fmt: skip
    cfg = method_config("espo", dict(num_iterations=mu, num_generations=2, num_prompts=2, beta=0.04), views_per_step=2)
    model = make_model(max_positions=prompt_length + length, seed=1)
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5])
    credit = token_credit(model, cfg, batch, advantages, 7, tok.pad_token_id, tok.mask_token_id)
    views, weights, _, _ = make_views(cfg, batch, 7, tok.pad_token_id, tok.mask_token_id)
    v = views.masks.shape[0]
    assert v == 2 * 2 * mu
    want = weights.sum(0) / (n * completion_mask.sum(1, keepdim=True))
    # tolerance from float32's error (tests/float_error.py, rtol_positive): positive sums (at most the V views' N L
    # weights) and at most 16 products and quotients on either side
    rtol = float_error.rtol_positive(v * n * length + 16)
    assert torch.allclose(credit, want * completion_mask, rtol=rtol, atol=0)


@pytest.mark.parametrize("legacy", [False, True])
def test_a_grpo_run_of_espo_moves_every_parameter(monkeypatch, make_model, legacy):
    """The loop on the tiny model with two Monte Carlo pairs per step, by default and with the release's draws over
    every completion position: finite losses, every parameter moved."""
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    ref = copy.deepcopy(policy)
    shared = dict(max_steps=2, num_prompts=2, num_generations=4, num_iterations=2, learning_rate=1e-2, beta=0.04,
                  sampler=SamplerConfig(block_length=4, steps=4, temperature=1.0))  # fmt: skip
    cfg = method_config("espo", shared, views_per_step=2, espo_legacy=legacy, loss_after_eos=legacy)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    curve, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=100 + it), cfg, 0)
    assert curve[-1]["step"] == 2 and all(math.isfinite(row["loss"]) for row in curve)
    assert [n for n, p in policy.named_parameters() if torch.equal(p, before[n])] == []


def test_espo_refuses_d1s_micro_step_view_index():
    with pytest.raises(Exception, match="legacy_micro_step_views = True: d1's micro-step view index only applies"):
        method_config("espo", legacy_micro_step_views=True)
