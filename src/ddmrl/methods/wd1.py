"""wd1 as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from typing import Literal

from ddmrl.config._base import Str, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.config.names import ViewSampler
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """wd1 (Tang et al. 2026, ICLR, arXiv 2507.08838): ratio-free weighted likelihood with group-softmax weights of
    +-A and d1's one-step log-likelihood; by definition no KL and mean-only advantages."""

    method: Str = "wd1"
    remasking: ViewSampler = "full_completion"
    beta: Literal[0.0] = 0.0
    scale_rewards: Literal["none"] = "none"


# ratio-free: no old or reference likelihood; A = R - mean(R) turned into group softmax weights
METHOD = Method(
    name="wd1",
    params=Params,
    display="wd1",
    weighting="completion_mean",
    objective="weighted_likelihood",
    paper="Tang et al. 2026, wd1: Weighted Policy Optimization (ICLR 2026, arXiv 2507.08838)",
)
