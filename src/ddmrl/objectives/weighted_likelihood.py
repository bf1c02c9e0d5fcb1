"""wd1's objective (Tang et al. 2026): ratio-free, sum_i (-w+_i + w-_i) log pi(o_i) with w+- the group softmaxes
of +-A and log pi d1's one-step estimate summed over the completion."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


def weighted_likelihood(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    logpi = (x.weights * x.logps).sum((0, 2)) / x.logps.shape[0]  # [N], d1's one-step estimate (views averaged)
    a = x.advantages.view(-1, x.num_generations)  # [B, G]
    w_pos, w_neg = torch.softmax(a, 1), torch.softmax(-a, 1)
    loss = ((-w_pos + w_neg) * logpi.view_as(a)).sum(1).mean() / x.num_generations
    return ObjectiveOutput(loss, {})
