"""EBPO (LLaDA2.1, arXiv 2602.08676) on the tiny full-sequence model with the block partition of its semi-AR sampler:
its block views, composite ELBO, clipping and KL against a transcription of yjyddq/DARE's implementation (no official
code is public).

The transcription restates, in our words, what yjyddq/DARE (commit 83ae8a305a53a914cce563aedceeac88566891cb)
computes in ``verl/trainer/ppo/dllm_core_algos.py``:

* ``_forward_process_ebpo`` (``block_origin="response"``, ``t=None``) for one sample repeated over its n_l = mc_num
  Monte Carlo rows: the valid response positions cut into blocks of ``block_length``; one offset ~ U[0, 1) and the
  cells (row, block) in order get noise levels (offset + idx / cells) mod 1 (float32); a block of l tokens masks
  min(floor(noise l) + 1, l) of them (a ``randperm``), p_mask = that count / l.
* the SDAR / LLaDA2 actors' token ELBOs -CE / p_mask at the masked tokens of each row (their block-diffusion forward
  sees the earlier blocks clean and not the later ones; here: the tiny model's view of the block, later positions
  masked), ``compute_ebpo_composite_elbo``: the mean over the Monte Carlo rows of their sums;
* ``compute_policy_loss_ebpo``: the log ratio of the composite ELBOs clipped in the log domain, -A exp(.) averaged
  over the valid samples; ``compute_ebpo_kl``: the chosen estimator (low_var_kl: exp(-d) + d - 1) of the composite
  ELBOs, averaged.
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from fake_rewards import varied_reward
from float_error import Computed, Condition, computed, condition, in_float64, loss_and_gradient_agree

from ddmrl.config import SamplerConfig, method_config
from ddmrl.likelihood import token_logps
from ddmrl.masking.views import apply_view, build_views, ebpo_block_counts
from ddmrl.methods import METHODS
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.objectives import OBJECTIVES
from ddmrl.objectives.base import ObjectiveInputs
from ddmrl.objectives.weights import token_weights
from ddmrl.tasks import make_task
from ddmrl.training.grpo import train_grpo

# ------------------------------------------------------------------------------------------ the transcription


def dare_block_counts(valid_length: int, mc_num: int, block_length: int, offset: float) -> list[list[int]]:
    """``_forward_process_ebpo``'s mask count of every (Monte Carlo row, block) of one sample whose valid response
    has ``valid_length`` tokens, for the drawn ``offset`` (response block origin)."""
    blocks = [min(block_length, valid_length - s) for s in range(0, valid_length, block_length)]
    cells = mc_num * len(blocks)
    noise = (torch.tensor(offset) + torch.arange(cells, dtype=torch.float32) / cells) % 1.0
    counts, i = [], 0
    for _ in range(mc_num):
        row = []
        for length in blocks:
            row.append(min(int(torch.floor(noise[i] * length).item()) + 1, length))
            i += 1
        counts.append(row)
    return counts


def dare_composite_elbo(token_elbos: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``compute_ebpo_composite_elbo`` of [B, N, R] token ELBOs (uniform timestep weights): [B]."""
    contributions = torch.where(response_mask[:, None, :].bool(), token_elbos, token_elbos.new_zeros(()))
    return contributions.sum(-1).mean(1)


def dare_policy_loss(old, cur, advantages, sample_mask, clip_low, clip_high):
    """``compute_policy_loss_ebpo``: (loss, clip fraction)."""
    log_ratio = cur[sample_mask] - old[sample_mask]
    a = advantages[sample_mask]
    log_clip_low, log_clip_high = torch.log1p(log_ratio.new_tensor([-clip_low, clip_high]))  # the ELBOs' dtype
    effective = torch.where(a >= 0, torch.minimum(log_ratio, log_clip_high), torch.maximum(log_ratio, log_clip_low))
    clipped = ((log_ratio < log_clip_low) & (a < 0)) | ((log_ratio > log_clip_high) & (a > 0))
    return (-a * torch.exp(effective)).mean(), clipped.float().mean()


def dare_kl(elbo, ref_elbo):
    """``compute_ebpo_kl`` with ``low_var_kl``: [B]."""
    d = elbo - ref_elbo
    return torch.exp(-d) + d - 1


# ------------------------------------------------------------------------------------------ the views


@pytest.mark.parametrize(("valid_length", "mc", "offset"), [(10, 1, 0.137), (10, 3, 0.61), (7, 2, 0.9)])
def test_the_block_counts_are_dares(valid_length, mc, offset):
    size, nb = 4, 3
    lengths = torch.tensor([[min(size, valid_length - s) if s < valid_length else 0 for s in range(0, 12, size)]])
    counts = ebpo_block_counts(lengths[:, None].expand(1, mc, nb), torch.tensor([offset]))  # [1, M, B]
    want = dare_block_counts(valid_length, mc, size, offset)
    assert counts[0, :, : len(want[0])].tolist() == want
    assert not counts[0, :, len(want[0]) :].any()


