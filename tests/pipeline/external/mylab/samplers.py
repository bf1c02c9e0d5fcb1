"""A researcher's own sampler, outside ddmrl: LLaDA's semi-autoregressive sampler with its own option, the order in
which each step's tokens are committed. A section names it as ``sampler: {name: "mylab.samplers:generate"}`` and
sets the option under its name, ``options: {"mylab.samplers:generate": {order: random}}``; it takes the llada
sampler's shared keys (``keywords``)."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from ddmrl.config._base import Section, section
from ddmrl.samplers import llada
from ddmrl.samplers.base import SampleOutput

keywords = llada.keywords  # the keys of the shared sampler section it takes (ddmrl.rollout.sampler_kwargs)


@section
class Params(Section):
    """This sampler's own keys (``sampler.options``)."""

    order: Literal["random", "low_confidence"] = Field("low_confidence", description="Which tokens a step commits.")


def generate(model, prompt_ids: torch.Tensor, completion_length: int, order: str = "low_confidence", **kw):
    """``ddmrl.samplers.llada.generate`` committing in ``order``."""
    out: SampleOutput = llada.generate(model, prompt_ids, completion_length, **(kw | {"remasking": order}))
    return out
