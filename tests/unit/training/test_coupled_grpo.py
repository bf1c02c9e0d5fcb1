"""Coupled-GRPO (DiffuCoder; Gong et al. 2025, arXiv 2506.20639): the coupling of its views, and its log-probability
estimate and loss against a transcription of the released code.

The transcription below restates, in our words, what apple/ml-diffucoder ``src/open_r1/coupled_grpo.py`` (commit
f735e01376b752b70356efe45192f31499bf30dc) computes; yjyddq/DARE's ``_forward_process_coupled_grpo``
(``verl/trainer/ppo/dllm_core_algos.py``) and ``llada_dp_actor_coupled_grpo.py`` compute the same:

* ``forward_process``: after ``set_seed(seed)``, t = ``random.uniform(0.2, 0.8)`` (one per call, shared by the rows)
  and u = ``torch.rand((b, P + L))``; three inputs: every completion position masked; the completion positions with
  u < t; those with u > t. Weights [1, 1 / t, 1 / (1 - t)]; the prompt is never masked.
* ``selective_log_softmax``: per row, the three views' log-probs p0, p1, p2 of the completion tokens, and
  (p0 + where(u < t, p1 / t, p2 / (1 - t))) / 2.
* ``compute_loss``: rho = exp(logp - old), -min(rho A, clip(rho, 1 - eps, 1 + eps) A) + beta k3(ref, logp), summed
  over the completion mask (up to and including the first EOS) and divided by its size.
* ``get_logits`` drops the last position (``logits[:, :-1]``): Dream's next-token shift, which ddmrl's Dream adapter
  applies (docs/families.md); for a LLaDA-like model (DARE's LLaDA actor) the logits of a position are its own.
"""

from __future__ import annotations

import copy
import random
from typing import NamedTuple

import float_error
import pytest
import torch
from float_error import Computed, Condition, agree, computed, condition, in_float64, loss_and_gradient_agree

from ddmrl.config import GRPOConfig, method_config
from ddmrl.diagnostics import token_credit
from ddmrl.likelihood import token_logps
from ddmrl.masking.views import COUPLED_RATIOS, Views, apply_view, build_views
from ddmrl.methods import METHODS
from ddmrl.objectives import OBJECTIVES
from ddmrl.objectives.advantages import group_advantages
from ddmrl.objectives.base import ObjectiveInputs
from ddmrl.objectives.weights import token_weights
from ddmrl.rollout import Rollouts
from ddmrl.training.grpo import make_views

# ------------------------------------------------------------------------------------------ the transcription


def released_forward_process(batch: torch.Tensor, prompt_length: int, mask_id: int, seed: int):
    """(three noisy batches, weights [1, 1/t, 1/(1-t)], mask u < t) of ``forward_process`` (accumulate=False), the
    global RNGs seeded as ``set_seed`` does (CPU)."""
    random.seed(seed)
    torch.manual_seed(seed)
    b, length = batch.shape
    prompt_index = torch.zeros(length, dtype=torch.bool)
    prompt_index[:prompt_length] = True
    mask_ratio = random.uniform(0.2, 0.8)
    t_p = torch.ones(b) * mask_ratio
    random_matrix = torch.rand((b, length))
    noisy = [torch.where(~prompt_index, mask_id, batch)]
    is_mask = ~prompt_index & (random_matrix < t_p.unsqueeze(1))
    noisy.append(torch.where(is_mask, mask_id, batch))
    reverse = ~prompt_index & (random_matrix > t_p.unsqueeze(1))
    noisy.append(torch.where(reverse, mask_id, batch))
    return noisy, [1, 1 / mask_ratio, 1 / (1 - mask_ratio)], is_mask, mask_ratio


