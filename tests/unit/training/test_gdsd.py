"""GDSD and GDSD-TLC (Tang et al. 2026, arXiv 2605.29398): their views, weights, advantages, loss and gradient against
a transcription of the released code, and the identities their definitions rest on.

The transcription below restates, in our words, what GaryBall/GDSD (commit 3fb6780) computes for a LLaDA model
(``get_logits`` keeps every position) in ``gdsd/trainers/gdsd_trainer_batchll.py`` (``rl_loss_type: gdsd``) and
``gdsd_trainer_tlc.py`` (``gdsd_tlc``):

* ``forward_process`` (ESPO's, unchanged): after ``set_seed(seed)``, T = the completion length, k =
  ``torch.randint(0, T + 1, ())``, x = round(linspace(k, k + (b - 1)(T + 1) / b, b)) mod (T + 1) (row i masks x_i
  tokens), then per row the first x_i entries of a fresh ``randperm(T)``; ``p_mask`` = x / (T + 1).
* ``_compute_denoise_probs_from_masked_batch`` (``reduce_var``, its default everywhere it is called): CE at the masked
  completion positions (logits of the masked input) and at the others (logits of the complementary input), halved,
  summed over the completion, negated: one value per (row, Monte Carlo seed). TLC: before each CE the logits minus
  their mean over the vocabulary, detached; the masked CE divided by p_mask, the complementary one by
  T / (T + 1) - p_mask.
* ``compute_loss``: d = clamp(l - l_old, log(1 - eps_low), log(1 + eps_high)) per (row, seed),
  loss = sum over rows and seeds of (d / T - psi A)^2, / B; plus beta sum (l - l_ref)^2 / 2 / (B num_mc T) (k2).
* ``_generate_and_score_completions`` (``leave_one_out = True``): A = r - (sum of the group - r) / (G - 1), divided by
  std + 1e-4 only with ``scale_rewards`` (false in its recipes).
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple

import float_error
import pytest
import torch
import torch.nn.functional as F
from fake_rewards import varied_reward
from float_error import Computed, Condition, agree, computed, condition, in_float64, loss_and_gradient_agree
from test_espo import released_forward_process  # GDSD's release runs ESPO's forward_process unchanged

from ddmrl.config import SamplerConfig, method_config
from ddmrl.diagnostics import token_credit
from ddmrl.likelihood import token_logps
from ddmrl.masking.views import ESPO_SEEDS, Views, apply_view, build_views
from ddmrl.methods import METHODS
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.objectives import OBJECTIVES
from ddmrl.objectives.advantages import group_advantages
from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.gdsd import pair_log_likelihoods
from ddmrl.objectives.weights import token_weights
from ddmrl.rollout import Rollouts
from ddmrl.seeding import generator
from ddmrl.tasks import make_task
from ddmrl.training.grpo import make_views, train_grpo

# ------------------------------------------------------------------------------------------ the transcription


def released_denoise_probs(model, input_ids, logits_to_keep, mask_id, seed, tlc: bool, dtype=torch.float32):
    """``_compute_denoise_probs_from_masked_batch`` (reduce_var) of one seed: [B]; ``tlc``: the TLC trainer's."""
    prompt_length = input_ids.shape[1] - logits_to_keep
    perturbed, p_mask = released_forward_process(input_ids, prompt_length, mask_id, seed, dtype)
    targets, p_kept = input_ids[:, -logits_to_keep:], p_mask[:, -logits_to_keep:]
    loss = torch.zeros(input_ids.shape[0], logits_to_keep, dtype=dtype)
    masked = (perturbed == mask_id)[:, -logits_to_keep:]
    logits = model(perturbed).logits[:, -logits_to_keep:].float()
    if tlc:
        logits = logits - logits.mean(dim=-1, keepdim=True).detach()
    ce = F.cross_entropy(logits[masked], targets[masked], reduction="none")
    loss[masked] = ce / p_kept[masked] if tlc else ce
    coupled = input_ids.clone()
    coupled[:, -logits_to_keep:] = torch.where(masked, coupled[:, -logits_to_keep:], mask_id)
    coupled_logits = model(coupled).logits[:, -logits_to_keep:].float()
    if tlc:
        coupled_logits = coupled_logits - coupled_logits.mean(dim=-1, keepdim=True).detach()
    ce = F.cross_entropy(coupled_logits[~masked], targets[~masked], reduction="none")
    loss[~masked] = ce / (logits_to_keep / (logits_to_keep + 1) - p_kept[~masked]) if tlc else ce
    return -(loss / 2).sum(-1)


