"""GDPO's objective (Rojas et al. 2026): the sequence ratio exp(ELBO_theta - ELBO_old), with the ELBO a
Gauss-Legendre sum over the step's views, clipped, length-normalised, minus beta times the k3 KL of the ELBOs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ddmrl.likelihood import sequence_elbo
from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.policy_loss import k3_kl

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


def sequence_clip(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    elbo, elbo_old = sequence_elbo(x.logps, x.weights), sequence_elbo(x.old, x.weights)  # [N]
    length = x.completion_mask.sum(1).clamp_min(1)  # [N]
    ratio = torch.exp(elbo - elbo_old)
    a = x.advantages
    unclipped, clipped = ratio * a, ratio.clamp(1 - cfg.epsilon, 1 + (cfg.epsilon_high or cfg.epsilon)) * a
    psi = torch.minimum(unclipped, clipped)
    kl = k3_kl(elbo, sequence_elbo(x.ref, x.weights)) if x.ref is not None and cfg.beta else torch.zeros_like(elbo)
    loss = (-(psi - cfg.beta * kl) / length).mean()
    clip_ratio = (clipped < unclipped).float().mean().item()
    return ObjectiveOutput(loss, {"kl": (kl / length).mean().item(), "clip_ratio": clip_ratio})
