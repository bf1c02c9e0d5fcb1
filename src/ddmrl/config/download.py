"""Pre-training and SFT: the download stage's embedded pre-training, the SFT stage."""

from __future__ import annotations

from pydantic import Field, model_validator

from ddmrl.config._base import (
    Float,
    Int,
    Section,
    Str,
    refuse,
    section,
)
from ddmrl.config.model import HubItem
from ddmrl.config.names import DEFAULT_TRACKERS, Tracker, TrainLoss
from ddmrl.config.scale import GradientCheckpointing, LaunchConfig, LoraConfig, MixedPrecision, check_scale


@section
class TrainConfig(Section):
    """A supervised masked-diffusion training run (``ddmrl.training.mdm``): AdamW, linear warm-up then cosine
    decay, a fresh batch from the task generators every step."""

    max_steps: Int = Field(1000, ge=0, description="Optimiser steps.")
    batch_size: Int = Field(64, ge=1, description="Sequences per step (over all processes).")
    learning_rate: Float = Field(1e-3, gt=0, description="AdamW learning rate (tiny models want 1e-4..1e-3).")
    warmup_steps: Int = Field(50, ge=0, description="Linear warm-up steps, then cosine decay.")
    weight_decay: Float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: Float = Field(1.0, gt=0, description="Gradient clipping.")
    log_every: Int = Field(50, ge=1, description="Log the loss every this many steps.")
    save_steps: Int = Field(
        0,
        ge=0,
        description="Checkpoint every this many steps (a killed run resumes from data/checkpoints; 0 = never).",
        json_schema_extra={"why": "0 = no checkpoints"},
    )
    save_total_limit: Int = Field(2, ge=1, description="Checkpoints kept (older ones are deleted).")
    loss: TrainLoss = Field(
        "elbo",
        description="elbo: LLaDA's masked-diffusion ELBO (t ~ U(0, 1), loss / t); maskgit: MaskGIT's and MMaDA's "
        "image loss (mask rate cos(pi u / 2), cross-entropy averaged over the masked tokens).",
    )
    report_to: tuple[Tracker, ...] = Field(
        DEFAULT_TRACKERS,
        description="Experiment trackers (TRL's name): tensorboard and dvclive write offline under the stage's log "
        "directory, wandb where a user configures it; [] = none. Not part of a checkpoint's fingerprint.",
    )


@section
class DownloadConfig(Section):
    """The download stage. Embedded profiles: the held-out sets, the tokenizer and a base model pre-trained from
    scratch on the task generators. Paper profiles: the checkpoints and data sets of ``hub``."""

    num_eval: Int = Field(
        512, ge=1, description="Held-out items per task, disjoint from every training draw (a fixed set: all of it)."
    )
    pretrain: TrainConfig = Field(
        default_factory=lambda: TrainConfig(max_steps=1200, warmup_steps=100, save_steps=200),
        description="Pre-training of the embedded base model.",
    )
    seed: Int | None = Field(
        None,
        ge=0,
        description="Seed of the pre-training (initialisation, data draws, masks); default: the global seed. The "
        "held-out sets follow the global seed whatever it is, so base models of other seeds are scored on the same "
        "items (how much the tables move with the base model: docs/results.md).",
    )
    base_per_seed: bool = Field(
        False,
        description="Embedded: one base model per GRPO seed, pre-trained with that seed (and its own SFT model): "
        "seed s's runs start from base model s, so that the tables' intervals over seeds cover the pre-training "
        "seed too (each run's gain is paired with its own start model). false: one base model for every run.",
    )
    packaged: bool = Field(
        True,
        description="Embedded: take the base model from the package when it ships one pre-trained with exactly "
        "this recipe (tasks, model, pre-training, seed; ddmrl/embedded/README.md), checked by its sha256 as a hub "
        "download is; false pre-trains it here (profiles/pretrain.yaml regenerates the packaged ones).",
    )
    hub: tuple[HubItem, ...] = Field((), description="What to fetch (paper profiles), each into hub_dir/<name>.")
    hub_dir: Str = Field(
        "data/hub", description="Where large downloads live, outside the DAG's outputs (like data/checkpoints)."
    )

    @model_validator(mode="after")
    def _check(self) -> DownloadConfig:
        names = [item.name for item in self.hub]
        if len(set(names)) != len(names):
            raise refuse("hub", names, "item names must be unique")
        return self

    def hub_items(self) -> list[HubItem]:
        return list(self.hub)


@section
class SFTConfig(TrainConfig):
    """The sft stage: masked-diffusion fine-tuning on prompt/answer pairs, the prompt never masked (LLaDA SFT; d1)."""

    max_steps: Int = Field(30, ge=0, description="Optimiser steps (0: no SFT; RL starts from the base model).")
    learning_rate: Float = Field(5e-4, gt=0, description="AdamW learning rate.")
    warmup_steps: Int = Field(5, ge=0, description="Linear warm-up steps, then cosine decay.")
    log_every: Int = Field(10, ge=1, description="Log the loss every this many steps.")
    save_steps: Int = Field(
        10,
        ge=0,
        description="Checkpoint every this many steps (a killed run resumes from data/checkpoints/sft; 0 = never).",
        json_schema_extra={"why": "0 = no checkpoints"},
    )
    mixed_precision: MixedPrecision = "no"
    gradient_checkpointing: GradientCheckpointing = False
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapters.")
    launch: LaunchConfig = Field(default_factory=LaunchConfig, description="How the stage is started.")

    @model_validator(mode="after")
    def _check(self) -> SFTConfig:
        check_scale(self)
        return self