def released_denoise_mc(model, input_ids, logits_to_keep, mask_id, seeds, tlc, dtype=torch.float32):
    """``_get_denoise_probs`` of one iteration: one value per (row, seed), [B, num_mc]."""
    return torch.stack(
        [released_denoise_probs(model, input_ids, logits_to_keep, mask_id, s, tlc, dtype) for s in seeds], 1
    )


def released_loss(logps, old, ref, advantages, logits_to_keep, epsilon_low, epsilon_high, beta, psi):
    """``compute_loss`` on [B, num_mc] values of one iteration."""
    batch_size, num_mc = logps.shape
    diff = (logps - old).clamp(math.log(1 - epsilon_low), math.log(1 + epsilon_high))
    loss = ((diff / logits_to_keep - psi * advantages.view(-1, 1)) ** 2).sum() / batch_size
    kl = (logps - ref) ** 2 / 2.0  # compute_approx_kl(..., "k2")
    return loss + beta * kl.sum() / (batch_size * num_mc * logits_to_keep)


def released_advantages(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """The leave-one-out advantages of ``_generate_and_score_completions`` (``scale_rewards`` false)."""
    grouped = rewards.view(-1, num_generations)
    baseline = (grouped.sum(dim=1, keepdim=True) - grouped) / (num_generations - 1)
    return (grouped - baseline).view(-1)


# ------------------------------------------------------------------------------------------ views, weights, advantages


@pytest.mark.parametrize("name", ["gdsd", "gdsd_tlc"])
def test_the_legacy_views_are_the_release_draws(name):
    """``gdsd_legacy``: each (step, sample) seed in [0, 4096) drives the release's own forward_process: the same
    masks (its complement beside it) and ratios, over every completion position."""
    n, prompt_length, length, mu, mc, seed = 5, 2, 7, 3, 2, 11
    batch = torch.randint(5, 10, (n, prompt_length + length), generator=torch.Generator().manual_seed(0))
    cfg = method_config(name, dict(num_iterations=mu), views_per_step=mc, gdsd_legacy=True, loss_after_eos=True)
    assert METHODS[name].legacy_views(cfg) and not METHODS[name].legacy_views(method_config(name, {}))
    views = build_views(
        cfg.remasking, mu=mu, seed=seed, completion_mask=torch.ones(n, length, dtype=torch.bool),
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


def test_the_weights_of_a_pair_count_each_valid_token_once():
    """GDSD: 1/2 on each view's masked valid tokens, so over a pair every valid token has weight exactly 1/2 and
    padding 0; TLC: 1 / (2 t) of its view (t = c / (T + 1), the complement's (T - c) / (T + 1))."""
    completion_mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    views = build_views(
        "espo", mu=1, seed=2, completion_mask=completion_mask, prompt_ids=torch.full((2, 1), 7), pad_id=1,
        views_per_step=3,
    )  # fmt: skip
    plain, z = token_weights(METHODS["gdsd"].weighting, views, completion_mask)
    tlc, z_tlc = token_weights(METHODS["gdsd_tlc"].weighting, views, completion_mask)
    assert z is None and z_tlc is None
    assert torch.equal(plain.view(3, 2, 2, 4).sum(1), completion_mask.float().expand(3, 2, 4) / 2)
    t = completion_mask.sum(1)  # [N]
    for v in range(6):
        c = views.masks[v].sum(1)  # the complement's is T minus its partner's
        ratio = c / (t + 1)
        assert torch.allclose(views.t[v], ratio.float())
        want = views.masks[v] / (2 * ratio.clamp_min(1e-8))[:, None]
        assert torch.allclose(tlc[v], want.float())


def test_leave_one_out_advantages_are_the_release():
    """scale_rewards leave_one_out (GDSD's default): r minus the mean of the others, = G / (G - 1) (r - mean)."""
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 2.0, 2.0, 2.0, 2.0, 0.0, 1.0, 1.0, 3.0])
    ours, flat = group_advantages(rewards, 4, method_config("gdsd", {}).scale_rewards)
    assert torch.allclose(ours, released_advantages(rewards, 4), atol=1e-6, rtol=0)  # sums of four values < 8
    assert flat.tolist() == [False, True, False]
    centred, _ = group_advantages(rewards, 4, "none")
    assert torch.allclose(ours, centred * 4 / 3, atol=1e-6, rtol=0)


