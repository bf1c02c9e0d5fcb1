"""GDPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ddmrl.config._base import Int, Str, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.config.names import ViewSampler
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """GDPO (Rojas et al. 2026, ICLR, arXiv 2510.08554): the sequence ratio of a Gauss-Legendre ELBO over
    views_per_step nodes (one mask per node); mean-only advantages by definition."""

    method: Str = "gdpo"
    remasking: ViewSampler = "gdpo_quadrature"
    views_per_step: Int = Field(3, ge=1)
    scale_rewards: Literal["none"] = "none"


# N = 3 Gauss-Legendre nodes, one mask per node; unnormalised (mean-only) advantages
METHOD = Method(
    name="gdpo",
    params=Params,
    display="GDPO",
    weighting="gdpo_elbo",
    objective="sequence_clip",
    paper="Rojas et al. 2026, GDPO: Group Diffusion Policy Optimization (ICLR 2026, arXiv 2510.08554)",
)
