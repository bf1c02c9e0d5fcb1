"""The PPO/GRPO token objective of d1 (Zhao et al. 2025), UniGRPO (MMaDA, Yang et al. 2025), MaskGRPO (Ma et al.
2026), RebRL (Zhang et al. 2026) and TraceRL (Wang et al. 2026): at each view the token ratio, clipped, minus beta
times the k3 KL, weighted and aggregated; the views of one step are averaged. ``epsilon_high``: clip-higher
(IGPO, Zhao et al. 2026)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.policy_loss import aggregate, clipped_token_loss

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


def token_clip(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    losses, kls, clips = [], [], []
    for v in range(x.logps.shape[0]):
        ref = None if x.ref is None else x.ref[v]
        tl = clipped_token_loss(x.logps[v], x.old[v], ref, x.advantages, cfg.epsilon, cfg.beta, cfg.epsilon_high)
        losses.append(aggregate(tl.loss, x.weights[v], cfg.loss_type, x.z))
        kls.append(aggregate(tl.kl, x.weights[v], "token_mean").item())
        clips.append(aggregate(tl.clipped, x.weights[v], "token_mean").item())
    n = len(losses)
    return ObjectiveOutput(torch.stack(losses).mean(), {"kl": sum(kls) / n, "clip_ratio": sum(clips) / n})