def test_tlc_logit_centralisation_is_an_identity_of_the_log_probs_and_their_gradient():
    """TLC's logits - mean(logits).detach() before the cross-entropy: softmax is shift invariant and the detached
    mean is a constant to autograd, so the CE and its gradient are the uncentred ones (in float64, within the
    log-softmax's rounding: each side a log-sum-exp of V terms, within (V + 2) eps64 S of the exact value, S = max
    |logit| + log V bounding its terms; the two sides within 2 (V + 2) eps64 S <= 4 V eps64 S)."""
    g = torch.Generator().manual_seed(0)
    logits = (4 * torch.randn(6, 11, generator=g, dtype=torch.float64)).requires_grad_()
    targets = torch.randint(0, 11, (6,), generator=g)
    plain = F.cross_entropy(logits, targets, reduction="none")
    centred = F.cross_entropy(logits - logits.mean(-1, keepdim=True).detach(), targets, reduction="none")
    weights = torch.rand(6, generator=g, dtype=torch.float64)
    grad_plain = torch.autograd.grad((weights * plain).sum(), logits)[0]
    grad_centred = torch.autograd.grad((weights * centred).sum(), logits)[0]
    s = float(logits.detach().abs().max()) + math.log(11)
    bound = 4 * 11 * torch.finfo(torch.float64).eps * s
    assert float_error.gap(plain, centred) <= bound and float_error.gap(grad_plain, grad_centred) <= bound


# ------------------------------------------------------------------------------------------ against the release


def perturbed(model, seed: int, scale: float = 0.05):
    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return other


class Step(NamedTuple):
    """ddmrl's optimiser step: its views, the policy's token log-probs [V, N, L] (with gradient), the step's
    weights, the pairs' values [M, N] of the old and reference models, the objective's output, and the condition
    measures S of the old and reference values (float_error.weighted_scale)."""

    views: Views
    logps: torch.Tensor
    weights: torch.Tensor
    old: torch.Tensor
    ref: torch.Tensor
    out: ObjectiveOutput
    scales: tuple[float, float]


def ddmrl_step(cfg, models, prompt, completion, completion_mask, advantages, mask_id, seed, step) -> Step:
    """ddmrl's optimiser step ``step`` as the loop computes it; ``models``: the policy, old and reference models.
    In float64 (``advantages``' dtype) the views' ratios c / (T + 1) are exact, as the float64 release's are."""
    method = METHODS[cfg.method]
    policy, old_model, ref_model = models
    views = build_views(
        cfg.remasking, mu=cfg.num_iterations, seed=seed, completion_mask=completion_mask, prompt_ids=prompt,
        pad_id=1, views_per_step=cfg.views_per_step, legacy=method.legacy_views(cfg),
    )  # fmt: skip
    if advantages.dtype == torch.float64:
        total = completion_mask.sum(-1) + 1
        views = views._replace(t=(views.masks & completion_mask[None]).sum(-1).double() / total)
    weights, _ = token_weights(method.weighting, views, completion_mask)
    ids = list(views.steps[step])
    inputs = [apply_view(prompt, completion, views, v, mask_id) for v in ids]
    with torch.no_grad():
        old = torch.stack([token_logps(old_model, x, completion) for x in inputs])
        ref = torch.stack([token_logps(ref_model, x, completion) for x in inputs])
    logps = torch.stack([token_logps(policy, x, completion) for x in inputs])
    targets = views.masks[ids] & completion_mask[None]
    w = weights[ids]
    x = ObjectiveInputs(logps, old, ref, advantages, w, None, views.t[ids], targets, completion_mask, 2)
    out = OBJECTIVES[method.objective](x, cfg)
    pair_weights = w.abs().view(-1, 2, *w.shape[1:]).sum(1)  # [M, N, L]: a pair's sum_t |w_t| per token
    scales = tuple(float_error.weighted_scale(pair_weights, x, 2) for x in (old, ref))
    return Step(views, logps, w, pair_log_likelihoods(old, w), pair_log_likelihoods(ref, w), out, scales)


class Sides(NamedTuple):
    """ddmrl's pair values (old, reference), loss and gradient and the release's in one dtype, and the condition
    measures (from float64 values only)."""

    ours: Computed
    release: Computed
    values: tuple[torch.Tensor, torch.Tensor]
    values_release: tuple[torch.Tensor, torch.Tensor]
    scales: tuple[float, float]
    clip_ratio: float
    kl: float
    cond: Condition | None


