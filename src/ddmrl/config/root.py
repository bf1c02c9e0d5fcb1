"""The image branch, the RebRL ablation and the whole file (:class:`Config`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, WrapValidator, model_validator

from ddmrl.config._base import (
    Bool,
    Float,
    Int,
    Section,
    Str,
    checked_as,
    refuse,
    section,
)
from ddmrl.config.download import DownloadConfig, SFTConfig, TrainConfig
from ddmrl.config.evaluate import EvaluateConfig, LmEvalConfig
from ddmrl.config.grpo import GRPOConfig, GRPOSection, MethodSection
from ddmrl.config.mar import MAR_TASK, MarConfig
from ddmrl.config.model import ModelConfig
from ddmrl.config.names import DEFAULT_PROFILE, SectionName, run_name
from ddmrl.config.sampler import RolloutConfig, SamplerConfig
from ddmrl.config.tasks import TASK_PARAMS_TYPE, TaskName, TaskParams
from ddmrl.errors import ConfigError
from ddmrl.models import family
from ddmrl.samplers import IMAGE_SAMPLER
from ddmrl.tasks import DEFAULT_TASKS

# ------------------------------------------------------------------------------------------------ the whole file


@section
class ImageConfig(Section):
    """``image:``, the text-to-image branch in MMaDA's layout (prompt, <soi>, image tokens, <eoi>): its tasks, its
    own base model (pre-trained by the download stage with caption dropout, so that classifier-free guidance
    works), its GRPO runs and its evaluation (GenEval's protocol: several sampled images per prompt). The branch is
    off unless ``tasks`` names an image task."""

    tasks: tuple[TaskName("image"), ...] = Field((), description="Image tasks (at most one: one layout per pipeline).")
    eval_tasks: tuple[TaskName("benchmark"), ...] = Field(
        (), description="Benchmarks the base model and every image run are also evaluated on (nothing trains on them)."
    )
    task_params: Annotated[dict[Str, Any], WrapValidator(TaskParams(("image", "benchmark")))] = Field(
        default_factory=dict, description="Generator parameters per image task.", json_schema_extra=TASK_PARAMS_TYPE
    )
    model: ModelConfig = Field(
        default_factory=lambda: ModelConfig(position_embedding="rope"), description="The image base model."
    )
    download: DownloadConfig = Field(
        default_factory=lambda: DownloadConfig(
            num_eval=120, pretrain=TrainConfig(warmup_steps=100, save_steps=250, loss="maskgit")
        ),
        description="The image branch's download stage (download_image).",
    )
    cond_dropout_prob: Float = Field(
        0.1, ge=0, lt=1, description="MMaDA's caption dropout in pre-training: the unconditional form CFG needs."
    )
    seeds: tuple[Int, ...] = Field((), description="Seeds of the image runs (empty: grpo.seeds).")
    methods: tuple[SectionName, ...] = Field((), description="Image runs: sections of methods: (as grpo.methods).")
    grpo: Annotated[dict[Str, Any], checked_as(GRPOConfig)] = Field(
        default_factory=dict,
        description="grpo: keys overridden for every image run.",
        json_schema_extra={"type": "keys of [GRPOConfig](#grpoconfig)"},
    )
    method_overrides: dict[SectionName, dict[Str, Any] | None] = Field(
        default_factory=dict,
        description="Per method section, its image-only keys. An image run's keys: grpo:, then image.grpo, then "
        "methods.<name>, then image.method_overrides.<name>.",
        json_schema_extra={"type": "mapping: section name to keys of a [method section](#methods)"},
    )
    evaluate: EvaluateConfig = Field(
        default_factory=lambda: EvaluateConfig(
            samples_per_prompt=4, sampler=SamplerConfig(name=IMAGE_SAMPLER, steps=24, temperature=1.0, cfg_scale=1.0)
        ),
        description="The image evaluation.",
    )


@section
class RebRLAblation(Section):
    """RebRL's ablation (issue 16): rows that vary one choice of the default ``rebrl`` row at a time, on the same
    budget: its weighting mode (none, t1, t2 against token) on UniGRPO's views, the coupling of the views
    (independent, nested, trajectory; with and without 1/F), and its own t_j = j / mu schedule. Each row is a section
    of ``methods:``; with ``enabled`` they join the text runs (every task and seed of ``grpo:``)."""

    enabled: Bool = Field(False, description="Add the ablation rows to the text runs, the tables and the plots.")
    methods: tuple[SectionName, ...] = Field(
        (), description="The ablation rows: sections of methods: (run on every text task and seed)."
    )


#: the budget of a GRPO run: key -> the token that names a row differing in it (``rebrl_mu8``: num_iterations 8)
BUDGET_KEYS = {"max_steps": "steps", "num_prompts": "p", "num_generations": "g", "num_iterations": "mu"}


def check_budget(sections: dict[str, GRPOConfig], shared: dict[str, Any], where: str) -> None:
    """Every row of a comparison has the comparison's budget (prompts per rollout batch, generations, mu, optimiser
    steps, hence rollout batches and samples) unless its name says otherwise: a section differing in a budget key
    must carry the key's token and value as a ``_``-separated part of its name (``rebrl_mu8``, ``unigrpo_steps480``).
    """
    for name, run in sections.items():
        parts = name.split("_")
        for key, token in BUDGET_KEYS.items():
            value, want = getattr(run, key), shared[key]
            if value != want and f"{token}{value}" not in parts:
                raise refuse(
                    f"{where}.{name}.{key}",
                    value,
                    f"differs from the comparison's {key} = {want}: every row gets the same budget (prompts per "
                    f"rollout batch, generations, mu, optimiser steps); set it in grpo:, or name the row for it "
                    f"(e.g. {name}_{token}{value})",
                )


_INTERNAL = {"internal": True}


@section
class Config(Section):
    """The whole params.yaml after the profile overlay; ``ddmrl.config.load`` resolves every method section (its
    method's defaults, then the ``grpo:`` keys but what the method fixes, then the section's own keys)."""

    profile: Str = Field(
        DEFAULT_PROFILE, description="Scale profile: tiny is this file as it is; any other name overlays "
        "profiles/<name>.yaml onto it.",
    )  # fmt: skip
    seed: Int = Field(0, description="Global seed; every random draw derives from it and its unit of work.")
    tasks: tuple[TaskName("text"), ...] = Field(DEFAULT_TASKS, description="Text tasks.")
    task_params: Annotated[dict[Str, Any], WrapValidator(TaskParams(("text",)))] = Field(
        default_factory=dict, description="Generator parameters per text task.", json_schema_extra=TASK_PARAMS_TYPE
    )
    model: ModelConfig = Field(default_factory=ModelConfig, description="The text model.")
    download: DownloadConfig = Field(default_factory=DownloadConfig, description="The download stage.")
    sft: SFTConfig = Field(default_factory=SFTConfig, description="The sft stage.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="The rollout and reward stages.")
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig, description="Held-out evaluation (text).")
    lm_eval: LmEvalConfig = Field(
        default_factory=LmEvalConfig, description="lm-evaluation-harness on the text models (off: no tasks)."
    )
    grpo: GRPOSection = Field(default_factory=GRPOSection, description="The GRPO runs and their shared keys.")
    methods: dict[SectionName, MethodSection] = Field(
        default_factory=dict,
        description="Method sections: every key of GRPOConfig; method defaults to the section's name.",
        json_schema_extra={"type": "mapping: section name to a [method section](#methods)"},
    )
    image: ImageConfig = Field(default_factory=ImageConfig, description="The text-to-image branch.")
    mar: MarConfig = Field(default_factory=MarConfig, description="A MAR image model and its GRPO runs (ddmrl.mar).")
    rebrl_ablation: RebRLAblation = Field(
        default_factory=RebRLAblation, description="RebRL's ablation rows (off by default; docs/results.md)."
    )
    image_sections: dict[SectionName, MethodSection] = Field(
        default_factory=dict, json_schema_extra={**_INTERNAL, "key": "image.method_overrides"}
    )  # the image runs' sections, resolved (every section named by image.methods or image.method_overrides)
    raw: dict[str, Any] = Field(default_factory=dict, json_schema_extra=_INTERNAL)  # the merged file, as written

    @model_validator(mode="after")
    def _check(self) -> Config:
        if len(self.image.tasks) > 1:
            raise refuse("image.tasks", list(self.image.tasks), "one image task per pipeline (one layout)")
        if not self.tasks and not self.image.tasks:
            raise refuse("tasks", [], "must name at least one task (or image.tasks)")
        if self.mar.methods and MAR_TASK not in self.image.tasks:
            raise refuse("mar.methods", list(self.mar.methods), "the MAR branch needs image.tasks: [geneval_mini]")
        for name in self.rebrl_ablation.methods:
            if name not in self.methods:
                raise refuse("rebrl_ablation.methods", name, f"not a section of methods: ({', '.join(self.methods)})")
        for name in (m for m in self.text_methods if m in self.methods):
            if unknown := [t for t in self.methods[name].tasks if t not in self.tasks]:
                raise refuse(
                    f"methods.{name}.tasks", unknown, f"its tasks must be among tasks: ({', '.join(self.tasks)})"
                )
        shared = {k: getattr(self.grpo, k) for k in BUDGET_KEYS}
        check_budget({m: self.methods[m] for m in self.text_methods if m in self.methods}, shared, "methods")
        image_shared = {k: self.image.grpo.get(k, v) for k, v in shared.items()}
        check_budget(self.image_methods, image_shared, "image_sections")  # named image.method_overrides
        kind = family(self.model.kind)
        if kind.sampler:  # e.g. a block-diffusion model samples with the block sampler
            samplers = {"rollout.sampler": self.rollout.sampler, "evaluate.sampler": self.evaluate.sampler}
            runs = [m for m in self.text_methods if m in self.methods]
            samplers |= {f"methods.{m}.sampler": self.methods[m].sampler for m in runs}
            own = kind.own_blocks  # its blocks are model.block_size
            for key, sampler in samplers.items():
                if sampler.name != kind.sampler or (own and sampler.block_length != self.model.block_size):
                    raise refuse(
                        key, f"{sampler.name}, block_length {sampler.block_length}",
                        f"model.kind {self.model.kind} samples with name: {kind.sampler}"
                        + (f", block_length = model.block_size ({self.model.block_size})" if own else ""),
                    )  # fmt: skip
        if family(self.image.model.kind).block:
            raise refuse("image.model.kind", self.image.model.kind, "the image branch has no block-diffusion model")
        if self.image.eval_tasks and (not self.image.tasks or not family(self.image.model.kind).image):
            raise refuse(
                "image.eval_tasks",
                list(self.image.eval_tasks),
                "needs an image task on MMaDA (image.model.kind: mmada)",
            )
        return self

    @property
    def text_methods(self) -> tuple[str, ...]:
        """Text run sections: grpo.methods, then the RebRL ablation rows when they are enabled."""
        extra = self.rebrl_ablation.methods if self.rebrl_ablation.enabled else ()
        return tuple(dict.fromkeys([*self.grpo.methods, *extra]))

    @property
    def image_methods(self) -> dict[str, GRPOConfig]:
        """Image run section -> hyperparameters, in image.methods order."""
        return {m: self.image_sections[m] for m in self.image.methods}

    def runs_on(self, section: str, task: str) -> bool:
        """Whether text run section ``section`` runs on ``task`` (its ``tasks``, empty: every text task)."""
        run = self.methods.get(section)
        return run is None or not run.tasks or task in run.tasks

    def runs(self) -> list[tuple[str, str, int]]:
        """(method section, task, seed) of every GRPO run: text runs, then image runs."""
        text = [
            (m, t, s) for m in self.text_methods for t in self.tasks if self.runs_on(m, t) for s in self.grpo.seeds
        ]
        seeds = self.image.seeds or self.grpo.seeds
        return text + [(m, t, s) for m in self.image.methods for t in self.image.tasks for s in seeds]

    def run_names(self) -> list[str]:
        """Every GRPO run: ``<method section>_<task>_s<seed>``."""
        return [run_name(*r) for r in self.runs()]

    def run(self, name: str) -> tuple[GRPOConfig, str, int]:
        """(hyperparameters, task, seed) of a run name."""
        for m, t, s in self.runs():
            if run_name(m, t, s) == name:
                return (self.image_sections if t in self.image.tasks else self.methods)[m], t, s
        raise ConfigError(f"unknown run '{name}'; runs are: {', '.join(self.run_names())}")
