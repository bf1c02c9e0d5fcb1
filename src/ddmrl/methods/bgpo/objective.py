"""BGPO's weighting and objective (Lin et al. 2025, Boundary-Guided Policy Optimization, arXiv 2510.11683): a lower
bound of the ELBO-based GRPO objective that is linear in the Monte Carlo samples (the views), so each view's gradient
can be taken and its graph freed on its own (``Method.separable_views``; ``ddmrl.training.grpo.update``).

With view j's one-sample ELBO l_j = sum_k omega_j(k) log p_j(k) (:func:`bgpo_elbo_weights`) and the ELBO the mean
over the m views, the sequence ratio exp(ELBO_theta - ELBO_old) = exp(mean_j Delta_j), Delta_j = l_j - l_j_old, is
bounded per view by the sign of the advantage:

    A > 0:   exp(mean_j Delta_j) >= 1 + mean_j Delta_j = mean_j (1 + Delta_j)          (e^x >= 1 + x)
    A <= 0:  exp(mean_j Delta_j) <= mean_j exp(Delta_j)                                (Jensen)

so A exp(mean_j Delta_j) >= mean_j A r_j with r_j = 1 + Delta_j (A > 0) or exp(Delta_j) (A <= 0): a mean of
per-view terms. Each is clipped as PPO's, psi_j = min(r_j A, clip(r_j, 1 - eps, 1 + eps_high) A), and the loss is
-(1/m) sum_j agg_i psi_ij, agg the token mean over the valid tokens (the release's ``token-mean`` of a per-sequence
value: rows weighted by their length) or the mean over rows (``loss_type: seq_mean``). On policy (theta = old)
every Delta_j is 0 and the bound equals the ELBO objective in value and gradient (grad(1 + D) = grad(e^D) at D = 0,
and grad mean_j e^{D_j} = grad e^{mean_j D_j} there), the paper's equivalence. ``dual_clip`` c > 0: verl's dual
clip, psi >= c A for A < 0 (the release's clip_ratio_c = 3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ddmrl.masking.views import Views
from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


def bgpo_elbo_weights(views: Views, completion_mask: torch.Tensor, _mode: str):
    """BGPO (Lin et al. 2025): omega_j(k) = delta_j(k) / (t_j L), t_j = x_j / T the view's masked fraction of the T
    valid tokens and L the completion length, so that sum_k omega_j(k) log p_j(k) is the view's one-sample ELBO
    (T / x_j) sum_{masked} log p divided by L (the release's ``loss_per_sample / response_length``)."""
    targets = (views.target_masks & completion_mask[None]).float()  # [V, N, L]
    return targets / (views.t.clamp_min(1e-8)[..., None] * targets.shape[-1]), None


def view_elbo_change(logps: torch.Tensor, old: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Delta_j = l_j(theta) - l_j(old), l_j = sum_k omega_j(k) log p_j(k): [V, N, L] -> [V, N] (positions of weight 0
    contribute 0, even where a log-prob is -inf)."""
    return torch.where(weights > 0, weights * (logps - old), 0.0).sum(-1)


def bound_ratio(delta: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """BGPO's per-view ratio: 1 + Delta (A > 0, the linear lower bound of e^Delta) or exp(Delta) (A <= 0, Jensen).
    ``delta`` [V, N], ``advantages`` [N] -> [V, N]."""
    return torch.where(advantages[None] > 0, 1 + delta, torch.exp(delta))


def bgpo(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    """The loss of the step's views: the mean over views of the aggregated clipped bound (module docstring)."""
    a = x.advantages[None]  # [1, N]
    ratio = bound_ratio(view_elbo_change(x.logps, x.old, x.weights), x.advantages)  # [V, N]
    unclipped, clipped = ratio * a, ratio.clamp(1 - cfg.epsilon, 1 + (cfg.epsilon_high or cfg.epsilon)) * a
    psi = torch.minimum(unclipped, clipped)  # [V, N]
    if cfg.dual_clip:
        psi = torch.where(a < 0, torch.maximum(psi, cfg.dual_clip * a), psi)
    if cfg.loss_type == "token_mean":
        length = x.completion_mask.sum(1).float()  # [N] the valid tokens each row's value is broadcast over
        per_view = -(psi * length).sum(1) / length.sum().clamp_min(1)  # [V]
    else:
        per_view = -psi.mean(1)
    return ObjectiveOutput(per_view.mean(), {"clip_ratio": (clipped < unclipped).float().mean().item()})