def legacy_sides(cfg, models, prompt, completion, advantages, mask_id, seed) -> Sides:
    """ddmrl's second optimiser step (legacy views) and the release's ``_get_denoise_probs`` on its seeds and
    ``compute_loss``; ``models``: the policy, old and reference models."""
    policy, old_model, ref_model = models
    length, tlc = completion.shape[1], cfg.method == "gdsd_tlc"
    everything = torch.ones_like(completion, dtype=torch.bool)
    step = ddmrl_step(cfg, models, prompt, completion, everything, advantages, mask_id, seed, 1)
    params = list(policy.parameters())
    ours = computed(step.out.loss, params)

    mc = cfg.views_per_step
    seeds = torch.randint(0, ESPO_SEEDS, (2, mc), generator=generator(seed, "espo_seeds")).tolist()[1]  # step 1
    input_ids, dtype = torch.cat([prompt, completion], 1), advantages.dtype
    with torch.no_grad():
        old_rel = released_denoise_mc(old_model, input_ids, length, mask_id, seeds, tlc, dtype)
        ref_rel = released_denoise_mc(ref_model, input_ids, length, mask_id, seeds, tlc, dtype)
    logps_rel = released_denoise_mc(policy, input_ids, length, mask_id, seeds, tlc, dtype)
    eps_high = cfg.epsilon_high or cfg.epsilon
    loss_rel = released_loss(logps_rel, old_rel, ref_rel, advantages, length, cfg.epsilon, eps_high, cfg.beta, cfg.psi)
    release = Computed(loss_rel.detach(), torch.autograd.grad(loss_rel, params))
    positions = prompt.shape[1] + length
    cond = condition(step.out.loss, step.logps, params, positions) if dtype == torch.float64 else None
    values = step.old.T, step.ref.T  # [N, M] as the release's [B, num_mc]
    terms = step.out.terms
    return Sides(ours, release, values, (old_rel, ref_rel), step.scales, terms["clip_ratio"], terms["kl"], cond)


