"""A researcher's own sampler, outside ddmrl: LLaDA's semi-autoregressive sampler committing each step's tokens in
random order (``remasking: random``) whatever the section says. A section names it as
``sampler: {name: "mylab.samplers:generate"}``; it takes the llada sampler's shared keys."""

from __future__ import annotations

import torch

from ddmrl.samplers import llada
from ddmrl.samplers.base import SampleOutput

keywords = llada.keywords  # the keys of the shared sampler section it takes (ddmrl.rollout.sampler_kwargs)


def generate(model, prompt_ids: torch.Tensor, completion_length: int, **kw) -> SampleOutput:
    """``ddmrl.samplers.llada.generate`` with random-order commits."""
    return llada.generate(model, prompt_ids, completion_length, **(kw | {"remasking": "random"}))
