"""The MAR branch (``mar:``): its model, sampler, pre-training, runs and evaluation."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ddmrl.config._base import (
    Bool,
    Float,
    Int,
    Section,
    Str,
    checked_as,
    deep_merge,
    refuse,
    section,
)
from ddmrl.config.names import DEFAULT_TRACKERS, Advantages, SectionName, Tracker, run_name
from ddmrl.errors import ConfigError
from ddmrl.objectives import DEFAULT_ADVANTAGES
from ddmrl.tasks import MAR_TASK

# ------------------------------------------------------------------------------------------------ MAR (ddmrl.mar)


@section
class MarModelConfig(Section):
    """TinyMAR (``ddmrl.mar.model``): a bidirectional transformer proposing a condition per continuous token and
    MAR's MLP diffusion head (Li et al. 2024)."""

    hidden_size: Int = Field(128, ge=8, description="Transformer width (= the conditions' size).")
    num_layers: Int = Field(4, ge=1, description="Transformer layers.")
    num_heads: Int = Field(4, ge=1, description="Attention heads.")
    intermediate_size: Int = Field(512, ge=1, description="Transformer MLP width.")
    head_width: Int = Field(128, ge=8, description="Diffusion head width (MAR: 1024).")
    head_depth: Int = Field(3, ge=1, description="Diffusion head residual blocks (MAR: 3).")
    diffusion_steps: Int = Field(1000, ge=2, description="T of the head's cosine training schedule (MAR: 1000).")
    position_embedding: Literal["learned", "rope"] = Field(
        "rope",
        description="Rotary positions (rope) or MAR's learned ones. Measured on geneval-mini, 1500 pre-training "
        "steps: with learned positions a masked object cell is sampled in its colour 12 % of the time given 70 % of "
        "the canvas (the model ignores its context; GenEval 0 %), with rope 57 %.",
    )


@section
class MarSamplerConfig(Section):
    """MAR's sampler (``ddmrl.mar.sampler``): a random order, the cosine schedule over AR steps, and the head's DDPM
    steps at a temperature (the noise scale)."""

    ar_steps: Int = Field(8, ge=1, le=64, description="AR steps over the 64 tokens (MAR: 64 over 256).")
    diffusion_steps: Int = Field(
        10, ge=2, description="Head sampling steps, respaced from the training schedule (MAR: 100)."
    )
    temperature: Float = Field(1.0, gt=0, description="tau: the head's noise scale (MAR's temperature).")
    variance: Literal["large", "small"] = Field(
        "large",
        description="sigma_k^2 of a head step: DDPM's beta_k (large) or posterior beta~_k (small); MAR learns one "
        "between them. small makes the last stochastic step's sigma 0.006 (10 of 1000 steps): its log-probs "
        "dominate every ratio.",
    )


@section
class MarPretrainConfig(Section):
    """Pre-training of the MAR base model (``ddmrl.mar.pretrain``): the diffusion loss on masked tokens."""

    max_steps: Int = Field(1500, ge=0, description="Optimiser steps.")
    batch_size: Int = Field(64, ge=1, description="Images per step.")
    learning_rate: Float = Field(1e-3, gt=0, description="AdamW learning rate.")
    warmup_steps: Int = Field(100, ge=0, description="Linear warm-up steps, then cosine decay.")
    weight_decay: Float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: Float = Field(1.0, gt=0, description="Gradient clipping.")
    log_every: Int = Field(50, ge=1, description="Log the loss every this many steps.")
    save_steps: Int = Field(
        250, ge=0, description="Checkpoint every this many steps (0 = never).", json_schema_extra={"why": "0 = never"}
    )
    save_total_limit: Int = Field(2, ge=1, description="Checkpoints kept.")
    diffusion_batch_mul: Int = Field(4, ge=1, description="(timestep, noise) draws per masked token (MAR: 4).")
    report_to: tuple[Tracker, ...] = Field(DEFAULT_TRACKERS, description="Experiment trackers (as grpo.report_to).")


