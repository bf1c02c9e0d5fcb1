"""Coupled-GRPO's objective (DiffuCoder; Gong et al. 2025, arXiv 2506.20639): the PPO/GRPO token surrogate, with
beta times the k3 KL, of one pooled log-probability estimate per token. The step's views are pooled before the
ratio, not after: log pi(k) ~ sum_v omega_v(k) log p_v(k), with the ``coupled`` weights giving the release's
(log p_full + log p_pair / t_pair) / 2, and rho(k) = exp(pooled - pooled_old). ``token_clip`` instead averages one
clipped loss per view."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.policy_loss import aggregate, clipped_token_loss

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


def pooled(logps: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_v omega_v(k) log p_v(k): [V, N, L] -> [N, L] (positions of weight 0 contribute 0, even where log p is
    -inf)."""
    return torch.where(weights > 0, weights * logps, 0.0).sum(0)


def coupled_clip(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    """The clipped token loss of the pooled estimates, aggregated over the positions some view of the step trains
    (every valid completion token for Coupled-GRPO's views: the release's ``completion_mask`` mean)."""
    ref = None if x.ref is None else pooled(x.ref, x.weights)
    old = pooled(x.old, x.weights)
    tl = clipped_token_loss(
        pooled(x.logps, x.weights), old, ref, x.advantages, cfg.epsilon, cfg.beta, cfg.epsilon_high
    )
    tokens = x.targets.any(0).float()  # [N, L]
    kl, clipped = aggregate(tl.kl, tokens).item(), aggregate(tl.clipped, tokens).item()
    return ObjectiveOutput(aggregate(tl.loss, tokens, cfg.loss_type, x.z), {"kl": kl, "clip_ratio": clipped})