# the clip ranges put some pairs' log-ratios (up to 0.26 for GDSD's values, 1.1 for TLC's 1 / t-weighted ones) outside
# and some inside, each at least 0.01 from a bound
@pytest.mark.parametrize(("name", "seed", "eps", "eps_high"), [("gdsd", 3, 0.1, 0.15), ("gdsd_tlc", 8, 0.5, 0.3)])
def test_legacy_values_loss_and_gradient_equal_the_release_on_its_masks(make_model, tok, name, seed, eps, eps_high):
    """``gdsd_legacy`` + ``loss_after_eos``: old, reference and current policies differ (some log-ratios clipped,
    some not, KL > 0), two Monte Carlo samples, the second of two optimiser steps, psi 2. ddmrl's old and reference
    pair values equal the release's ``_get_denoise_probs`` on its seeds (TLC: with its centralised logits), and its
    loss and gradient equal ``compute_loss``.

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
    models = (perturbed(old_model, 12, scale=0.03), old_model, perturbed(old_model, 11))  # policy, old, reference
    advantages = torch.tensor([1.0, -0.5, 0.8, -1.2])
    shared = dict(num_iterations=2, epsilon=eps, epsilon_high=eps_high, beta=0.05)
    cfg = method_config(name, shared, views_per_step=2, psi=2.0, gdsd_legacy=True, loss_after_eos=True)
    f32 = legacy_sides(cfg, models, prompt, completion, advantages, tok.mask_token_id, seed)
    f64 = legacy_sides(cfg, in_float64(*models), prompt, completion, advantages.double(), tok.mask_token_id, seed)

    terms = float_error.forward_terms(old_model, prompt_length + length) + 2 * length
    for i, what in enumerate(("old", "reference")):
        ours, release = (f32.values[i], f64.values[i]), (f32.values_release[i], f64.values_release[i])
        agree(f"the {what} values", ours, release, f64.scales[i], terms)
    assert 0 < f32.clip_ratio < 1 and f32.kl > 0  # the check covers both sides of the clip and the KL
    assert f64.clip_ratio == f32.clip_ratio  # the same pairs clipped in both precisions
    loss_and_gradient_agree(f32.ours, f32.release, f64.ours, f64.release, f64.cond)


def test_the_default_loss_is_the_formula_on_the_valid_tokens(make_model, tok):
    """Paper intent (no switch): only the valid completion tokens (up to and including the first EOS) are masked and
    summed, T their number, and the log-ratio is divided by that |y|: ddmrl's loss is the module's formula restated
    on its pair values, to float32's error (float_error.agree: the float64 losses within 1e-10 S, the float32 ones
    within 2 T eps32 S); each pair's weights count each valid token once (GDSD) and no padding."""
    prompt_length, length, n = 2, 7, 4
    g = torch.Generator().manual_seed(4)
    prompt = torch.randint(5, 10, (n, prompt_length), generator=g)
    completion = torch.randint(5, 10, (n, length), generator=g)
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[0, 3:] = False
    completion_mask[2, 5:] = False
    old_model = make_model(max_positions=prompt_length + length, seed=3)
    models = (perturbed(old_model, 14, scale=0.03), old_model, perturbed(old_model, 13))  # policy, old, reference
    advantages = torch.tensor([0.7, -1.0, 1.5, -0.2])
    cfg = method_config("gdsd", dict(num_iterations=1, epsilon=0.05, beta=0.05), views_per_step=2, psi=3.0)

    def restated(adv):
        step = ddmrl_step(cfg, models if adv.dtype == torch.float32 else in_float64(*models), prompt, completion,
                          completion_mask, adv, tok.mask_token_id, 9, 0)  # fmt: skip
        y = completion_mask.sum(1)
        ll = pair_log_likelihoods(step.logps, step.weights)  # [M, N]
        d = (ll - step.old).clamp(math.log(1 - cfg.epsilon), math.log(1 + cfg.epsilon))
        loss = ((d / y - cfg.psi * adv) ** 2).sum(0).mean() + cfg.beta * ((ll - step.ref) ** 2 / (2 * y)).mean()
        positions = prompt.shape[1] + completion.shape[1]
        cond = condition(loss, step.logps, (), positions) if adv.dtype == torch.float64 else None
        return step, loss.detach(), cond

    step, loss, _ = restated(advantages)
    step64, loss64, cond = restated(advantages.double())
    pairs = step.weights.view(2, 2, n, length).sum(1)
    assert torch.equal(pairs, completion_mask.float().expand(2, n, length) / 2)
    agree("the loss", (step.out.loss, step64.out.loss), (loss, loss64), *cond.of_loss())


def test_a_clipped_log_ratio_has_no_gradient_and_the_unclipped_one_pulls_towards_psi_a():
    """d loss / d l_theta = 2 (d / |y| - psi A) / (N |y|) per pair where l_theta - l_old is inside the clip range,
    0 outside it; the loss is 0 where every pair's log-ratio per token equals psi A."""
    cfg = method_config("gdsd", dict(epsilon=0.1), psi=0.5)
    n, length = 3, 4
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    weights = torch.zeros(2, n, length, dtype=torch.float64)
    weights[0, :, :2], weights[1, :, 2:] = 0.5, 0.5  # one pair, each token once
    old = -torch.ones(2, n, length, dtype=torch.float64)
    advantages = torch.tensor([0.02, -0.01, 1.0], dtype=torch.float64)
    shift = torch.tensor([0.08, -0.04, 0.5], dtype=torch.float64)  # the pair's log-ratio: 0.08, -0.04 (in), 0.5 (out)
    logps = (old + shift[None, :, None] / 2).requires_grad_()
    targets = weights > 0
    x = ObjectiveInputs(logps, old, None, advantages, weights, None, torch.ones(2, n), targets, completion_mask, 3)
    out = OBJECTIVES["gdsd"](x, cfg)
    grad = torch.autograd.grad(out.loss, logps)[0]
    want = 2 * (shift / length - cfg.psi * advantages) / (n * length)  # rows 0, 1 inside the range
    # float64 with a dozen roundings on either side: 1e-12 relative is thousands of eps64
    assert torch.allclose(grad[:, :2], (weights * want[None, :, None])[:, :2], rtol=1e-12, atol=0)
    assert torch.equal(grad[:, 2], torch.zeros_like(grad[:, 2])) and out.terms["clip_ratio"] == pytest.approx(1 / 3)
    assert out.loss.item() == pytest.approx(((shift[:2] / length - 0.5 * advantages[:2]) ** 2).sum().item() / 3
                                            + (math.log(1.1) / length - 0.5) ** 2 / 3, rel=1e-12)  # fmt: skip
    at_teacher = x._replace(advantages=shift / (length * cfg.psi))  # every pair's log-ratio per token is psi A
    assert OBJECTIVES["gdsd"](at_teacher, method_config("gdsd", dict(epsilon=0.9), psi=0.5)).loss.item() < 1e-30