@section
class MarRunConfig(Section):
    """One GRPO run on the MAR base model (``ddmrl.mar.grpo``): plain GRPO over the head's denoising transitions, or
    with MAR-GRPO's stabilisers (Ma et al. 2026): a frozen head, multi-trajectory expectation (MTE) on the top-k %
    most uncertain tokens, consistency-aware selection of AR tokens."""

    max_steps: Int = Field(24, ge=1, description="Optimiser steps in all (a rollout batch every num_iterations).")
    num_prompts: Int = Field(8, ge=1, description="Distinct prompts per rollout batch.")
    num_generations: Int = Field(
        8,
        ge=2,
        description="G: images per prompt.",
        json_schema_extra={"why": "GRPO needs a group to compare against"},
    )
    num_iterations: Int = Field(1, ge=1, description="mu: optimiser steps per rollout batch (MAR-GRPO's code: 1).")
    learning_rate: Float = Field(1e-4, gt=0, description="AdamW learning rate, constant (MAR-GRPO: 1e-6 at 1.5B).")
    beta: Float = Field(0.01, ge=0, description="KL coefficient (exact Gaussian KL per transition; MAR-GRPO: 0.01).")
    epsilon: Float = Field(0.2, gt=0, lt=1, description="PPO clip range of the ratio.")
    max_grad_norm: Float = Field(1.0, gt=0, description="Gradient clipping.")
    scale_rewards: Advantages = Field(DEFAULT_ADVANTAGES, description="Advantages, as grpo.scale_rewards.")
    sampler: MarSamplerConfig = Field(default_factory=MarSamplerConfig, description="The rollout sampler.")
    ar_steps_per_update: Int = Field(
        0, ge=0, description="AR steps each rollout batch trains, drawn at random (0 = all; MAR-GRPO: 12 of 64)."
    )
    diffusion_steps_per_update: Int = Field(
        0, ge=0, description="Stochastic diffusion steps trained, drawn at random (0 = all; MAR-GRPO: 10 of 25)."
    )
    train_tokens: Literal["masked", "committed"] = Field(
        "masked",
        description="Tokens an AR step trains: masked: every token unknown at the step (those it reveals and the "
        "drafts of the others, as MAR-GRPO's code); committed: only those it reveals.",
    )
    train_head: Bool = Field(True, description="Train the diffusion head with the transformer (false: frozen).")
    mte_trajectories: Int = Field(
        0, ge=0, description="MTE: extra head trajectories per token (0 = off; MAR-GRPO: 5)."
    )
    mte_top_percent: Float = Field(
        0.3, gt=0, le=1, description="MTE applies to this fraction of each image's most uncertain tokens."
    )
    consistency: Bool = Field(False, description="Consistency-aware selection of the drafts an AR step trains.")
    consistency_threshold: Float = Field(
        0.0, ge=-2, le=2, description="A draft is kept when its cosine to the final token rose by more than this."
    )
    consistency_start: Int = Field(
        2,
        ge=1,
        description="The first AR step (0-based) whose drafts consistency-aware selection filters (each needs the "
        "previous step's draft, so >= 1); earlier steps train every unknown token. 2: MAR-GRPO's release (i > 1).",
    )
    kl_tokens: Literal["masked", "trained"] = Field(
        "masked",
        description="The tokens an AR step's KL term covers: masked: every token unknown at the step, normalised by "
        "their count (MAR-GRPO's release); trained: the tokens the step trains, with the policy term's normaliser.",
    )
    kl_estimator: Literal["exact", "k3_means"] = Field(
        "exact",
        description="exact: the exact Gaussian KL of each transition; k3_means: MAR-GRPO's release, k3 of the "
        "difference of the two means per channel, summed over channels (no variance: not a KL of the transitions).",
    )
    save_steps: Int = Field(
        8, ge=0, description="Checkpoint every this many steps (0 = never).", json_schema_extra={"why": "0 = never"}
    )
    save_total_limit: Int = Field(2, ge=1, description="Checkpoints kept.")
    report_to: tuple[Tracker, ...] = Field(DEFAULT_TRACKERS, description="Experiment trackers (as grpo.report_to).")

    @model_validator(mode="after")
    def _check(self) -> MarRunConfig:
        if self.max_steps % self.num_iterations:
            raise refuse("max_steps", self.max_steps, f"must be a multiple of num_iterations ({self.num_iterations})")
        if self.consistency and self.train_tokens != "masked":
            raise refuse("consistency", True, "selects among an AR step's drafts: it needs train_tokens: masked")
        return self


@section
class MarEvaluateConfig(Section):
    """The MAR rows' evaluation: GenEval's protocol with image.evaluate's samples per prompt and per tag."""

    batch_size: Int = Field(128, ge=1, description="Images sampled together.")
    sampler: MarSamplerConfig = Field(default_factory=MarSamplerConfig, description="The evaluation sampler.")


@section
class MarConfig(Section):
    """``mar:``, a masked autoregressive image model (MAR) with continuous tokens on geneval-mini, its GRPO runs and
    their image-table rows (``ddmrl.mar``). Off unless ``methods`` names a run; it needs image.tasks: [geneval_mini]
    (it shares the task's parameters, held-out prompts and evaluation protocol)."""

    methods: tuple[SectionName, ...] = Field((), description="Runs: sections of mar.sections (empty: branch off).")
    seeds: tuple[Int, ...] = Field((0,), description="Seeds of the MAR runs.")
    model: MarModelConfig = Field(default_factory=MarModelConfig, description="The MAR base model.")
    pretrain: MarPretrainConfig = Field(default_factory=MarPretrainConfig, description="Its pre-training.")
    grpo: Annotated[dict[Str, Any], checked_as(MarRunConfig)] = Field(
        default_factory=dict,
        description="Keys shared by every MAR run.",
        json_schema_extra={"type": "keys of [MarRunConfig](#marrunconfig)"},
    )
    sections: dict[SectionName, Annotated[dict[Str, Any], checked_as(MarRunConfig)] | None] = Field(
        default_factory=dict,
        description="Per run section, its keys over mar.grpo.",
        json_schema_extra={"type": "mapping: section name to keys of [MarRunConfig](#marrunconfig)"},
    )
    evaluate: MarEvaluateConfig = Field(
        default_factory=lambda: MarEvaluateConfig(sampler=MarSamplerConfig(ar_steps=16, diffusion_steps=20)),
        description="The evaluation.",
    )

    @model_validator(mode="after")
    def _check(self) -> MarConfig:
        for name in self.methods:
            if name not in self.sections:
                raise refuse("methods", list(self.methods), f"no section {name!r} in mar.sections")
        for name in self.sections:
            try:
                self.run_config(name)
            except ConfigError as e:  # a contradiction between mar.grpo and the section (each was checked alone)
                raise refuse(f"sections.{name}", self.sections[name], f"over mar.grpo: {e}") from None
        return self

    def run_config(self, section: str) -> MarRunConfig:
        """The resolved hyperparameters of a run section: mar.grpo, then mar.sections.<section>."""
        return MarRunConfig(**deep_merge(self.grpo, self.sections.get(section) or {}))

    def runs(self) -> list[tuple[str, int]]:
        """(section, seed) of every MAR run."""
        return [(m, s) for m in self.methods for s in self.seeds]


def mar_run_name(section: str, task: str = MAR_TASK, seed: int = 0) -> str:
    """``mar_<section>_<task>_s<seed>``; the base model's rows are ``mar_base``."""
    return f"mar_{run_name(section, task, seed)}"
