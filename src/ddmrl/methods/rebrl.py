"""RebRL as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ddmrl.config._base import Str, refuse, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.config.names import ViewSampler
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """RebRL (Zhang et al. 2026, CVPR, Rebalanced Timestep Credits): a plug-in reweighting of UniGRPO's objective,
    lambda(t) = t and the token factor 1/F (rebrl_mode: token) on UniGRPO's own views (remasking: unigrpo);
    rebrl_linear gives its t_j = j / mu schedule instead."""

    method: Str = "rebrl"
    remasking: ViewSampler = "unigrpo"
    rebrl_mode: Literal["none", "t1", "t2", "token", "token_t2"] = Field(
        "token", description="Its rebalancing: none, lambda(t) = t or t^2, with (token) the 1/F token factor."
    )

    def _check_method(self) -> None:
        if self.remasking == "full_completion":
            raise refuse(
                "remasking",
                self.remasking,
                "RebRL's 1/F rebalancing is a no-op on fully masked views; "
                "use rebrl_linear, unigrpo or maskgrpo_fading",
            )


# a plug-in on UniGRPO's views: lambda(t) = t with 1/F (RebRL Eq. 11, Algorithm 1); rebrl_linear: t_j = j / mu
METHOD = Method(
    name="rebrl",
    params=Params,
    display="RebRL",
    weighting="rebrl",
    paper="Zhang et al. 2026, RebRL: Rebalanced Timestep Credits (CVPR 2026)",
)
