"""TraceRL as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from typing import Literal

from ddmrl.config._base import Str, section
from ddmrl.config.names import ViewSampler
from ddmrl.methods.base import Method
from ddmrl.methods.mixins import TraceSteps


@section
class Params(TraceSteps):
    """TraceRL / TraDo (Wang et al. 2026, ICLR, arXiv 2509.06949): views rebuilt from the sampler's own order,
    consecutive steps merged by shrink, every token a target exactly once per rollout batch, the trace steps spread
    over the num_iterations optimiser steps (so that every method takes the same steps per rollout batch); per-row
    mean, KL against the old policy (dLLM-RL's train/rl_llada.py)."""

    method: Str = "tracerl"
    remasking: ViewSampler = "tracerl"
    loss_type: Literal["token_mean", "seq_mean"] = "seq_mean"
    kl_target: Literal["ref", "old"] = "old"


# per-row mean over a trace step's tokens, KL against the old policy (dLLM-RL train/rl_llada.py)
METHOD = Method(
    name="tracerl",
    params=Params,
    display="TraceRL",
    weighting="masked_mean",
    paper="Wang et al. 2026, TraceRL / TraDo (ICLR 2026, arXiv 2509.06949)",
)
