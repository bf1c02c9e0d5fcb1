"""ESPO's objective (Ou et al. 2025, Principled RL for Diffusion LLMs Emerges from a Sequence-Level Perspective,
arXiv 2512.03759; ML-GSAI/ESPO ``espo/espo_trainer.py``): the whole completion y is one action, its log-likelihood
the ELBO L_theta(y) (``espo_elbo`` weights over the step's views, the same views for theta, old and ref).

    rho_i = exp((L_theta(y_i) - L_old(y_i)) / |y_i|)                    (the per-token normalised sequence ratio)
    loss  = -(1/N) sum_i min(rho_i A_i, clip(rho_i, 1 - eps, 1 + eps_high) A_i)
            + beta (1/N) sum_i (L_theta(y_i) - L_ref(y_i))^2 / (2 |y_i|)   (k2 of the ELBOs, over the length)

|y_i| is the number of valid completion tokens (every position with ``loss_after_eos``: the release's fixed L)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ddmrl.likelihood import sequence_elbo
from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


def k2_kl(elbo: torch.Tensor, ref_elbo: torch.Tensor) -> torch.Tensor:
    """Schulman's k2 estimator of the sequence KL, (L_theta - L_ref)^2 / 2 (ESPO's "robust" KL: its gradient does
    not explode as the exp of k3's does on sequence-level log-ratios). [N]."""
    return 0.5 * (elbo - ref_elbo).square()


def espo_clip(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    """The clipped sequence-ratio loss with beta times the length-normalised k2 KL; clip_ratio is the share of
    sequences whose ratio is clipped on the side their advantage pushes (the release's ``clip_ratio/region_mean``)."""
    length = x.completion_mask.sum(1).clamp_min(1)  # [N] |y|
    elbo, elbo_old = sequence_elbo(x.logps, x.weights), sequence_elbo(x.old, x.weights)  # [N]
    ratio = torch.exp((elbo - elbo_old) / length)
    low, high = 1 - cfg.epsilon, 1 + (cfg.epsilon_high or cfg.epsilon)
    a = x.advantages
    loss = -torch.minimum(ratio * a, ratio.clamp(low, high) * a).mean()
    kl = torch.zeros_like(elbo)
    if x.ref is not None and cfg.beta:
        kl = k2_kl(elbo, sequence_elbo(x.ref, x.weights)) / length
        loss = loss + cfg.beta * kl.mean()
    clipped = ((ratio < low) & (a < 0)) | ((ratio > high) & (a > 0))
    return ObjectiveOutput(loss, {"kl": kl.mean().item(), "clip_ratio": clipped.float().mean().item()})
