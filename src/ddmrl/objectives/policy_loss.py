"""Token-level clipped policy loss with a k3 KL penalty, and its aggregation (TRL's order: ratio, clip, KL,
aggregate; verl's split of per-token loss and ``agg_loss``)."""

from __future__ import annotations

from typing import NamedTuple

import torch


class TokenLoss(NamedTuple):
    """Per-token terms, each [N, L]: ``loss`` = -(min(rho A, clip(rho) A) - beta KL), ``ratio`` rho,
    ``clipped`` (1 where the clipped term is the active one), ``kl`` (k3 estimate, >= 0)."""

    loss: torch.Tensor
    ratio: torch.Tensor
    clipped: torch.Tensor
    kl: torch.Tensor


def k3_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi_theta || pi_ref) per token: exp(d) - d - 1 with d = ref - theta; >= 0."""
    d = ref_logps - logps
    return torch.exp(d) - d - 1


def clipped_token_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    ref_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    epsilon: float,
    beta: float,
    epsilon_high: float = 0.0,
) -> TokenLoss:
    """PPO/GRPO token surrogate at one view: rho = exp(logp - logp_old), psi = min(rho A, clip(rho, 1 -/+ eps) A);
    with ``epsilon_high`` > 0 the upper bound is 1 + epsilon_high (clip-higher: DAPO, Yu et al. 2025, Eq. 10).

    Args:
        logps, old_logps, ref_logps: [N, L] token log-probabilities under the current, rollout-time and
            reference policies, all at the same view (same masks).
        advantages: [N], one per completion, broadcast over its tokens, or [N, L], one per token (a value model's).
    """
    ratio = torch.exp(logps - old_logps)  # [N, L]
    a = advantages[:, None] if advantages.dim() == 1 else advantages  # [N, 1] or [N, L]
    unclipped, clipped = ratio * a, ratio.clamp(1 - epsilon, 1 + (epsilon_high or epsilon)) * a
    psi = torch.minimum(unclipped, clipped)
    kl = k3_kl(logps, ref_logps) if ref_logps is not None and beta != 0 else torch.zeros_like(logps)
    return TokenLoss(-(psi - beta * kl), ratio.detach(), (clipped < unclipped).float(), kl.detach())


def aggregate(
    per_token: torch.Tensor, weights: torch.Tensor, loss_type: str = "token_mean", z: torch.Tensor | None = None
) -> torch.Tensor:
    """Reduce a per-token quantity [N, L] with weights [N, L] to a scalar.

    token_mean  sum(w * x) / sum(w) over the whole batch (d1, MaskGRPO: a global token mean)
    seq_mean    mean_i [ sum_k w x / sum_k w ] (per-sequence mean first)
    z given     mean_i [ sum_k w x / z_i ] (RebRL's per-sample normaliser, precomputed over all views)
    """
    if z is not None:
        return ((weights * per_token).sum(1) / z.clamp_min(1e-8)).mean()
    if loss_type == "token_mean":
        return (weights * per_token).sum() / weights.sum().clamp_min(1e-8)
    if loss_type == "seq_mean":
        return ((weights * per_token).sum(1) / weights.sum(1).clamp_min(1e-8)).mean()
    raise ValueError(f"unknown loss_type '{loss_type}'; choose token_mean or seq_mean")