def released_selective_log_softmax(logits, index, weights, mask):
    """[num_iterations * batch, L] pooled log-probs from [num_iterations * 3 * batch, L, V] logits laid out as
    (iteration, view, row), as the released function indexes them."""
    full_batch_size = logits.size(0) // 3
    num_iterations = weights.size(0) // 3
    batch_size = full_batch_size // num_iterations
    out = []
    for i in range(full_batch_size):
        chunk, offset = divmod(i, batch_size)
        base = chunk * 3 * batch_size
        rows = torch.tensor([base + offset, base + batch_size + offset, base + 2 * batch_size + offset])
        logps = torch.log_softmax(logits[rows], dim=-1)
        per_token = logps.gather(-1, index[i].unsqueeze(0).unsqueeze(-1).expand(3, -1, 1)).squeeze(-1)  # [3, L]
        w = weights[(i // batch_size) * 3 : (i // batch_size + 1) * 3]
        weighted = torch.where(mask[i], per_token[1] * w[1], per_token[2] * w[2])
        out.append((per_token[0] + weighted) / 2)
    return torch.stack(out)


def released_logps(model, input_ids, completion_length, mask_id, seeds):
    """``_get_per_token_logps`` for one rollout batch [B, P + L] and one mask seed per iteration: [B, mu, L]."""
    prompt_length = input_ids.shape[1] - completion_length
    noisy, weights, masks = [], [], []
    for seed in seeds:
        batches, w, m, _ = released_forward_process(input_ids, prompt_length, mask_id, seed)
        noisy.extend(batches)
        weights.extend(w)
        masks.append(m)
    logits = model(torch.cat(noisy)).logits[:, -completion_length:].float()  # a LLaDA-like model: no shift
    targets = torch.cat([input_ids] * len(seeds))[:, -completion_length:]
    mask = torch.cat(masks)[:, -completion_length:]
    pooled = released_selective_log_softmax(logits, targets, torch.tensor(weights, dtype=logits.dtype), mask)
    return pooled.view(len(seeds), input_ids.shape[0], completion_length).permute(1, 0, 2)


def released_loss(logps, old, ref, advantages, completion_mask, epsilon, beta):
    """``compute_loss`` on [B, L] log-probs of one iteration (TRL's epsilon_low = epsilon_high = epsilon)."""
    coef_1 = torch.exp(logps - old)
    coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon)
    per_token = -torch.min(coef_1 * advantages[:, None], coef_2 * advantages[:, None])
    per_token = per_token + beta * (torch.exp(ref - logps) - (ref - logps) - 1)
    mask = completion_mask.float()
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def released_leave_one_out(rewards: torch.Tensor, g: int) -> torch.Tensor:
    grouped = rewards.view(-1, g)
    baseline = (grouped.sum(1, keepdim=True) - grouped) / (g - 1)
    return (grouped - baseline).view(-1)


# ------------------------------------------------------------------------------------------ the coupling


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_every_completion_token_is_masked_in_exactly_one_view_of_each_pair(seed):
    n, length, mu = 3, 5, 4
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[0, 3:] = False  # EOS padding: masked like any other position (the loss ignores it)
    views = build_views(
        "coupled", mu=mu, seed=seed, completion_mask=completion_mask, prompt_ids=torch.full((n, 2), 7), pad_id=1
    )
    assert views.masks.shape == (3 * mu, n, length)
    assert views.steps == tuple((3 * j, 3 * j + 1, 3 * j + 2) for j in range(mu))
    assert not views.prompt_masks.any()  # the prompt is never masked
    for full, first, second in views.steps:
        assert views.masks[full].all()
        once = views.masks[first].int() + views.masks[second].int()  # [N, L]
        assert torch.equal(once, torch.ones(n, length, dtype=torch.int))
        t = views.t[first]
        lo, hi = COUPLED_RATIOS
        assert bool(((t >= lo) & (t <= hi)).all()) and bool((t == t[0]).all())  # one ratio per step, shared
        assert torch.allclose(views.t[second], 1 - t) and torch.equal(views.t[full], torch.ones(n))
    # each step draws its own ratio and mask; the views regenerate identically from the seed
    assert len({round(float(views.t[3 * j + 1, 0]), 6) for j in range(mu)}) == mu
    again = build_views(
        "coupled", mu=mu, seed=seed, completion_mask=completion_mask, prompt_ids=torch.full((n, 2), 7), pad_id=1
    )
    assert torch.equal(again.masks, views.masks) and torch.equal(again.t, views.t)


def test_the_coupled_weights_give_each_token_half_the_full_view_and_half_its_pair_view():
    """Summed over a step's views, omega is 1/2 on the fully masked view and 1/(2 t) or 1/(2 (1 - t)) on the one view
    of the pair that masks the token; 0 on invalid positions."""
    completion_mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    views = build_views(
        "coupled", mu=2, seed=5, completion_mask=completion_mask, prompt_ids=torch.full((2, 1), 7), pad_id=1
    )
    w, z = token_weights("coupled", views, completion_mask)
    assert z is None
    for full, first, second in views.steps:
        t = views.t[first][:, None]  # [N, 1]
        assert torch.equal(w[full], 0.5 * completion_mask.float())
        want_pair = torch.where(views.masks[first], 0.5 / t, 0.5 / (1 - t)) * completion_mask
        # positive quotients (tests/float_error.py, rtol_positive): the views keep t and 1 - t of a float64 t each
        # rounded once, the weight 1 / (2 t) one more rounding; the formula 0.5 / t one, 0.5 / (1 - t) of the float32
        # t two and t's own rounding, t / (1 - t) of it relative to 1 - t: 2 + t / (1 - t) roundings at most
        rtol = float_error.rtol_positive(2 + float((t / (1 - t)).max()))
        assert torch.allclose(w[first] + w[second], want_pair, rtol=rtol, atol=0)
        assert torch.equal((w[first] > 0) & (w[second] > 0), torch.zeros_like(completion_mask))


# ------------------------------------------------------------------------------------------ against the release


def views_of(full, first, second, mask_ratio, n, prompt_length, dtype=torch.float32) -> Views:
    """ddmrl's views of one step from the release's completion masks, their ratios in ``dtype``."""
    masks = torch.stack([full, first, second])  # [3, N, L]
    t = torch.tensor([1.0, mask_ratio, 1 - mask_ratio], dtype=dtype)[:, None].expand(3, n).clone()
    return Views(masks, torch.zeros(3, n, prompt_length, dtype=torch.bool), t, 0, schedule=((0, 1, 2),))


def perturbed(model, seed: int, scale: float = 0.05):
    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return other


class Sides(NamedTuple):
    """ddmrl's loss and gradient and the release's on the same masks in one dtype; ddmrl's pooled old log-probs and
    the release's; the condition measures of the sums (from float64 values only)."""

    ours: Computed
    release: Computed
    pooled: torch.Tensor
    pooled_release: torch.Tensor
    pooled_scale: float  # S of the pooled log-probs (float_error.weighted_scale)
    clip_ratio: float
    kl: float
    cond: Condition | None


def both_sides(models, prompt, completion, completion_mask, advantages, mask_id, mask_seed, cfg) -> Sides:
    """The release (``_get_per_token_logps`` and ``compute_loss``) and ddmrl (coupled weights, ``token_logps``, the
    coupled_clip objective) on the release's masks of ``mask_seed``; ``models``: the old, reference and current
    policies, in the dtype of the computation (the masks are drawn in float32 either way)."""
    old_model, ref_model, policy = models
    (n, length), prompt_length = completion.shape, prompt.shape[1]
    input_ids = torch.cat([prompt, completion], 1)
    params = list(policy.parameters())
    # the release
    with torch.no_grad():
        old_rel = released_logps(old_model, input_ids, length, mask_id, [mask_seed])[:, 0]
        ref_rel = released_logps(ref_model, input_ids, length, mask_id, [mask_seed])[:, 0]
    cur_rel = released_logps(policy, input_ids, length, mask_id, [mask_seed])[:, 0]
    loss_rel = released_loss(cur_rel, old_rel, ref_rel, advantages, completion_mask, cfg.epsilon, cfg.beta)
    release = Computed(loss_rel.detach(), torch.autograd.grad(loss_rel, params))

    # ddmrl on the same masks
    noisy, _, first, mask_ratio = released_forward_process(input_ids, prompt_length, mask_id, mask_seed)
    reverse = noisy[2] == mask_id
    views = views_of(
        torch.ones(n, length, dtype=torch.bool), first[:, prompt_length:], reverse[:, prompt_length:], mask_ratio, n,
        prompt_length, advantages.dtype,
    )  # fmt: skip
    assert torch.equal(views.masks[1] ^ views.masks[2], torch.ones(n, length, dtype=torch.bool))  # no tie u == t
    weights, _ = token_weights("coupled", views, completion_mask)
    inputs = [apply_view(prompt, completion, views, v, mask_id) for v in range(3)]
    for v in range(3):
        assert torch.equal(inputs[v], noisy[v])
    with torch.no_grad():
        old = torch.stack([token_logps(old_model, x, completion) for x in inputs])
        ref = torch.stack([token_logps(ref_model, x, completion) for x in inputs])
    logps = torch.stack([token_logps(policy, x, completion) for x in inputs])
    targets = views.masks & completion_mask[None]
    x = ObjectiveInputs(logps, old, ref, advantages, weights, None, views.t, targets, completion_mask, 2)
    out = OBJECTIVES[METHODS["coupled_grpo"].objective](x, cfg)
    ours = computed(out.loss, params)
    positions = prompt_length + length
    cond = condition(out.loss, logps, params, positions) if logps.dtype == torch.float64 else None
    pooled_scale = float_error.weighted_scale(weights, old, 0)
    return Sides(
        ours, release, (weights * old).sum(0), old_rel, pooled_scale, out.terms["clip_ratio"], out.terms["kl"], cond
    )


@pytest.mark.parametrize("mask_seed", [3, 42, 4095])
def test_pooled_log_probs_loss_and_gradient_equal_the_release_on_the_same_masks(make_model, tok, mask_seed):
    """Old, reference and current policies differ (ratios away from 1, some clipped, KL > 0); EOS padding present.
    ddmrl's coupled weights and coupled_clip objective, on the release's masks, give its pooled log-probs, loss and
    gradient.

    Tolerances from float32's error (tests/float_error.py), not from one CPU's rounding (an Intel Xeon: -3.2513e-04
    against -3.2529e-04, 5e-4 relative, for a gradient element that cancels): both sides also run in float64 (the
    models, the mask ratio and the advantages) and agree there to 1e-10 of the condition measure S, the check of the
    formulas; in float32 each is within n eps32 S of its float64 value and the two within 2 n eps32 S (n = T for the
    loss, T (P + L) for a gradient). The pooled log-probs (two forward passes of the old policy, weighted) the same
    way, S the largest sum_v |w_v| times the largest |log-prob| and n the pass's longest chain of sums
    (float_error.forward_terms) plus the three views."""
    prompt_length, length, n = 3, 6, 4
    g = torch.Generator().manual_seed(mask_seed)
    prompt = torch.randint(5, 10, (n, prompt_length), generator=g)
    completion = torch.randint(5, 10, (n, length), generator=g)
    completion[1, 4] = tok.eos_token_id
    completion[1, 5:] = tok.eos_token_id
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[1, 5:] = False  # up to and including the first EOS
    old_model = make_model(max_positions=prompt_length + length, seed=1)
    models = (old_model, perturbed(old_model, 11), perturbed(old_model, 12, scale=0.3))
    advantages = torch.tensor([1.0, -0.5, 0.8, -1.2])
    cfg = GRPOConfig(epsilon=0.05, beta=0.04)
    args = prompt, completion, completion_mask
    f32 = both_sides(models, *args, advantages, tok.mask_token_id, mask_seed, cfg)
    f64 = both_sides(in_float64(*models), *args, advantages.double(), tok.mask_token_id, mask_seed, cfg)

    valid = completion_mask
    terms = float_error.forward_terms(old_model, prompt_length + length) + 3
    pooled = ((f32.pooled[valid], f64.pooled[valid]), (f32.pooled_release[valid], f64.pooled_release[valid]))
    agree("the pooled old log-probs", *pooled, f64.pooled_scale, terms)
    assert 0 < f32.clip_ratio < 1 and f32.kl > 0  # the check covers the clipped branch and the KL
    assert f64.clip_ratio == f32.clip_ratio  # the same tokens clipped in both precisions
    loss_and_gradient_agree(f32.ours, f32.release, f64.ours, f64.release, f64.cond)


def test_the_release_layout_of_several_iterations_pools_each_iteration_from_its_own_mask(make_model, tok):
    """``_get_per_token_logps`` with two mask seeds (the old pass over num_iterations = 2) equals its one-seed calls:
    the transcription's block indexing is right, so the one-iteration comparison above stands for every step."""
    model = make_model(max_positions=8, seed=2)
    input_ids = torch.randint(5, 10, (3, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        both = released_logps(model, input_ids, 5, tok.mask_token_id, [7, 99])
        assert torch.allclose(both[:, 0], released_logps(model, input_ids, 5, tok.mask_token_id, [7])[:, 0])
        assert torch.allclose(both[:, 1], released_logps(model, input_ids, 5, tok.mask_token_id, [99])[:, 0])


def test_the_release_leave_one_out_advantage_is_the_mean_only_one_times_g_over_g_minus_1():
    """The release's advantages (leave_one_out, scale_rewards false) are ddmrl's ``scale_rewards: none`` scaled by
    G / (G - 1): a constant factor on the loss (docs/reproduction.md)."""
    rewards, g = torch.tensor([1.0, 0.0, 2.5, 0.5, 3.0, 3.0, 1.0, 0.0]), 4
    mean_only, _ = group_advantages(rewards, g, "none")
    assert torch.allclose(released_leave_one_out(rewards, g), mean_only * g / (g - 1))


def test_one_view_of_weight_one_pools_to_the_token_clip_loss():
    """With a single view weighted 1 on its targets, pooling is the identity: coupled_clip is token_clip."""
    g = torch.Generator().manual_seed(0)
    n, length = 3, 5
    targets = torch.rand(1, n, length, generator=g) < 0.6
    targets[:, :, 0] = True
    logps, old, ref = (-torch.rand(1, n, length, generator=g) for _ in range(3))
    x = ObjectiveInputs(
        logps, old, ref, torch.tensor([1.0, -1.0, 0.5]), targets.float(), None, torch.full((1, n), 0.5), targets,
        torch.ones(n, length, dtype=torch.bool), 3,
    )  # fmt: skip
    for loss_type in ("token_mean", "seq_mean"):
        cfg = GRPOConfig(epsilon=0.1, beta=0.04, loss_type=loss_type)
        assert torch.allclose(OBJECTIVES["coupled_clip"](x, cfg).loss, OBJECTIVES["token_clip"](x, cfg).loss)


def test_credit_of_a_token_is_its_pooled_weight_summed_over_the_steps(tok, make_model):
    """ddmrl.diagnostics at ratio 1: d loss / d log p_v(k) = -A_i omega_v(k) / |tokens|, so a token's credit is
    sum over steps of 1/2 + 1 / (2 t_pair(k)), t_pair(k) the ratio of the pair view that masks it (t or 1 - t)."""
    n, length, prompt_length, mu = 4, 6, 3, 3
    g = torch.Generator().manual_seed(0)
    reveal = torch.stack([torch.randperm(length, generator=g) for _ in range(n)])
    batch = Rollouts(
        torch.randint(5, 10, (n, prompt_length), generator=g), torch.randint(6, 10, (n, length), generator=g),
        torch.ones(n, length, dtype=torch.bool), reveal, [""] * n, 0,
    )  # fmt: skip
    cfg = method_config("coupled_grpo", dict(num_iterations=mu, num_generations=2, num_prompts=2, beta=0.04))
    model = make_model(max_positions=prompt_length + length, seed=1)
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5])
    credit = token_credit(model, cfg, batch, advantages, 7, tok.pad_token_id, tok.mask_token_id)
    views, weights, _, _ = make_views(cfg, batch, 7, tok.pad_token_id, tok.mask_token_id)
    want = torch.zeros(n, length)
    for _full, first, second in views.steps:
        t_pair = torch.where(views.masks[first], views.t[first][:, None], views.t[second][:, None])
        want += 0.5 + 0.5 / t_pair
    # tolerances from float32's error (tests/float_error.py, rtol_positive): positive sums (the 3 mu views' weights;
    # for the credit the token_mean's normaliser over the N L tokens of each view too) and at most 16 products and
    # quotients on either side
    rtol = float_error.rtol_positive
    assert torch.allclose(weights.sum(0), want, rtol=rtol(3 * mu + 16), atol=0)
    assert torch.allclose(credit, want / (n * length), rtol=rtol(3 * mu * n * length + 16), atol=0)
