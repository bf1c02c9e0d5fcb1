"""SPG's objective (Sandwiched Policy Gradient, Wang et al. 2026): REINFORCE without ratio or KL, on an ELBO proxy
for A > 0 and an EUBO proxy (or an EUBO/ELBO mix) for A <= 0, which sandwich the true log-likelihood; sequences
weighted by completion length, as SPG's trainer."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ddmrl.likelihood import elbo_proxy, eubo_proxy
from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


def spg(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    """``cfg``: a run of SPG (its ``Params`` declares eubo_beta and eubo_mix, ``ddmrl.methods.spg``)."""
    elbo = elbo_proxy(x.logps, x.targets)  # [N]
    eubo = eubo_proxy(x.logps, x.targets, x.t, x.completion_mask, cfg.eubo_beta)  # [N]
    negative = cfg.eubo_mix * eubo + (1 - cfg.eubo_mix) * elbo
    proxy = torch.where(x.advantages > 0, elbo, negative)
    # weighted by completion length (tokens up to EOS included), as SPG's trainer: sum_i |y_i| (-A_i p_i) / sum |y|
    length = x.completion_mask.sum(1).to(proxy.dtype)  # [N]
    return ObjectiveOutput(-(x.advantages * proxy * length).sum() / length.sum().clamp_min(1), {})
