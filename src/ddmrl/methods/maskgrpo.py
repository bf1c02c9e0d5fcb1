"""MaskGRPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from ddmrl.config._base import Str, section
from ddmrl.config.schema import GRPOConfig, ViewSampler
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """MaskGRPO (Ma et al. 2026, ICLR, arXiv 2510.02880): truncated ratios t_j = gamma + (1 - gamma) j / mu with
    AR-like fading (text; images: maskgrpo_random, gamma 0.8). Paper runs: epsilon 0.2, beta 0.01, mu 12."""

    method: Str = "maskgrpo"
    remasking: ViewSampler = "maskgrpo_fading"


# text runs: gamma 0.6, AR-like fading (paper runs: eps 0.2, beta 0.01, mu 12; its t2t_grpo_train.sh)
METHOD = Method(
    name="maskgrpo",
    params=Params,
    display="MaskGRPO",
    weighting="masked_mean",
    paper="Ma et al. 2026, MaskGRPO (ICLR 2026, arXiv 2510.02880)",
)
