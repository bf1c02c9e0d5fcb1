"""JustGRPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ddmrl.config._base import Bool, Str, refuse, section
from ddmrl.config.sampler import SamplerConfig
from ddmrl.methods.base import Method
from ddmrl.methods.mixins import LossAfterEos, TraceSteps


@section
class Params(LossAfterEos, TraceSteps):
    """JustGRPO (Ni et al. 2026, The Flexibility Trap, ICML, arXiv 2601.15165; LeapLabTHU/JustGRPO ``grpo.py``):
    plain GRPO with the masked diffusion model run as an autoregressive one. Rollouts left to right (the llada
    sampler with blocks of one token: one token per forward pass, L passes); token j's log-probability is exact,
    from the input with the completion's positions >= j masked and those < j visible (TraceRL's views of a
    left-to-right rollout with shrink 1: L views, one target each, spread over the num_iterations optimiser steps);
    the clipped token ratio, no KL (beta 0 by definition); every completion position trained, the EOS padding
    included (loss_after_eos, as its release); each view's token mean over the samples of nonzero advantage only
    (the release's ``valid_samples``). Cost per rollout batch of L-token completions: L forward passes to sample
    them, L without gradient for the old log-probs (batched) and L with gradient, L / num_iterations per optimiser
    step. Release recipe (``train.py``): LLaDA-8B-Instruct, lr 5e-6, AdamW
    (0.9, 0.999), weight decay 0, max_grad_norm 1.0, G 16, one prompt per process and micro-step, 8 micro-steps x 8
    processes per optimiser step, one optimiser step per rollout batch (mu 1: the ratio is exactly 1), epsilon 0.2,
    256 tokens in 256 steps at temperature 1.0, 125 steps; evaluated with blocks of 32 (docs/reproduction.md)."""

    method: Str = "justgrpo"
    remasking: Literal["tracerl"] = "tracerl"
    shrink: Literal[1] = 1
    beta: Literal[0.0] = 0.0
    loss_type: Literal["token_mean"] = "token_mean"
    loss_after_eos: Bool = True
    sampler: SamplerConfig = Field(default_factory=lambda: SamplerConfig(block_length=1, temperature=1.0))

    def _check_method(self) -> None:
        s, why = self.sampler, "JustGRPO samples left to right, one token per forward pass"
        if s.name not in ("llada", "block"):  # block: a block-diffusion family, blocks of one token
            raise refuse("sampler.name", s.name, f"{why}: the llada (or block) sampler with block_length 1")
        if s.block_length != 1:
            raise refuse("sampler.block_length", s.block_length, f"{why}: blocks of one token (block_length 1)")
        if s.steps != 0:
            why_steps = "with block_length 1 every block takes one step whatever steps < 2 L; leave it 0"
            raise refuse("sampler.steps", s.steps, f"{why}: {why_steps}")
        if s.remasking == "rcr":
            raise refuse("sampler.remasking", s.remasking, f"{why}: rcr re-masks earlier tokens")
        if s.schedule != "linear":
            raise refuse("sampler.schedule", s.schedule, f"{why}: the linear schedule")
        for key in ("kv_cache", "parallel"):
            if getattr(s, key) != "none":
                raise refuse(f"sampler.{key}", getattr(s, key), f"{why}: LLaDA's plain generate ({key} none)")
        if self.aux_policy.kind != "none":
            raise refuse("aux_policy.kind", self.aux_policy.kind, f"{why}: no unmasking or schedule policy")


# left-to-right rollouts; token j from the input with positions >= j masked (TraceRL's views, shrink 1); the
# clipped token ratio, token mean over the samples of nonzero advantage; no KL
METHOD = Method(
    name="justgrpo",
    params=Params,
    display="JustGRPO",
    weighting="masked_mean",
    objective="valid_token_clip",
    paper="Ni et al. 2026, The Flexibility Trap: Why Arbitrary Order Limits Reasoning Potential in Diffusion "
    "Language Models (JustGRPO; ICML 2026, arXiv 2601.15165)",
    switches=("loss_after_eos",),
)