def test_each_block_count_is_uniform_over_one_to_its_length():
    lengths = torch.tensor([[4, 4, 2]])  # one sample, blocks of 4, 4 and 2 valid tokens, two timesteps
    grid = torch.tensor([(i + 0.5) / 240 for i in range(240)])
    counts = torch.stack([ebpo_block_counts(lengths[:, None].expand(1, 2, 3), u[None])[0] for u in grid])  # [U, 2, 3]
    for m in range(2):
        for b, length in enumerate([4, 4, 2]):
            assert torch.equal(
                torch.bincount(counts[:, m, b], minlength=length + 1)[1:], torch.full((length,), 240 // length)
            )


def test_a_block_view_sees_the_earlier_blocks_clean_and_masks_every_later_position():
    n, length, mu, mc, size = 3, 10, 2, 2, 4
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[1, 6:] = False  # blocks of 4 and 2 valid tokens
    views = build_views(
        "ebpo_blocks", mu=mu, seed=4, completion_mask=completion_mask, prompt_ids=torch.full((n, 2), 7), pad_id=1,
        views_per_step=mc, block_length=size,
    )  # fmt: skip
    nb = 3
    assert views.masks.shape == (mu * mc * nb, n, length) and not views.prompt_masks.any()
    assert views.steps == tuple(tuple(range(mc * nb * j, mc * nb * (j + 1))) for j in range(mu))
    block = torch.arange(length) // size
    for v in range(views.masks.shape[0]):
        b = v % nb
        targets = views.targets[v]
        assert not (targets & ~(block == b)[None]).any() and not (targets & ~completion_mask).any()
        assert not (views.masks[v] & (block < b)[None]).any()  # earlier blocks clean
        assert views.masks[v][:, block > b].all()  # every later position masked
        assert torch.equal(views.masks[v] & (block == b)[None], targets)
        l_b = (completion_mask & (block == b)[None]).sum(1)
        c = targets.sum(1)
        assert bool(((c >= 1) | (l_b == 0)).all()) and torch.allclose(views.t[v], c / l_b.clamp_min(1))


# ------------------------------------------------------------------------------------------ against DARE


def perturbed(model, seed: int, scale: float = 0.05):
    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return other


def dare_token_elbos(model, prompt, completion, views, ids, mask_id, mc, nb):
    """[B, N, R] token ELBOs, -CE / p_mask at each (timestep, block) view's masked block tokens, the blocks of one
    timestep summed into its row (DARE's layout), in the dtype of the views' t (float64 for a float64 run)."""
    out = torch.zeros(completion.shape[0], mc, completion.shape[1], dtype=views.t.dtype)
    for i, v in enumerate(ids):
        logits = model(apply_view(prompt, completion, views, v, mask_id)).logits[:, prompt.shape[1] :].float()
        ce = F.cross_entropy(logits.transpose(1, 2), completion, reduction="none")  # [B, R]
        target = views.targets[v]
        p_mask = views.t[v][:, None].expand_as(ce)
        out[:, i // nb] += torch.where(target, -ce / p_mask.clamp_min(1e-8), 0.0)
    return out


class Sides(NamedTuple):
    """ddmrl's EBPO loss and gradient and the DARE transcription's, on the same views in one dtype, and the condition
    measures of the sums they are (from float64 values only)."""

    ours: Computed
    dare: Computed
    clip_ratio: float
    clip_dare: float
    kl: float
    cond: Condition | None


def both_sides(models, prompt, completion, completion_mask, views, advantages, mask_id, cfg, nb) -> Sides:
    """ddmrl's EBPO (``token_logps``, ``token_weights``, the objective) and the transcription of DARE on the second
    optimiser step's views; ``models``: the old, reference and current policies."""
    old_model, ref_model, policy = models
    mc, ids = cfg.views_per_step, list(views.steps[1])
    weights, _ = token_weights("ebpo_elbo", views, completion_mask)
    inputs = [apply_view(prompt, completion, views, v, mask_id) for v in ids]
    with torch.no_grad():
        old = torch.stack([token_logps(old_model, x, completion) for x in inputs])
        ref = torch.stack([token_logps(ref_model, x, completion) for x in inputs])
    logps = torch.stack([token_logps(policy, x, completion) for x in inputs])
    x = ObjectiveInputs(
        logps, old, ref, advantages, weights[ids], None, views.t[ids], views.targets[ids], completion_mask, 2
    )
    out = OBJECTIVES[METHODS["ebpo"].objective](x, cfg)
    params = list(policy.parameters())
    ours = computed(out.loss, params)

    with torch.no_grad():
        old_elbo = dare_composite_elbo(
            dare_token_elbos(old_model, prompt, completion, views, ids, mask_id, mc, nb), completion_mask
        )
        ref_elbo = dare_composite_elbo(
            dare_token_elbos(ref_model, prompt, completion, views, ids, mask_id, mc, nb), completion_mask
        )
    cur = dare_composite_elbo(
        dare_token_elbos(policy, prompt, completion, views, ids, mask_id, mc, nb), completion_mask
    )
    samples = completion_mask.any(-1)
    pg, clipfrac = dare_policy_loss(old_elbo, cur, advantages, samples, cfg.epsilon, cfg.epsilon_high)
    loss_dare = pg + cfg.beta * dare_kl(cur, ref_elbo)[samples].mean()
    dare = Computed(loss_dare.detach(), torch.autograd.grad(loss_dare, params))
    positions = prompt.shape[1] + completion.shape[1]
    cond = condition(out.loss, logps, params, positions) if logps.dtype == torch.float64 else None
    return Sides(ours, dare, out.terms["clip_ratio"], float(clipfrac), out.terms["kl"], cond)


@pytest.mark.parametrize("seed", [2, 6])
def test_the_composite_elbo_loss_and_gradient_are_dares_on_the_same_views(make_model, tok, seed):
    """Old, reference and current policies apart (some sequences clipped, KL > 0), EOS padding, two timesteps, the
    second optimiser step: ddmrl's loss and gradient equal DARE's aggregation and loss of the same token ELBOs.

    The two sides add the same float32 terms in other orders, so they agree only up to float32 rounding, whose size
    depends on the CPU's kernels (an Intel Xeon: 9.7555e-04 against 9.7526e-04, 3e-4 relative, for a gradient
    element that cancels). Tolerances from float32's error (tests/float_error.py): both sides also run in float64
    (float64 copies of the models, the views' t and the advantages) and agree there to 1e-10 of the condition
    measure S (the same mathematics); in float32 each is within n eps32 S of its float64 value and the two within
    2 n eps32 S (n = T for the loss, T (P + L) for a gradient). Observed on an Intel Xeon (portable, avx2 and native
    AVX-512 kernels), seeds 0-11: float64 <= 3.8e-15 S, float32 <= 6 % of the bound; a weight off by 1e-4 fails the
    float32 check, by 1e-6 the float64 one.
    """
    prompt_length, length, n, mc, size, nb = 2, 9, 4, 2, 4, 3
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(5, 10, (n, prompt_length), generator=g)
    completion = torch.randint(5, 10, (n, length), generator=g)
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[0, 5:] = False
    completion_mask[3, 2:] = False
    old_model = make_model(max_positions=prompt_length + length, seed=5)
    models = (old_model, perturbed(old_model, 21, scale=0.02), perturbed(old_model, 22, scale=0.1))
    advantages = torch.tensor([1.0, -0.7, 0.4, -1.3])
    cfg = method_config("ebpo", dict(num_iterations=2, epsilon=0.02, epsilon_high=0.03, beta=0.05), views_per_step=mc)
    views = build_views(
        "ebpo_blocks", mu=2, seed=seed, completion_mask=completion_mask, prompt_ids=prompt, pad_id=1,
        views_per_step=mc, block_length=size,
    )  # fmt: skip
    f32 = both_sides(models, prompt, completion, completion_mask, views, advantages, tok.mask_token_id, cfg, nb)
    f64 = both_sides(
        in_float64(*models), prompt, completion, completion_mask, views._replace(t=views.t.double()),
        advantages.double(), tok.mask_token_id, cfg, nb,
    )  # fmt: skip
    assert f32.ours.loss.dtype == torch.float32 and f64.ours.loss.dtype == f64.ours.grads[0].dtype == torch.float64
    assert f32.clip_ratio == pytest.approx(f32.clip_dare) and 0 < f32.clip_ratio < 1 and f32.kl > 0
    assert f64.clip_ratio == f32.clip_ratio  # the same sequences clipped in both precisions
    loss_and_gradient_agree(f32.ours, f32.dare, f64.ours, f64.dare, f64.cond)


def test_the_log_domain_clip_is_the_ppo_clip():
    """DARE's log-domain clipping is max(-A rho, -A clip(rho)) (checked on ratios on both sides of the range)."""
    g = torch.Generator().manual_seed(0)
    log_ratio, a = 0.2 * torch.randn(64, generator=g), torch.randn(64, generator=g)
    pg, _ = dare_policy_loss(torch.zeros(64), log_ratio, a, torch.ones(64, dtype=torch.bool), 0.1, 0.15)
    rho = log_ratio.exp()
    assert torch.allclose(pg, torch.maximum(-a * rho, -a * rho.clamp(0.9, 1.15)).mean())


def test_a_grpo_run_of_ebpo_moves_every_parameter(monkeypatch, make_model):
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    ref = copy.deepcopy(policy)
    shared = dict(max_steps=2, num_prompts=2, num_generations=4, num_iterations=2, learning_rate=1e-2, beta=0.04,
                  sampler=SamplerConfig(block_length=4, steps=4, temperature=1.0))  # fmt: skip
    cfg = method_config("ebpo", shared, views_per_step=2)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    curve, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=100 + it), cfg, 0)
    assert curve[-1]["step"] == 2 and all(math.isfinite(row["loss"]) for row in curve)
    assert [n for n, p in policy.named_parameters() if torch.equal(p, before[n])] == []
