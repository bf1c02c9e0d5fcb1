"""The evaluation sections: ddmrl's held-out evaluation and lm-evaluation-harness's."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ddmrl.config._base import (
    Float,
    Int,
    Section,
    Str,
    refuse,
    section,
)
from ddmrl.config.sampler import SamplerConfig


@section
class PassAtKConfig(Section):
    """pass@k on the held-out items (Chen et al. 2021): ``n`` sampled completions per item at ``temperature``
    (the evaluation sampler otherwise), the unbiased estimator for each ``k`` (``ddmrl.stats.pass_at_k``), beside the
    greedy accuracy. JustGRPO's "flexibility trap" claim (Ni et al. 2026) is about how RL moves pass@k."""

    n: Int = Field(0, ge=0, description="Samples per held-out item (0: no pass@k).")
    k: tuple[Int, ...] = Field((1, 4, 16), min_length=1, description="The k of pass@k (each at most n).")
    temperature: Float = Field(1.0, gt=0, description="Sampling temperature of the n samples.")

    @model_validator(mode="after")
    def _check(self) -> PassAtKConfig:
        if self.n and max(self.k) > self.n:
            raise refuse("k", self.k, f"each k must be at most n = {self.n}")
        if any(k < 1 for k in self.k):
            raise refuse("k", self.k, "each k must be at least 1")
        return self


@section
class EvaluateConfig(Section):
    """Held-out evaluation: greedy decoding as in d1's protocol (text); for images, GenEval's several sampled
    images per prompt."""

    batch_size: Int = Field(128, ge=1, description="Prompts decoded together.")
    samples_per_prompt: Int = Field(1, ge=1, description="Generations per held-out prompt (GenEval: 4 images).")
    min_images_per_tag: Int = Field(
        0,
        ge=0,
        description="Images: at least this many per GenEval tag; a tag with few held-out prompts gets more samples "
        "per prompt (Overall is a mean of tags: its standard error is set by the smallest ones). 0: "
        "samples_per_prompt for every prompt.",
    )
    sampler: SamplerConfig = Field(default_factory=SamplerConfig, description="The evaluation sampler.")
    pass_at_k: PassAtKConfig = Field(
        default_factory=PassAtKConfig, description="pass@k from sampled completions (text tasks; n: 0 is off)."
    )
    sampled_temperature: Float = Field(
        0.0,
        ge=0,
        description="Text: also decode every held-out item once at this temperature, the rollouts' policy, and report "
        "its accuracy and gain beside the greedy ones (RL sharpens sampling towards what greedy decoding already "
        "returns, so the greedy gain understates what it learnt). 0: off.",
    )


@section
class LmEvalConfig(Section):
    """lm-evaluation-harness on the text models (``ddmrl.lmeval``, the ``lmeval`` extra; docs/lmeval.md): one
    ``lm_eval`` stage per model (base, SFT, each GRPO run), off while ``tasks`` is empty. It samples with
    ``evaluate.sampler``, as ddmrl's own evaluation does."""

    tasks: tuple[Str, ...] = Field((), description="lm-eval task names (empty: no lm_eval stage).")
    include_path: Str = Field(
        "",
        description="Folder of lm-eval YAML tasks (over local data files: offline); empty: lm-eval's own tasks. "
        "With a folder, lm-eval's own tasks are not indexed.",
    )
    num_fewshot: dict[Str, Int] = Field(
        default_factory=dict, description="Few-shot examples per task (a task not named: its own default, else 0)."
    )
    limit: Int = Field(0, ge=0, description="Items per task (0: all).")
    batch_size: Int = Field(16, ge=1, description="Prompts sampled together; Monte Carlo views per forward pass.")
    loglikelihood: Literal["mc", "exact_elbo", "left_to_right"] = Field(
        "mc",
        description="mc: LLaDA's Monte Carlo ELBO; exact_elbo: every mask enumerated (short continuations); "
        "left_to_right: exact, one token per step (ddmrl.likelihood.sequence).",
    )
    mc_num: Int = Field(128, ge=1, description="loglikelihood mc: views per (context, continuation) (LLaDA: 128).")
