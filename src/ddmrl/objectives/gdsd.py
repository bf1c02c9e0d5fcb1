"""GDSD's parts (Tang et al. 2026, GDSD: Reinforcement Learning as Guided Denoiser Self-Distillation for Diffusion
Language Models, arXiv 2605.29398; GaryBall/GDSD ``gdsd/trainers/gdsd_trainer_batchll.py`` and
``gdsd_trainer_tlc.py``): its token weightings, its leave-one-out advantages and its objective.

A Monte Carlo sample m of a completion y is a pair of views (``ddmrl.masking.views.espo_views``): c of its T valid
tokens masked, and exactly the others. Its denoising log-likelihood, the policy's log-probs of each token at the view
of the pair that masks it (the release's ``_compute_denoise_probs_from_masked_batch``, ``reduce_var``), is

    l_theta(y, m) = sum_v sum_k omega_v(k) log p_theta(y_k | view v)    over the pair's two views v,

omega_v(k) = delta_v(k) / 2 (GDSD, ``denoise_weights``) or delta_v(k) / (2 t_v) (GDSD-TLC, ``tlc_weights``; t_v the
view's nominal ratio c / (T + 1), its complement's (T - c) / (T + 1)). The self-distillation loss matches the
clipped log-ratio of the student to the old denoiser, per token, to the advantage-guided teacher's psi A_i:

    d_im  = clip(l_theta(y_i, m) - l_old(y_i, m), log(1 - eps), log(1 + eps_high))
    loss  = (1/N) sum_i sum_m (d_im / |y_i| - psi A_i)^2
            + beta (1/N) sum_i (1/M) sum_m (l_theta(y_i, m) - l_ref(y_i, m))^2 / (2 |y_i|)

(the release's ``compute_loss``: a sum over its num_mc samples, a mean over the rows; the k2 KL of
``compute_approx_kl`` over the rows, samples and length). A clipped difference has no gradient: eps bounds how far
one rollout batch moves each sample's log-likelihood. |y_i| is the number of valid completion tokens (every position
with ``loss_after_eos``: the release's fixed L).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig
    from ddmrl.masking.views import Views


def _targets(views: Views, completion_mask: torch.Tensor) -> torch.Tensor:
    return (views.target_masks & completion_mask[None].bool()).float()  # [V, N, L]


def denoise_weights(views: Views, completion_mask: torch.Tensor, _mode: str) -> tuple[torch.Tensor, None]:
    """GDSD: omega_v(k) = delta_v(k) / 2, so that a pair's weighted log-probs are half the sum of every valid
    token's log-prob at the view masking it (the release's coupled denoising log-probs, no 1 / t). [V, N, L]."""
    return _targets(views, completion_mask) / 2, None


def tlc_weights(views: Views, completion_mask: torch.Tensor, _mode: str) -> tuple[torch.Tensor, None]:
    """GDSD-TLC: omega_v(k) = delta_v(k) / (2 t_v), the release's -CE / p_mask on the masked view and
    -CE / (T / (T + 1) - p_mask) on its complement, halved: a pair's weighted log-probs are the mean of two one-view
    ELBO estimates (ESPO's per-sample ELBO). A view masking nothing has no target. [V, N, L]."""
    return _targets(views, completion_mask) / (2 * views.t.clamp_min(1e-8))[..., None], None


def leave_one_out(r: torch.Tensor, _std: torch.Tensor, _eps: float) -> torch.Tensor:
    """The release's advantages (``_generate_and_score_completions``, ``leave_one_out = True``, its recipes'
    ``scale_rewards: false``): r_i minus the mean of the group's other G - 1 rewards, G / (G - 1) (r_i - mean_g r).
    [B, G] -> [B, G]."""
    g = r.shape[1]
    return r - (r.sum(1, keepdim=True) - r) / (g - 1)


def pair_log_likelihoods(logps: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """l(y, m) of each Monte Carlo pair m of the step's views, ordered (view, complement) pair by pair as
    ``espo_views`` builds them: [V, N, L] -> [V / 2, N]."""
    v, n, _ = logps.shape
    if v % 2:
        raise ValueError(f"gdsd needs the step's views in complementary pairs (espo views), got {v} views")
    return (weights * logps).sum(-1).view(v // 2, 2, n).sum(1)


def gdsd(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    """The guided denoiser self-distillation loss with beta times the length-normalised k2 KL per Monte Carlo pair;
    clip_ratio is the share of (row, pair) log-ratios clipped (no gradient), on either side. ``cfg.psi``: the
    teacher's guidance scale."""
    length = x.completion_mask.sum(1).clamp_min(1)  # [N] |y|
    ll, ll_old = pair_log_likelihoods(x.logps, x.weights), pair_log_likelihoods(x.old, x.weights)  # [M, N]
    low, high = math.log(1 - cfg.epsilon), math.log(1 + (cfg.epsilon_high or cfg.epsilon))
    diff = ll - ll_old  # [M, N]
    loss = ((diff.clamp(low, high) / length - cfg.psi * x.advantages) ** 2).sum(0).mean()
    kl = torch.zeros_like(length, dtype=ll.dtype)  # [N]
    if x.ref is not None and cfg.beta:
        kl = (0.5 * (ll - pair_log_likelihoods(x.ref, x.weights)).square() / length).mean(0)
        loss = loss + cfg.beta * kl.mean()
    clipped = (diff < low) | (diff > high)
    return ObjectiveOutput(loss, {"kl": kl.mean().item(), "clip_ratio": clipped.float().mean().item()})
