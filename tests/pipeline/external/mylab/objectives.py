"""A researcher's own parts of a method, outside ddmrl, named by import path in its record and section: a token
weighting (``weighting: mylab.objectives:halved``), a group advantage (``scale_rewards: mylab.objectives:ranks``) and
an objective that logs a term of its own (``objective: mylab.objectives:clip_with_confidence``)."""

from __future__ import annotations

import torch

from ddmrl.config import GRPOConfig
from ddmrl.masking.views import Views
from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.token_clip import token_clip
from ddmrl.objectives.weights import completion_mean_weights


def halved(views: Views, completion_mask: torch.Tensor, rebrl_mode: str = "token") -> tuple[torch.Tensor, None]:
    """Half the completion-mean weights omega [V, N, L]."""
    weights, _ = completion_mean_weights(views, completion_mask, rebrl_mode)
    return 0.5 * weights, None


def ranks(r: torch.Tensor, std: torch.Tensor, eps: float) -> torch.Tensor:
    """Centred ranks within each group [B, G] (ties share the lower rank), scaled to [-1/2, 1/2]."""
    g = r.shape[1]
    below = (r[:, None, :] < r[:, :, None]).sum(-1).float()  # [B, G] how many of the group score lower
    return below / max(g - 1, 1) - below.mean(1, keepdim=True) / max(g - 1, 1)


def clip_with_confidence(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    """The token clip objective, logging the mean target log-prob of the step's views beside its KL and clip ratio."""
    out = token_clip(x, cfg)
    confidence = (x.logps.detach() * x.targets).sum() / x.targets.sum().clamp_min(1)
    return ObjectiveOutput(out.loss, {**out.terms, "mylab/confidence": confidence.item()})
