"""A researcher's own method, outside ddmrl: UniGRPO's views with RebRL's rebalanced weights, a tighter clip range
by default and a rollout augmenter of its own (``mylab.augmenters``). A ``methods:`` section names it as
``method: mylab.methods:REBALANCED``."""

from __future__ import annotations

from ddmrl.config import GRPOConfig, section
from ddmrl.config.schema import ViewSampler
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """UniGRPO's views (remasking: unigrpo), RebRL's weights, epsilon 0.1."""

    method: str = "mylab.methods:REBALANCED"
    remasking: ViewSampler = "unigrpo"
    epsilon: float = 0.1


REBALANCED = Method(
    name="mylab.methods:REBALANCED",
    params=Params,
    display="rebalanced (mylab)",
    weighting="rebrl",
    augmenter="mylab.augmenters:TIE_BREAK",
    paper="a test's own method",
)
