"""SPG as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ddmrl.config._base import Float, Str, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.config.names import ViewSampler
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """SPG (Wang et al. 2026, ICLR, arXiv 2510.09541): REINFORCE with an ELBO proxy for positive advantages and an
    EUBO/ELBO mix for the others, views_per_step block-random masks per step; no KL by definition."""

    method: Str = "spg"
    remasking: ViewSampler = "block_random"
    beta: Literal[0.0] = 0.0
    eubo_beta: Float = Field(
        1.0, gt=0, description="beta of the EUBO proxy (paper: 1.0 Sudoku, 1.5 GSM8K/MATH, 2.0 Countdown)."
    )
    eubo_mix: Float = Field(
        0.5, ge=0, le=1, description="Weight of the EUBO in the proxy for negative advantages (1: pure EUBO)."
    )


# num_t = 2 block-random masks per step, EUBO beta 1.0, mix 0.5; REINFORCE without KL
METHOD = Method(
    name="spg",
    params=Params,
    display="SPG",
    weighting="masked_mean",
    objective="spg",
    paper="Wang et al. 2026, SPG: Sandwiched Policy Gradient (ICLR 2026, arXiv 2510.09541)",
)
