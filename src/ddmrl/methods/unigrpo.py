"""UniGRPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from ddmrl.config._base import Str, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.config.names import ViewSampler
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """UniGRPO (MMaDA; Yang et al. 2025, arXiv 2505.15809, Algorithm 1): mask ratios evenly spaced from a random
    start up to fully masked."""

    method: Str = "unigrpo"
    remasking: ViewSampler = "unigrpo"


METHOD = Method(
    name="unigrpo",
    params=Params,
    display="UniGRPO",
    weighting="masked_mean",
    paper="Yang et al. 2025, MMaDA (arXiv 2505.15809), UniGRPO, Algorithm 1",
)
