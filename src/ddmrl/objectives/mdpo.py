"""MDPO's policy loss (He et al. 2025, arXiv 2508.13148; ``compute_loss`` of its released trainer).

At a selected sampler step s of rollout i, with input the state x_s, targets the step's full prediction x̂_0^(s) at
the masked positions M, per-step advantage A_{i,s} and the sampler's confidence c_k in each target:

    loss_i = (1 / |M|) sum_{k in M} c_k [ -min(rho_k A, clip(rho_k, 1 -/+ eps) A) L / |M|  +  beta k2_k ],

rho_k = pi_theta(x̂_k | x_s) / pi_old(x̂_k | x_s) and k2 = (log pi_ref - log pi_theta)^2 / 2, the KL estimator of its
code. L / |M| = 1 / t is the ELBO weight of a view that masks a fraction t (here t is the realised fraction of the
valid completion tokens, as for every method in ddmrl; the released code counts every completion position). The
released code trains one rollout per micro-batch, so the mean over |M| is per rollout (``loss_type: seq_mean``);
``token_mean`` pools the step's rollouts. The views of one optimiser step are averaged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


def k2_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Schulman's k2 estimator of KL(pi_theta || pi_ref) per token: (log pi_ref - log pi_theta)^2 / 2; >= 0."""
    return (ref_logps - logps) ** 2 / 2


def mdpo(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    if "view_advantages" not in x.extras:
        raise ValueError("mdpo needs per-view (per-step) advantages")
    losses, kls, clips = [], [], []
    for v in range(x.logps.shape[0]):
        targets, w = x.targets[v].float(), x.weights[v]  # [N, L] masked valid tokens; their confidences
        a = x.extras["view_advantages"][v][:, None]  # [N, 1]
        ratio = torch.exp(x.logps[v] - x.old[v])
        unclipped, clipped = ratio * a, ratio.clamp(1 - cfg.epsilon, 1 + (cfg.epsilon_high or cfg.epsilon)) * a
        per_token = -torch.minimum(unclipped, clipped) / x.t[v].clamp_min(1e-8)[:, None]  # L / |M| = 1 / t
        kl = k2_kl(x.logps[v], x.ref[v]) if x.ref is not None and cfg.beta else torch.zeros_like(per_token)
        per_token = per_token + cfg.beta * kl
        if cfg.loss_type == "seq_mean":
            losses.append(((w * per_token).sum(1) / targets.sum(1).clamp_min(1)).mean())
        else:
            losses.append((w * per_token).sum() / targets.sum().clamp_min(1))
        count = targets.sum().clamp_min(1)
        kls.append(((targets * kl).sum() / count).item())
        clips.append(((targets * (clipped < unclipped).float()).sum() / count).item())
    n = len(losses)
    return ObjectiveOutput(torch.stack(losses).mean(), {"kl": sum(kls) / n, "clip_ratio": sum(clips) / n})
