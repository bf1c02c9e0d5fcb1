"""A researcher's own method, outside ddmrl: UniGRPO's views by default, a weighting, group advantages and an
objective of its own (``mylab.objectives``, whose objective logs a term of its own), a tighter clip range by default
and a rollout augmenter of its own (``mylab.augmenters``). A ``methods:`` section names it as
``method: mylab.methods:REBALANCED``."""

from __future__ import annotations

from ddmrl.config import GRPOConfig, section
from ddmrl.config.names import Advantages, ViewSampler
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """UniGRPO's views (remasking: unigrpo), its own group advantages, epsilon 0.1."""

    method: str = "mylab.methods:REBALANCED"
    remasking: ViewSampler = "unigrpo"
    scale_rewards: Advantages = "mylab.objectives:ranks"
    epsilon: float = 0.1


REBALANCED = Method(
    name="mylab.methods:REBALANCED",
    params=Params,
    display="rebalanced (mylab)",
    weighting="mylab.objectives:halved",
    objective="mylab.objectives:clip_with_confidence",
    augmenter="mylab.augmenters:TIE_BREAK",
    paper="a test's own method",
)
