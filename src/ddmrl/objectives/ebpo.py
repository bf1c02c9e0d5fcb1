"""EBPO's objective (LLaDA2.1, arXiv 2602.08676, Eq. 4-5 as yjyddq/DARE implements it: ``compute_policy_loss_ebpo``,
``compute_ebpo_composite_elbo``, ``compute_ebpo_kl`` in ``verl/trainer/ppo/dllm_core_algos.py``): one composite ELBO
per completion, the mean over the step's M Monte Carlo timesteps of the sum of its block ELBOs,

    L_theta(y) = (1/M) sum_m sum_b sum_{k in block b masked at m} log p_theta(y_k | view m, b) / p_mask(m, b),

and PPO once on the sequence ratio rho = exp(L_theta - L_old) (not normalised by the length), clipped in the log
domain (the same value as max(-A rho, -A clip(rho))), averaged over the sequences; plus beta times the k3 KL of the
composite ELBOs (DARE's configured estimator; its recipes run without a KL)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from ddmrl.likelihood import sequence_elbo
from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.policy_loss import k3_kl

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


def composite_elbo(logps: torch.Tensor, weights: torch.Tensor, samples: int) -> torch.Tensor:
    """(1/M) sum_v sum_k omega_v(k) log p_v(k): [V, N, L] -> [N], M = ``samples`` Monte Carlo timesteps."""
    return sequence_elbo(logps, weights) / samples


def ebpo_clip(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    """The clipped composite ratio loss, mean over the sequences, plus beta times the mean k3 KL; clip_ratio is the
    share of sequences clipped on the side their advantage pushes."""
    m = cfg.views_per_step
    elbo, elbo_old = composite_elbo(x.logps, x.weights, m), composite_elbo(x.old, x.weights, m)  # [N]
    log_ratio = elbo - elbo_old
    a = x.advantages
    log_low, log_high = math.log1p(-cfg.epsilon), math.log1p(cfg.epsilon_high or cfg.epsilon)
    effective = torch.where(a >= 0, log_ratio.clamp(max=log_high), log_ratio.clamp(min=log_low))
    loss = (-a * torch.exp(effective)).mean()
    kl = torch.zeros_like(elbo)
    if x.ref is not None and cfg.beta:
        kl = k3_kl(elbo, composite_elbo(x.ref, x.weights, m))
        loss = loss + cfg.beta * kl.mean()
    clipped = ((log_ratio < log_low) & (a < 0)) | ((log_ratio > log_high) & (a > 0))
    return ObjectiveOutput(loss, {"kl": kl.mean().item(), "clip_ratio": clipped.float().mean().item()})