# ------------------------------------------------------------------------------------------ the loop, the config


@pytest.mark.parametrize("name", ["gdsd", "gdsd_tlc"])
def test_credit_of_a_token_is_its_weight_times_two_psi_over_the_batch_and_its_length(tok, make_model, name):
    """ddmrl.diagnostics at log-ratio 0 (inside the clip): d loss / d log p_v(k) = -2 psi A_i omega_v(k) / (N |y_i|),
    so a token's credit is 2 psi times its weights summed over the views and steps, over N |y_i| (the views built
    through the loop's make_views)."""
    n, length, prompt_length, mu = 4, 6, 3, 2
    g = torch.Generator().manual_seed(0)
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[2, 4:] = False
    batch = Rollouts(
        torch.randint(5, 10, (n, prompt_length), generator=g), torch.randint(6, 10, (n, length), generator=g),
        completion_mask, torch.stack([torch.randperm(length, generator=g) for _ in range(n)]), [""] * n, 0,
    )  # fmt: skip
    shared = dict(num_iterations=mu, num_generations=2, num_prompts=2, beta=0.04)
    cfg = method_config(name, shared, views_per_step=2, psi=1.5)
    model = make_model(max_positions=prompt_length + length, seed=1)
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5])
    credit = token_credit(model, cfg, batch, advantages, 7, tok.pad_token_id, tok.mask_token_id)
    views, weights, _, _ = make_views(cfg, batch, 7, tok.pad_token_id, tok.mask_token_id)
    assert views.masks.shape[0] == 2 * 2 * mu
    want = 2 * cfg.psi * weights.sum(0) / (n * completion_mask.sum(1, keepdim=True))
    # tolerance from float32's error (tests/float_error.py, rtol_positive): positive sums (at most the V views' N L
    # weights) and at most 16 products and quotients on either side
    rtol = float_error.rtol_positive(views.masks.shape[0] * n * length + 16)
    assert torch.allclose(credit, want * completion_mask, rtol=rtol, atol=0)


@pytest.mark.parametrize(("name", "legacy"), [("gdsd", False), ("gdsd_tlc", True)])
def test_a_grpo_run_of_gdsd_moves_every_parameter(monkeypatch, make_model, name, legacy):
    """The loop on the tiny model with two Monte Carlo pairs per step, by default (GDSD) and with the release's
    draws over every completion position (TLC): finite losses, every parameter moved."""
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    ref = copy.deepcopy(policy)
    shared = dict(max_steps=2, num_prompts=2, num_generations=4, num_iterations=2, learning_rate=1e-2, beta=0.04,
                  sampler=SamplerConfig(block_length=4, steps=4, temperature=1.0))  # fmt: skip
    cfg = method_config(name, shared, views_per_step=2, gdsd_legacy=legacy, loss_after_eos=legacy)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    curve, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=100 + it), cfg, 0)
    assert curve[-1]["step"] == 2 and all(math.isfinite(row["loss"]) for row in curve)
    assert {"kl", "clip_ratio"} <= set(curve[-1])
    assert [n for n, p in policy.named_parameters() if torch.equal(p, before[n])] == []


def test_the_release_settings_and_the_refusals():
    cfg = method_config("gdsd", {})
    assert (cfg.remasking, cfg.views_per_step, cfg.scale_rewards) == ("espo", 1, "leave_one_out")
    assert (cfg.epsilon, cfg.beta, cfg.psi) == (4e-4, 1e-3, 1.0)
    tlc = method_config("gdsd_tlc", {})
    assert all(getattr(tlc, k) == getattr(cfg, k) for k in type(cfg).__pydantic_fields__ if k != "method")
    with pytest.raises(Exception, match="gdsd_legacy = True: reproduces the release.*set loss_after_eos true"):
        method_config("gdsd", gdsd_legacy=True)
    with pytest.raises(Exception, match="legacy_micro_step_views = True: d1's micro-step view index"):
        method_config("gdsd_tlc", legacy_micro_step_views=True)
    with pytest.raises(ValueError, match="complementary pairs"):
        pair_log_likelihoods(torch.zeros(3, 2, 4), torch.zeros(3, 2, 4))
