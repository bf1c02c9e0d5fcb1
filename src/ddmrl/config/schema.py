"""The params.yaml schema: one model per section, one per method, one per task's parameters.

Every key is declared once here, with its type, default, constraint and description; ``docs/params.md`` is
generated from these declarations (``python -m ddmrl.config.docs``). Choices are ``Literal`` types, unknown keys
are refused, and every model is frozen. Members of the library are named through their registries, which import
nothing until a name is looked up: a method section is validated by its method's ``Params`` (``ddmrl.methods``), a
task's parameters by its task's (``ddmrl.tasks``), and reward models are names of ``ddmrl.rewards.REWARD_MODELS``.
View samplers are names of ``ddmrl.masking.VIEWS``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import re
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, WrapValidator, model_validator
from pydantic import dataclasses as pdc
from pydantic_core import PydanticCustomError

from ddmrl.aux_policies import AUX_POLICIES
from ddmrl.config._base import (
    DESCRIBED,
    Bool,
    Float,
    Int,
    Section,
    Str,
    checked_as,
    deep_merge,
    describe,
    refuse,
    section,
)
from ddmrl.errors import ConfigError
from ddmrl.masking import VIEWS, view_sampler
from ddmrl.methods import METHODS
from ddmrl.models import FAMILIES
from ddmrl.objectives import ADVANTAGES
from ddmrl.registry import IMPORT_PATH
from ddmrl.rewards import REWARD_MODELS
from ddmrl.samplers import SAMPLERS
from ddmrl.tasks import TASKS

DEFAULT_PROFILE = "tiny"

# ------------------------------------------------------------------------------------------------ names

#: GRPOConfig's reproduction switches that only some methods accept (``Method.switches`` in their modules)
SWITCHES = ("maskgrpo_legacy", "loss_after_eos", "mdpo_tempered_confidence")
UNKNOWN = "unknown_name"  # the error type of a name no registry member of the right kind has


@dataclasses.dataclass(frozen=True)
class Registered:
    """Validates the name of a member of ``registry`` (built in, an import path or an entry point); an unknown
    name is refused with the built-in choices. Imports nothing until the member is used."""

    registry: Any
    extra: tuple[str, ...] = ()  # values accepted besides the members' names ("" or "none": no member)

    def choices(self) -> tuple[str, ...]:
        return (*self.extra, *self.registry)

    def __call__(self, value: Any, handler: Any) -> Any:
        value = handler(value)
        if value not in self.registry and value not in self.extra:
            raise unknown(self.choices())
        return value


def unknown(choices: tuple[str, ...]) -> PydanticCustomError:
    """The error of a name that no member of the right kind has, listing the built-in ones."""
    return PydanticCustomError(UNKNOWN, "unknown value; choose one of {choices}", {"choices": ", ".join(choices)})


#: a model family of ``ddmrl.models.FAMILIES``
ModelKind = Annotated[Str, WrapValidator(Registered(FAMILIES))]
#: the block-diffusion families: they sample with the block sampler, their views read block by block
BLOCK_FAMILIES = ("tiny_block", "sdar", "llada2")
#: a sampler of ``ddmrl.samplers.SAMPLERS``
SamplerName = Annotated[Str, WrapValidator(Registered(SAMPLERS))]
#: a view sampler of ``ddmrl.masking.VIEWS`` (how a method's training views are drawn)
ViewSampler = Annotated[Str, WrapValidator(Registered(VIEWS))]
#: a group advantage of ``ddmrl.objectives.ADVANTAGES`` (TRL's scale_rewards)
Advantages = Annotated[Str, WrapValidator(Registered(ADVANTAGES))]
TrainLoss = Literal["elbo", "maskgit"]
TRAIN_LOSSES: tuple[str, ...] = get_args(TrainLoss)
Tracker = Literal["tensorboard", "dvclive", "wandb"]  # accelerate's tracker names (ddmrl.training.tracking)
TRACKERS: tuple[str, ...] = get_args(Tracker)
DEFAULT_TRACKERS: tuple[str, ...] = ("tensorboard", "dvclive")  # offline; wandb where a user adds it

SectionName = Annotated[
    Str,
    Field(pattern=r"^[A-Za-z0-9_]+$", json_schema_extra={"why": "section names use letters, digits and _ only"}),
]
Seeds = Annotated[tuple[Int, ...], Field(min_length=1, json_schema_extra={"why": "must list at least one seed"})]
_COMMIT = re.compile(r"[0-9a-f]{40}")


def is_commit(revision: str | None) -> bool:
    """True for a full 40-hex git commit id (the only revision that cannot move)."""
    return isinstance(revision, str) and _COMMIT.fullmatch(revision) is not None


Revision = Annotated[
    Str,
    Field(pattern=r"\S", json_schema_extra={"why": "must be a branch, tag or 40-hex commit id"}),
]

# ------------------------------------------------------------------------------------------------ model, hub


@section
class ModelSpec(Section):
    """Which checkpoint to load (the ``model:`` keys of a real-scale profile; ``ddmrl.models.adapters``).

    Code from the hub (a checkpoint's own ``modeling_*.py``) runs only with ``trust_remote_code: true`` and, for a
    hub id, only at a pinned 40-hex commit."""

    KEY: ClassVar[str] = "model"

    kind: ModelKind = Field(
        "tiny",
        description="Model family (ddmrl.models.FAMILIES): TinyDDM (embedded), TinyBlockDDM (tiny_block: embedded "
        "block diffusion), LLaDA, MMaDA, Dream, SDAR / TraDo, LLaDA 2.x or an AutoModelForMaskedLM "
        "(docs/real_scale.md, docs/families.md).",
        json_schema_extra={
            "type": "a model family: tiny, tiny_block, llada, mmada, hf_masked_lm, dream or an import path"
        },
    )
    path_or_id: Str = Field(
        "", description="Checkpoint directory (normally under download.hub_dir) or a hub id already in the HF cache."
    )
    revision: Revision | None = Field(None, description="Hub revision; with trust_remote_code, a 40-hex commit.")
    trust_remote_code: Bool = Field(False, description="Run the checkpoint's own modeling_*.py (LLaDA needs it).")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = Field(
        "float32", description="Weights' dtype (LLaDA and MMaDA are meant for bfloat16)."
    )
    mmada_code: Str | None = Field(
        None, description="mmada: a checkout of github.com/Gen-Verse/MMaDA (the directory holding models/)."
    )
    vq_path_or_id: Str | None = Field(
        None, description="mmada: MAGVIT-v2 weights (showlab/magvitv2), to decode images."
    )
    vq_revision: Revision | None = Field(None, description="mmada: hub revision of the MAGVIT-v2 weights.")

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        _check_spec(self)
        return self


def _check_spec(spec: ModelSpec) -> None:
    if not spec.path_or_id.strip():
        raise refuse("path_or_id", spec.path_or_id, "must name a local directory or a hub id")
    if spec.trust_remote_code and spec.revision is not None and not is_commit(spec.revision):
        # a branch or tag with remote code is refused whatever the path: its code can change under the name
        raise refuse(
            "revision",
            spec.revision,
            "remote code from the hub runs only at a pinned commit; set it to the 40-hex commit id to trust "
            "(a branch such as 'main' can change under the same name)",
        )
    for key in ("mmada_code", "vq_path_or_id"):
        if getattr(spec, key) is not None and spec.kind != "mmada":
            raise refuse(key, getattr(spec, key), "only used with model.kind: mmada")
    if spec.kind in ("tiny", "tiny_block") and spec.trust_remote_code:
        raise refuse("trust_remote_code", True, "the tiny model has no remote code; set it to false")


@section
class HubItem(Section):
    """One thing the download stage fetches (``ddmrl.hub.fetch_all``): ``repo_id`` at ``revision`` into
    ``<download.hub_dir>/<name>``; a checksum manifest per item is the stage's DVC-tracked output."""

    name: Str = Field(
        pattern=r"^[\w.-]+$",
        description="Directory name under download.hub_dir.",
        json_schema_extra={"why": "must be a plain directory name"},
    )
    repo_id: Str = Field(min_length=1, description="Hub id (org/name), or a local file or directory used as it is.")
    revision: Revision | None = Field(None, description="Branch, tag or (better) 40-hex commit to fetch.")
    repo_type: Literal["model", "dataset"] = Field("model", description="Hub repository type.")
    allow_patterns: tuple[Str, ...] | None = Field(None, description="Only files matching these globs are fetched.")

    @model_validator(mode="after")
    def _check(self) -> HubItem:
        if self.name in (".", ".."):
            raise refuse("name", self.name, "must be a plain directory name")
        return self


# ------------------------------------------------------------------------------------------------ training scale

MixedPrecision = Annotated[
    Literal["no", "bf16", "fp16"], Field(description="accelerate autocast; the master weights stay in float32.")
]
GradientCheckpointing = Annotated[
    Bool, Field(description="Recompute activations in backward (models that support it) to save memory.")
]


@section
class LoraConfig(Section):
    """LoRA adapters (Hu et al. 2022) through peft; ``r: 0`` trains every weight. d1 uses r 128, alpha 64, dropout
    0.05 on the attention and MLP projections. Saved models have the adapters merged in; with LoRA the frozen base
    is the KL reference."""

    r: Int = Field(0, ge=0, description="Adapter rank (0: no adapters).", json_schema_extra={"why": "0 = no adapters"})
    alpha: Float = Field(16.0, gt=0, description="peft lora_alpha: the update is scaled by alpha / r.")
    dropout: Float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter input.")
    target_modules: Annotated[tuple[Str, ...], Field(min_length=1)] | Str = Field(
        ("all-linear",),
        description="Module names to adapt (peft: a name matches itself and any module whose name ends with '.' + "
        "it), all-linear (every Linear but the LM head), or one string: a regular expression matching full module "
        "names (ddmrl.models.lora).",
        json_schema_extra={"why": "must be a list of module names or one regular expression"},
    )

    @model_validator(mode="after")
    def _check(self) -> LoraConfig:
        if isinstance(self.target_modules, str):
            try:
                re.compile(self.target_modules)
            except re.error as e:
                raise refuse("target_modules", self.target_modules, f"not a regular expression ({e})") from None
        return self


@section
class LaunchConfig(Section):
    """How the engines start a training stage: ``python stages/X.py ...`` or, for several GPUs, ``accelerate launch
    --config_file F --num_processes N stages/X.py ...`` (DDP, DeepSpeed ZeRO or FSDP; docs/distributed.md)."""

    launcher: Literal["python", "accelerate"] = Field("python", description="python (one process) or accelerate.")
    config_file: Str = Field(
        "configs/accelerate/ddp.yaml", description="accelerate config (configs/accelerate/: ddp, zero2, zero3, fsdp)."
    )
    num_processes: Int = Field(1, ge=1, description="Processes, one per GPU (the job's GPU count on SLURM).")
    gpu_memory_gib: Float = Field(
        0.0,
        ge=0,
        description="Memory of one GPU the run is booked on (GiB); > 0: the grpo stage plans its per-GPU peak "
        "first (python -m ddmrl.plan) and refuses to start when it does not fit; 0: no check.",
    )

    @model_validator(mode="after")
    def _check(self) -> LaunchConfig:
        if self.launcher == "accelerate" and not self.config_file:
            raise refuse("config_file", self.config_file, "must name an accelerate config file")
        return self


def _check_scale(cfg: SFTConfig | GRPOConfig) -> None:
    if cfg.launch.launcher == "python" and cfg.launch.num_processes != 1:
        raise refuse(
            "launch.num_processes",
            cfg.launch.num_processes,
            "needs launch.launcher: accelerate (python runs one process)",
        )


# ------------------------------------------------------------------------------------------------ sections


@section
class ModelConfig(ModelSpec):
    """The model: TinyDDM's architecture (``kind: tiny``, embedded profiles: the download stage builds and
    pre-trains it), or a checkpoint the download stage fetches (paper profiles; the architecture keys are then
    unused)."""

    hidden_size: Int = Field(128, ge=1, description="TinyDDM: width of the residual stream.")
    num_layers: Int = Field(4, ge=1, description="TinyDDM: transformer blocks.")
    num_heads: Int = Field(4, ge=1, description="TinyDDM: attention heads (hidden_size must be divisible by it).")
    intermediate_size: Int = Field(512, ge=1, description="TinyDDM: width of the feed-forward layer.")
    dropout: Float = Field(
        0.0,
        ge=0,
        lt=1,
        description="TinyDDM: dropout in attention and feed-forward (0 keeps log-probs deterministic).",
    )
    position_embedding: Literal["learned", "rope"] = Field(
        "learned", description="TinyDDM: learned absolute positions, or rotary (rope, LLaDA's and MMaDA's choice)."
    )
    block_size: Int = Field(
        4,
        ge=1,
        description="tiny_block: the block length of its block-diffusion pre-training and SFT (the samplers' "
        "block_length must equal it).",
    )

    @property
    def pretrained(self) -> bool:
        """True for a downloaded checkpoint (``kind`` other than tiny and tiny_block): nothing is pre-trained here."""
        return self.kind not in ("tiny", "tiny_block")

    def spec(self) -> ModelSpec:
        """The checkpoint's :class:`ModelSpec` (``ddmrl.models.adapters.load_model``)."""
        return ModelSpec(**{k: getattr(self, k) for k in ModelSpec.__pydantic_fields__})

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:  # replaces ModelSpec's check: a tiny model names no checkpoint
        if self.pretrained:
            _check_spec(self)
        if self.hidden_size % self.num_heads:
            raise refuse("hidden_size", self.hidden_size, f"must be divisible by num_heads = {self.num_heads}")
        return self


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
        _check_scale(self)
        return self


@section
class SamplerConfig(Section):
    """The reverse process (``ddmrl.samplers``): LLaDA's semi-autoregressive low-confidence sampler (Nie et al.
    2025), MaskGIT's cosine confidence sampler (Chang et al. 2022; MMaDA's ``t2i_generate``) or MaskGRPO's emerge
    (ancestral) sampler."""

    name: SamplerName = Field(
        "llada",
        description="Which sampler (ddmrl.samplers.SAMPLERS; dream: Dream-v0's own, for model.kind dream; block: "
        "block diffusion's, for model.kind tiny_block; docs/families.md).",
        json_schema_extra={"type": "a sampler: llada, maskgit, emerge, dream, block"},
    )
    block_length: Int = Field(4, ge=1, description="llada: tokens per semi-autoregressive block.")
    steps: Int = Field(
        0,
        ge=0,
        description="Denoising steps over the whole completion (0: d1's rule, completion length / 2).",
        json_schema_extra={"why": "0 = completion length / 2"},
    )
    temperature: Float = Field(0.0, ge=0, description="Sampling temperature (Gumbel-max); 0 is greedy.")
    remasking: Literal["low_confidence", "random", "rcr"] = Field(
        "low_confidence",
        description="llada: which masked tokens to commit each step (LLaDA's default: low_confidence); rcr: MDPO's "
        "running-confidence remasking (He et al. 2025): every masked token up to the end of the block takes its "
        "proposal, then the tokens of lowest confidence-when-committed are re-masked down to the schedule, so they "
        "can be revised (see rcr_scope).",
    )
    rcr_scope: Literal["sequence", "block"] = Field(
        "sequence",
        description="remasking rcr: which committed tokens may be re-masked: sequence, the whole completion so far "
        "(MDPO's released diffusion_generate; earlier blocks included, positions never filled protected) or block, "
        "the current block only (ddmrl's rule before; the same with one block).",
    )
    confidence_dtype: Literal["float64", "float32"] = Field(
        "float64",
        description="llada: dtype of the softmax behind the confidence. float64: LLaDA's generate until June 2025 and "
        "Fast-dLLM's; float32: LLaDA's current generate and d1's eval/generate.py (the logits' dtype). On a confident "
        "model float32 rounds many probabilities to exactly 1 and the ranking falls to tie order.",
        json_schema_extra={"why": "ranks by the true value"},
    )
    logits_eos_inf: Bool = Field(
        False,
        description="llada: LLaDA's logits_eos_inf: the EOS token (the tokenizer's) is never proposed (LLaDA, "
        "appendix B.4).",
    )
    confidence_eos_eot_inf: Bool = Field(
        False,
        description="llada: LLaDA's confidence_eos_eot_inf with its released effect: the confidence softmax leaves "
        "out EOT (LLaDA's end-of-turn token), and EOS too at temperature 0 only: such proposals score 0, not -inf.",
    )
    schedule: Literal["linear", "ass"] = Field(
        "linear",
        description="llada: tokens per step: linear (LLaDA's even split of each block over its steps) or ass, "
        "CJ-GRPO's ascending step sizes (Yang et al. 2025): step i reveals 2^i tokens, floor(log2 L) steps, the last "
        "one the rest (steps must be 0; block_length unused, see ass_blocks).",
    )
    ass_blocks: Int = Field(
        1,
        ge=1,
        description="llada, schedule ass: blocks of ascending size (the released block_num; 1: one block, full "
        "diffusion decoding); the last blocks take one step each.",
    )
    eoser: Bool = Field(
        False,
        description="llada: EOS early rejection (Yang et al. 2025): the confidence of a proposed EOS is multiplied by "
        "a factor rising from eos_min_gamma to eos_max_gamma over the steps (linearly; with ASS as 2^(i+1) - 1 over "
        "2^S).",
    )
    eos_min_gamma: Float | None = Field(
        None,
        gt=0,
        le=1,
        description="eoser: the factor at the first step (null: the released defaults, 0.4 with the linear schedule, "
        "0.01 with ASS).",
    )
    eos_max_gamma: Float = Field(1.0, gt=0, le=1, description="eoser: the factor reached at the last step.")
    noise_temperature: Float = Field(
        1.0, ge=0, description="maskgit: scale of the annealed Gumbel noise on confidences."
    )
    cfg_scale: Float = Field(
        0.0,
        ge=0,
        description="Classifier-free guidance weight (0: off); the unconditional input has the prompt masked.",
    )
    kv_cache: Literal["none", "prefix", "dual"] = Field(
        "none",
        description="llada: Fast-dLLM's block-wise approximate KV cache (Wu et al. 2025): prefix caches the "
        "positions before the current block, dual also those after it; refreshed at every block.",
    )
    parallel: Literal["none", "threshold", "factor"] = Field(
        "none",
        description="llada, maskgit: Fast-dLLM's confidence-aware parallel decoding: also commit every masked token "
        "with confidence >= threshold, or the top n with c_(k) >= 1 - factor / (k + 1) for all k <= n. On top of the "
        "sampler's own schedule (parallel_floor schedule, the default); Fast-dLLM's rule itself with parallel_floor "
        "one (llada).",
    )
    threshold: Float = Field(0.9, gt=0, le=1, description="parallel: threshold: the confidence bound.")
    factor: Float = Field(1.0, gt=0, description="parallel: factor: the factor of the bound.")
    parallel_floor: Literal["schedule", "one"] = Field(
        "schedule",
        description="llada, parallel: what a step commits at least: schedule, LLaDA's schedule (ceil(masked / steps "
        "left) in the block: never more steps than without the rule) or one, one token with steps ignored: "
        "Fast-dLLM's rule. They agree only with steps = completion length; at Fast-dLLM's steps = L / block_length, "
        "schedule commits each block in one step.",
        json_schema_extra={"why": "steps stays a bound on the passes"},
    )
    factor_rule: Literal["as_stated", "fast_dllm_release"] = Field(
        "as_stated",
        description="llada, parallel factor: the bound as stated, or as Fast-dLLM's released code, whose off-by-one "
        "commits all n masked tokens when only the n-th fails its bound.",
    )
    options: dict[str, dict[str, Any] | None] = Field(
        default_factory=dict,
        description="Each sampler's own keys under its name, validated by the Params of its module; only the named "
        "sampler's entry is used (dream: alg, top_p, top_k, alg_temp, eps; ddmrl.samplers.dream; block: kv_cache, "
        "selection, softmax_dtype; ddmrl.samplers.block).",
        json_schema_extra={"type": "mapping: sampler name to its keys"},
    )

    @model_validator(mode="after")
    def _check(self) -> SamplerConfig:
        _check_options(self)
        if self.kv_cache != "none" and self.name != "llada":
            raise refuse(
                "kv_cache",
                self.kv_cache,
                f"only the llada sampler has semi-autoregressive blocks to cache (name = {self.name!r}; the block "
                "sampler's exact cache is options.block.kv_cache)",
            )
        if self.name == "block" and (self.parallel == "factor" or self.cfg_scale):
            key = "parallel" if self.parallel == "factor" else "cfg_scale"
            raise refuse(key, getattr(self, key), "the block sampler commits by count or threshold, without guidance")
        if self.name == "block" and self.remasking != "low_confidence":
            raise refuse("remasking", self.remasking, "the block sampler ranks by confidence (low_confidence)")
        if self.parallel != "none" and self.name == "emerge":
            raise refuse(
                "parallel",
                self.parallel,
                "emerge reveals each position by its own coin (ancestral sampling); no confidence rule applies",
            )
        if self.parallel != "none" and self.name == "llada" and self.remasking != "low_confidence":
            raise refuse(
                "parallel", self.parallel, "ranks tokens by the model's confidence: it needs remasking: low_confidence"
            )
        options = {"remasking": self.remasking == "rcr", "schedule": self.schedule == "ass", "eoser": self.eoser}
        for key, on in options.items():
            if on and self.name != "llada":
                raise refuse(key, getattr(self, key), f"a llada sampler option (name = {self.name!r})")
            if on and (self.kv_cache != "none" or self.parallel != "none"):
                raise refuse(key, getattr(self, key), "needs the plain llada sampler: kv_cache and parallel none")
        if self.schedule == "ass" and self.steps:
            raise refuse("steps", self.steps, "ASS takes floor(log2 L) steps; leave steps at 0")
        if self.ass_blocks != 1 and self.schedule != "ass":
            raise refuse("ass_blocks", self.ass_blocks, "only used with schedule: ass")
        if self.eoser and self.remasking == "random":
            raise refuse("eoser", True, "rescales the model's confidence: it needs remasking low_confidence or rcr")
        llada_only = {
            "confidence_dtype": self.confidence_dtype != "float64",
            "logits_eos_inf": self.logits_eos_inf,
            "confidence_eos_eot_inf": self.confidence_eos_eot_inf,
            "parallel_floor": self.parallel_floor != "schedule",
            "factor_rule": self.factor_rule != "as_stated",
            "rcr_scope": self.rcr_scope != "sequence",
        }
        for key, on in llada_only.items():
            if on and self.name != "llada":
                raise refuse(key, getattr(self, key), f"a llada sampler option (name = {self.name!r})")
        if self.parallel_floor != "schedule" and self.parallel == "none":
            raise refuse("parallel_floor", self.parallel_floor, "a floor under a parallel rule: set parallel")
        if self.factor_rule != "as_stated" and self.parallel != "factor":
            raise refuse("factor_rule", self.factor_rule, "only used with parallel: factor")
        if self.rcr_scope != "sequence" and self.remasking != "rcr":
            raise refuse("rcr_scope", self.rcr_scope, "only used with remasking: rcr")
        if self.eos_min_gamma is not None and self.eos_min_gamma > self.eos_max_gamma:
            raise refuse("eos_min_gamma", self.eos_min_gamma, f"must not exceed eos_max_gamma = {self.eos_max_gamma}")
        return self


def _check_options(sampler: SamplerConfig) -> None:
    """Each entry of ``options`` by the ``Params`` of its sampler's module (imported only for a named entry); the
    shared keys Dream's sampler does not take refused."""
    for name, given in sampler.options.items():
        params = sampler_params(name)
        if params is None:
            where = "no such sampler" if name not in SAMPLERS else f"the {name} sampler has no options of its own"
            raise refuse(f"options.{name}", given, where)
        try:
            _adapter(params).validate_python(given or {})
        except ValidationError as e:
            raise _described(describe(e, params, f"options.{name}")) from None
    if sampler.name == "dream":
        for key, unused in {"cfg_scale": sampler.cfg_scale != 0, "parallel": sampler.parallel != "none"}.items():
            if unused:
                raise refuse(key, getattr(sampler, key), "not an option of Dream's sampler")


def sampler_params(name: str) -> type | None:
    """The ``Params`` model a sampler's module declares for its own keys (``sampler.options``), or None."""
    return getattr(importlib.import_module(SAMPLERS.module(name)), "Params", None) if name in SAMPLERS else None


@section
class RolloutConfig(Section):
    """The rollout and reward stages: G samples per training prompt from the SFT model, scored; how much room RL
    has (mean reward, pass@G, frac_reward_zero_std)."""

    num_prompts: Int = Field(64, ge=1, description="Distinct training prompts.")
    num_generations: Int = Field(
        8, ge=2, description="Completions per prompt.", json_schema_extra={"why": "groups measure the reward spread"}
    )
    sampler: SamplerConfig = Field(
        default_factory=lambda: SamplerConfig(temperature=1.0), description="The rollout sampler."
    )


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


# ------------------------------------------------------------------------------------------------ GRPO

ViewOrDefault = Annotated[Str, WrapValidator(Registered(VIEWS, extra=("",)))]  # "": the method's own
#: an auxiliary policy of ``ddmrl.aux_policies.AUX_POLICIES``, or none
AuxKind = Annotated[Str, WrapValidator(Registered(AUX_POLICIES, extra=("none",)))]
ScheduleAction = Literal["ratio", "temperature", "cfg"]


@section
class AuxPolicyConfig(Section):
    """An auxiliary policy (``ddmrl.aux_policies``): a second trainable module whose actions the rollout sampler
    draws and records, trained by GRPO on their log-probabilities (a clipped ratio per step) beside the model's
    objective, with its own learning rate, and saved with the model (``<model>/aux_policy/``). ``schedule``:
    Co-GRPO's schedule policy for the maskgit sampler; ``unmasking``: a learned unmasking policy for the llada
    sampler (docs/aux_policies.md)."""

    kind: AuxKind = Field(
        "none", description="none, schedule (Co-GRPO; sampler maskgit) or unmasking (learned unmasking; llada)."
    )
    learning_rate: Float = Field(1e-3, gt=0, description="AdamW learning rate of the policy (the model's is grpo's).")
    freeze_model: Bool = Field(
        False, description="Train the policy only, the model frozen as its environment (the unmasking paper)."
    )
    temperature: Float = Field(1.0, gt=0, description="unmasking: policy temperature of rollouts (logits / T).")
    eval_temperature: Float = Field(
        1.0, gt=0, description="unmasking: policy temperature at evaluation (paper: 0.5 with blocks of 32)."
    )
    fallback: Bool = Field(
        True,
        description="unmasking: a rollout step that draws nothing reveals the highest-scoring position (evaluation "
        "always does); false: the step is wasted (the released code's training).",
    )
    speed_alpha: Float = Field(
        0.0,
        ge=0,
        description="Reward x ((L - steps + 1) / L)^alpha, steps a sample's model evaluations (the unmasking "
        "paper's multiplicative reward; 0: the task reward alone).",
    )
    hidden_size: Int = Field(128, ge=2, description="Width (unmasking: the transformer; schedule: the mlp head).")
    num_heads: Int = Field(2, ge=1, description="unmasking: attention heads.")
    intermediate_size: Int = Field(512, ge=1, description="unmasking: width of the feed-forward layer.")
    init_bias: Float = Field(
        -2.0, description="unmasking: initial logit of every position (-2: revealed with probability 0.12)."
    )
    actions: Annotated[tuple[ScheduleAction, ...], Field(min_length=1)] = Field(
        ("ratio", "temperature", "cfg"), description="schedule: the per-step actions (masked fraction, T, CFG)."
    )
    head: Literal["table", "mlp"] = Field(
        "table", description="schedule: a per-step table of means (interpolated) or an MLP of the step's state."
    )
    init_std: Float = Field(0.3, gt=0, description="schedule: initial standard deviation of every action.")


@section
class GRPOConfig(Section):
    """The hyperparameters of one GRPO run (TRL's names where the concept matches). Each method's model below
    changes the defaults its paper chooses and fixes what its definition requires."""

    method: Str = Field("", description="The method (ddmrl.methods.METHODS); a section's defaults to its name.")
    tasks: tuple[Str, ...] = Field(
        (),
        description="Text tasks a method section runs on, a subset of tasks: (empty: every one; IGPO needs a task "
        "with reasoning traces).",
    )
    max_steps: Int = Field(
        240, ge=0, description="Optimiser steps in all (a rollout batch every num_iterations steps)."
    )
    num_prompts: Int = Field(8, ge=1, description="Distinct prompts per rollout batch.")
    num_generations: Int = Field(
        8,
        ge=2,
        description="G: completions per prompt (TRL num_generations).",
        json_schema_extra={"why": "GRPO needs a group to compare against"},
    )
    num_iterations: Int = Field(
        4,
        ge=1,
        description="mu: optimiser steps per rollout batch, each on its own training view (TRL num_iterations).",
    )
    learning_rate: Float = Field(
        1e-4, gt=0, description="AdamW learning rate (the 8B papers use 3e-6; tiny models 1e-4)."
    )
    beta: Float = Field(0.01, ge=0, description="KL coefficient (k3 estimator) against kl_target.")
    epsilon: Float = Field(0.2, gt=0, lt=1, description="PPO clip range of the ratio.")
    epsilon_high: Float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Upper clip range of the model's ratio, clip(rho, 1 - epsilon, 1 + epsilon_high): TRL's "
        "epsilon_high, DAPO's clip-higher (IGPO: 0.28 with epsilon 0.2); 0: epsilon (symmetric).",
    )
    max_grad_norm: Float = Field(1.0, gt=0, description="Gradient clipping.")
    weight_decay: Float = Field(0.0, ge=0, description="AdamW weight decay.")
    gradient_accumulation_steps: Int = Field(
        1, ge=1, description="Micro-batches (of whole prompt groups) per optimiser step; must divide num_prompts."
    )
    scale_rewards: Advantages = Field(
        "group",
        description="Advantages (ddmrl.objectives.ADVANTAGES): group: z-score within a group; none: mean "
        "only (d1's code).",
    )
    loss_type: Literal["token_mean", "seq_mean"] = Field(
        "token_mean",
        description="token_mean: global mean over the weighted tokens of the batch (d1, MaskGRPO); seq_mean: mean "
        "per sequence first.",
    )
    kl_target: Literal["ref", "old"] = Field(
        "ref",
        description="KL against ref (the frozen SFT model; d1, MaskGRPO) or old (the rollout-time policy; TraceRL).",
    )
    sampler: SamplerConfig = Field(
        default_factory=lambda: SamplerConfig(temperature=1.0), description="The rollout sampler (temperature > 0)."
    )
    report_to: tuple[Tracker, ...] = Field(
        DEFAULT_TRACKERS,
        description="Experiment trackers (TRL's name): tensorboard and dvclive write offline under the stage's log "
        "directory, wandb where a user configures it; [] = none. Not part of a checkpoint's fingerprint.",
    )
    logp_cfg: Literal["none", "guided"] = Field(
        "none",
        description="Training log-probs: none: the conditional model's, although rollouts are sampled with CFG "
        "(MaskGRPO's and MMaDA's released code); guided: under the rollout sampler's guidance.",
    )
    p_mask_prompt: Float = Field(
        0.15,
        ge=0,
        lt=1,
        description="full_completion views (d1, wd1): each prompt token masked with this probability.",
    )
    gamma: Float = Field(
        0.6, ge=0, lt=1, description="maskgrpo views: truncated ratios t_j = gamma + (1 - gamma) j / mu."
    )
    remasking: ViewOrDefault = Field(
        "", description="View sampler (ddmrl.masking.VIEWS): how training views are built; empty: the method's own."
    )
    coupling: Literal["independent", "nested", "trajectory"] = Field(
        "independent",
        description="How the ratio-based view samplers couple a rollout's views: independent masks, nested masks "
        "(one uniform per position), or the sampler's own reveal order.",
    )
    rebrl_mode: Literal["none", "t1", "t2", "token", "token_t2"] = Field(
        "token", description="RebRL's rebalancing: none, lambda(t) = t or t^2, with (token) the 1/F token factor."
    )
    shrink: Int = Field(2, ge=1, description="TraceRL: consecutive sampler steps merged into one trace step.")
    views_per_step: Int = Field(
        2,
        ge=1,
        description="SPG: masks averaged per step (num_t); GDPO: Gauss-Legendre nodes; VRPO: timesteps of each ELBO "
        "(n_t, one mask each); ESPO: Monte Carlo samples of the ELBO (num_mc), a complementary pair of views each; "
        "EBPO: Monte Carlo timesteps (mc_num), a view per block each.",
    )
    eubo_beta: Float = Field(
        1.0, gt=0, description="SPG: beta of the EUBO proxy (paper: 1.0 Sudoku, 1.5 GSM8K/MATH, 2.0 Countdown)."
    )
    eubo_mix: Float = Field(
        0.5, ge=0, le=1, description="SPG: weight of the EUBO in the proxy for negative advantages (1: pure EUBO)."
    )
    sample_train_steps: Int = Field(
        8,
        ge=1,
        description="MDPO: sampler steps trained per rollout, those of largest absolute per-step advantage (its "
        "sample_train_steps), spread over the num_iterations optimiser steps.",
    )
    inpaint_ratio_low: Float = Field(
        0.2,
        ge=0,
        le=1,
        description="IGPO: each inpainted sample's injection ratio eta ~ U[low, high]: its share of "
        "the trace's chunks clamped as hints.",
    )
    inpaint_ratio_high: Float = Field(0.6, ge=0, le=1, description="IGPO: the upper end of eta's range.")
    min_chunk_size: Int = Field(4, ge=1, description="IGPO: the trace is cut into chunks of U[min, max] tokens.")
    max_chunk_size: Int = Field(8, ge=1, description="IGPO: the largest chunk.")
    max_replacements: Int = Field(
        1, ge=1, description="IGPO: at most this many wrong samples of an all-wrong group replaced (floor(lambda G))."
    )
    hint_entropy_top: Float = Field(
        0.2, gt=0, le=1, description="IGPO: tau, the share of hint positions (highest entropy) that get gradient."
    )
    legacy_broadcast_weighting: Bool = Field(
        False, description="Reproduce MaskGRPO's released loss mask (every view's mask broadcast to all views)."
    )
    legacy_micro_step_views: Bool = Field(
        False, description="Reproduce d1's view index taken from the micro-step counter (with gradient accumulation)."
    )
    maskgrpo_legacy: Bool = Field(
        False,
        description="MaskGRPO only: reproduce its released text objective end to end (the fading curve over prompt + "
        "completion, view index m % mu of the micro-step m, the broadcast loss mask with masked tokens after the "
        "first EOS, advantage epsilon 1e-5, no forced masked token; docs/reproduction.md).",
    )
    loss_after_eos: Bool = Field(
        False,
        description="MDPO, CJ-GRPO, IGPO and JustGRPO: train every completion position, the EOS padding after the "
        "first EOS included (their releases' loss masks); false: the tokens up to and including the first EOS (d1's "
        "completion mask).",
    )
    mdpo_tempered_confidence: Bool = Field(
        False,
        description="MDPO only: its rollouts rank and weight by the tempered probability softmax(logits / "
        "temperature) of each proposal (its release's sampler); false: the untempered one (LLaDA's).",
    )
    old_logp_mode: Literal["eval", "train"] = Field(
        "eval",
        description="The model's mode for old and reference log-probs: eval (dropout off) or train (TRL's and the "
        "reference codes': LoRA and model dropout active, as in the update's forward pass).",
    )
    on_nonfinite: Literal["skip", "stop"] = Field(
        "skip", description="A non-finite reward, advantage or loss: skip the step (counted in metrics) or stop."
    )
    save_steps: Int = Field(
        40,
        ge=0,
        description="Checkpoint at the first rollout-batch boundary after every this many steps (0 = never).",
        json_schema_extra={"why": "0 = no checkpoints"},
    )
    save_total_limit: Int = Field(2, ge=1, description="Checkpoints kept.")
    mixed_precision: MixedPrecision = "no"
    gradient_checkpointing: GradientCheckpointing = False
    lora: LoraConfig = Field(
        default_factory=LoraConfig, description="LoRA adapters (r > 0: the reference is the base, adapters off)."
    )
    launch: LaunchConfig = Field(default_factory=LaunchConfig, description="How the stage is started.")
    aux_policy: AuxPolicyConfig = Field(
        default_factory=AuxPolicyConfig, description="An auxiliary policy trained beside (or instead of) the model."
    )

    @model_validator(mode="after")
    def _check(self) -> GRPOConfig:
        _check_scale(self)
        _check_aux(self)
        if self.num_prompts % self.gradient_accumulation_steps:
            raise refuse(
                "gradient_accumulation_steps",
                self.gradient_accumulation_steps,
                f"must divide num_prompts = {self.num_prompts} (micro-batches hold whole prompt groups)",
            )
        views = self.remasking
        if self.legacy_micro_step_views and views and not view_sampler(views).per_step:
            raise refuse(
                "legacy_micro_step_views",
                True,
                f"d1's micro-step view index only applies to one view per step, not to {views}",
            )
        if views == "maskgrpo_fading" and self.coupling == "trajectory":
            raise refuse(
                "coupling", "trajectory", "AR-like fading has its own position-wise curve; use independent or nested"
            )
        if views and view_sampler(views).states:
            plain = {"name": "llada", "kv_cache": "none", "parallel": "none"}
            for key, want in plain.items():
                if getattr(self.sampler, key) != want:
                    raise refuse(
                        f"sampler.{key}",
                        getattr(self.sampler, key),
                        f"{views} views are the sampler's stored states: they need the plain llada sampler "
                        "(kv_cache none, parallel none)",
                    )
        method = METHODS[self.method] if self.method in METHODS else None  # a bare GRPOConfig or grpo: names none
        if views == "mdpo_topk" and (method is None or not method.step_advantage):
            raise refuse("remasking", views, "ranks the steps by per-step advantages: a method with step_advantage")
        if self.inpaint_ratio_low > self.inpaint_ratio_high:
            high = self.inpaint_ratio_high
            raise refuse("inpaint_ratio_low", self.inpaint_ratio_low, f"exceeds inpaint_ratio_high = {high}")
        if self.min_chunk_size > self.max_chunk_size:
            raise refuse("min_chunk_size", self.min_chunk_size, f"exceeds max_chunk_size = {self.max_chunk_size}")
        if self.max_replacements > self.num_generations:
            g = self.num_generations
            raise refuse("max_replacements", self.max_replacements, f"exceeds num_generations = {g}")
        for key in SWITCHES:
            if getattr(self, key) and method is not None and key not in method.switches:
                raise refuse(key, True, f"a reproduction switch of the methods that declare it; not of {self.method}")
        if self.maskgrpo_legacy and views not in ("maskgrpo_fading", ""):
            raise refuse("maskgrpo_legacy", True, f"reproduces MaskGRPO's text views (maskgrpo_fading), not {views}")
        if self.maskgrpo_legacy and self.legacy_micro_step_views:
            raise refuse(
                "legacy_micro_step_views", True, "maskgrpo_legacy has its own view index (m % mu); choose one"
            )
        if views == "maskgrpo_fading" and self.gamma < 0.5:
            raise refuse(
                "gamma",
                self.gamma,
                "AR-like fading needs gamma >= 0.5 (its keep curve saturates below a mask ratio of 0.5)",
            )
        self._check_method()
        return self

    def _check_method(self) -> None:
        """A method's own checks (its model overrides this)."""


def _check_aux(cfg: GRPOConfig) -> None:
    aux, sampler = cfg.aux_policy, cfg.sampler
    if aux.kind == "none":
        if aux.freeze_model:
            raise refuse("aux_policy.freeze_model", True, "with no auxiliary policy nothing would be trained")
        if aux.speed_alpha:
            raise refuse("aux_policy.speed_alpha", aux.speed_alpha, "counts an auxiliary policy's steps: set its kind")
        return
    if aux.freeze_model and cfg.lora.r:
        raise refuse("lora.r", cfg.lora.r, "the model is frozen (aux_policy.freeze_model): no adapters to train")
    if aux.kind == "schedule":
        if sampler.name != "maskgit":
            raise refuse("sampler.name", sampler.name, "a schedule policy drives MaskGIT's schedule: use maskgit")
        if "cfg" in aux.actions and not sampler.cfg_scale:
            raise refuse("aux_policy.actions", list(aux.actions), "its cfg scales sampler.cfg_scale: set it > 0")
        if "temperature" in aux.actions and not sampler.temperature:
            why = "its temperature scales sampler.temperature: set it > 0"
            raise refuse("aux_policy.actions", list(aux.actions), why)
    if aux.kind == "unmasking":
        if sampler.name != "llada":
            raise refuse("sampler.name", sampler.name, "a learned unmasking policy drives LLaDA's blocks: use llada")
        for key in ("kv_cache", "parallel"):
            if getattr(sampler, key) != "none":
                raise refuse(f"sampler.{key}", getattr(sampler, key), "the unmasking policy replaces it: use none")
        if aux.hidden_size % aux.num_heads or (aux.hidden_size // aux.num_heads) % 2:
            raise refuse(
                "aux_policy.hidden_size", aux.hidden_size, f"must split into num_heads = {aux.num_heads} even widths"
            )


@section
class GRPOSection(GRPOConfig):
    """``grpo:``: which runs exist, and the hyperparameters every method section starts from (shared, so that
    methods are compared on equal terms; a method section may override any of them)."""

    methods: tuple[SectionName, ...] = Field(
        ("diffu_grpo", "unigrpo", "maskgrpo", "rebrl", "tracerl", "gdpo", "spg", "wd1"),
        description="Runs to train: sections of methods: (a section's method defaults to its name).",
    )
    seeds: Seeds = Field(
        (0,), description="Seeds per run (the tables' 95 % intervals are then over seeds as well as held-out items)."
    )

    def _check_method(self) -> None:
        if self.method:
            raise refuse("method", self.method, "each section of methods: chooses its method (methods.<name>.method)")
        if self.maskgrpo_legacy:
            raise refuse("maskgrpo_legacy", True, "a MaskGRPO switch: set it in its section (methods.<name>)")
        for key in ("loss_after_eos", "mdpo_tempered_confidence"):
            if getattr(self, key):
                raise refuse(key, True, "a switch of some methods: set it in their sections (methods.<name>)")
        twice = sorted({m for m in self.methods if self.methods.count(m) > 1})
        if twice:
            raise refuse("methods", list(self.methods), f"lists {', '.join(twice)} more than once")

    @property
    def defaults(self) -> GRPOConfig:
        """The shared hyperparameters alone."""
        return GRPOConfig(**{k: getattr(self, k) for k in GRPOConfig.__pydantic_fields__})


# -------------------------------------------------------------------------------------- methods (ddmrl.methods)


@functools.cache
def _adapter(params: type) -> TypeAdapter:
    return TypeAdapter(params)


def _method_section(value: Any, handler: Any) -> Any:
    """A resolved method section, validated by its method's model (``Params`` in its ``ddmrl.methods`` module);
    a problem is described as that model describes it, below the section's key."""
    method = value.get("method") if isinstance(value, dict) else None
    if not isinstance(method, str) or method not in METHODS:
        return handler(value)
    params = METHODS[method].params
    try:
        return _adapter(params).validate_python(value)
    except ValidationError as e:
        raise PydanticCustomError(DESCRIBED, "{text}", {"text": describe(e, params)}) from None


MethodSection = Annotated[GRPOConfig, WrapValidator(_method_section)]


# ------------------------------------------------------------------------------- tasks and rewards (ddmrl.tasks)


TASK_PARAMS_TYPE = {"type": "mapping: task name to its parameters (a Task section)"}


def task_kind(name: str) -> str:
    """What registered task ``name`` is: text (named by ``tasks``), image (``image.tasks``) or benchmark (an image
    task for evaluation only, ``image.eval_tasks``), as its class declares it (``modality``, ``evaluation_only``);
    imports the task's module only."""
    task = TASKS[name]
    return "benchmark" if task.modality == "image" and task.evaluation_only else task.modality


def tasks_of(*kinds: str) -> tuple[str, ...]:
    """The registered tasks of ``kinds``, in the registry's order (imports every task's module)."""
    return tuple(name for name in TASKS if task_kind(name) in kinds)


def _is_task(name: Any, kinds: tuple[str, ...]) -> bool:
    """A task of ``kinds``: built in or an entry point (an import path is no task name: names make file names)."""
    return isinstance(name, str) and not IMPORT_PATH.fullmatch(name) and name in TASKS and task_kind(name) in kinds


@dataclasses.dataclass(frozen=True)
class TaskNamed:
    """Validates a name in a list of tasks: a task of ``ddmrl.tasks.TASKS`` of ``kind``. A valid name imports its
    task's module only; an unknown one is refused with the choices."""

    kind: str

    def choices(self) -> tuple[str, ...]:
        return tasks_of(self.kind)

    def __call__(self, value: Any, handler: Any) -> Any:
        if isinstance(value, str) and IMPORT_PATH.fullmatch(value):
            why = "a task outside the package is named by an entry point of the ddmrl.tasks group, not an import path"
            raise PydanticCustomError(UNKNOWN, why + " (task names make file names)")
        if not _is_task(value, (self.kind,)):
            raise unknown(self.choices())
        return handler(value)


def TaskName(kind: str) -> Any:  # noqa: N802  (a type)
    """The type of a task's name in a list of tasks of ``kind``."""
    return Annotated[Str, WrapValidator(TaskNamed(kind))]


@dataclasses.dataclass(frozen=True)
class TaskParams:
    """Validates a ``task_params`` mapping, each entry by its task's model (the ``params`` of the task's class: the
    ``Params`` of its module), for tasks of ``kinds``; the mapping is kept as written (task.json holds it as given).
    A problem is described as the task's model describes it, below the entry's key."""

    kinds: tuple[str, ...]

    def __call__(self, value: Any, handler: Any) -> Any:
        value = handler(value)
        for name, params in value.items():
            if not _is_task(name, self.kinds):
                allowed = tasks_of(*self.kinds)
                guess = difflib.get_close_matches(name, allowed, n=1)
                hint = f" (did you mean {guess[0]}?)" if guess else ""
                raise _described(f"{name}: unknown key{hint}; allowed: {', '.join(allowed)}")
            if params is not None:  # a task given as null takes its defaults
                model = TASKS[name].params
                try:
                    _adapter(model).validate_python(params)
                except ValidationError as e:
                    raise _described(describe(e, model, name)) from None
        return value


def _described(text: str) -> PydanticCustomError:
    return PydanticCustomError(DESCRIBED, "{text}", {"text": text})


def reward_models() -> tuple[str, ...]:
    """The reward models a reward's entry may name (``ddmrl.rewards.REWARD_MODELS``; weighted_sum is their sum)."""
    return tuple(name for name in REWARD_MODELS if name != "weighted_sum")


def is_reward_model(name: Any) -> bool:
    """Whether ``name`` names a reward model: built in (not their weighted sum), ``module:attribute`` or an entry
    point of ``ddmrl.rewards`` (nothing is imported)."""
    return isinstance(name, str) and name != "weighted_sum" and name in REWARD_MODELS


@dataclasses.dataclass(frozen=True)
class RewardName:
    """Validates a reward model's name: one of :func:`reward_models`, or one outside the package (``module:attribute``
    or an entry point of ``ddmrl.rewards``; imported when the task is built)."""

    def choices(self) -> tuple[str, ...]:
        return reward_models()

    def __call__(self, value: Any, handler: Any) -> Any:
        if not is_reward_model(value):
            raise unknown(self.choices())
        return handler(value)


@pdc.dataclass(frozen=True, config=ConfigDict(extra="allow"))
class RewardEntry:
    """One term of a weighted reward (``ddmrl.rewards.reward_from_params``); any other key is an option of the
    reward model, checked when the task is built."""

    model: Annotated[Str, WrapValidator(RewardName())] | None = Field(
        None, description="Reward model (default: the entry's name)."
    )
    weight: Annotated[Float, Field(allow_inf_nan=False)] = Field(1.0, description="Weight in the sum.")


#: the task parameters that are weighted rewards (``RewardEntry`` mappings): geneval's and geneval_mini's RL reward,
#: hps's score
REWARD_KEYS = ("reward_models", "scorer")


def named_reward_models(task_params: dict[str, Any] | None) -> tuple[str, ...]:
    """The reward models a task's raw parameters name in their weighted rewards (an entry's ``model``, by default
    its name)."""
    names = []
    for key in REWARD_KEYS:
        section = (task_params or {}).get(key) or {}
        names += [(term or {}).get("model") or entry for entry, term in section.items()]
    return tuple(dict.fromkeys(names))


def check_reward_entries(section: dict[str, RewardEntry] | None, key: str) -> None:
    """Refuse an entry of a weighted reward that names no reward model (its ``model`` defaults to its name)."""
    for entry, term in (section or {}).items():
        if term.model is None and not is_reward_model(entry):
            raise refuse(
                f"{key}.{entry}.model",
                entry,
                f"unknown reward model; choose one of {', '.join(reward_models())}",
            )


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
    scale_rewards: Advantages = Field("group", description="Advantages, as grpo.scale_rewards.")
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


#: the MAR branch's one task (its continuous encoding is geneval-mini's cells)
MAR_TASK = "geneval_mini"


def mar_run_name(section: str, task: str = MAR_TASK, seed: int = 0) -> str:
    """``mar_<section>_<task>_s<seed>``; the base model's rows are ``mar_base``."""
    return f"mar_{run_name(section, task, seed)}"


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
            samples_per_prompt=4, sampler=SamplerConfig(name="maskgit", steps=24, temperature=1.0, cfg_scale=1.0)
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
    tasks: tuple[TaskName("text"), ...] = Field(("sudoku4", "chain"), description="Text tasks.")
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
        if self.model.kind in BLOCK_FAMILIES:  # a block-diffusion model samples with the block sampler
            samplers = {"rollout.sampler": self.rollout.sampler, "evaluate.sampler": self.evaluate.sampler}
            runs = [m for m in self.text_methods if m in self.methods]
            samplers |= {f"methods.{m}.sampler": self.methods[m].sampler for m in runs}
            tiny = self.model.kind == "tiny_block"  # its blocks are model.block_size
            for key, sampler in samplers.items():
                if sampler.name != "block" or (tiny and sampler.block_length != self.model.block_size):
                    raise refuse(
                        key, f"{sampler.name}, block_length {sampler.block_length}",
                        f"model.kind {self.model.kind} samples with name: block"
                        + (f", block_length = model.block_size ({self.model.block_size})" if tiny else ""),
                    )  # fmt: skip
        if self.image.model.kind == "tiny_block":
            raise refuse("image.model.kind", "tiny_block", "the image branch has no block-diffusion model")
        if self.image.eval_tasks and (not self.image.tasks or self.image.model.kind != "mmada"):
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


def run_name(method: str, task: str, seed: int) -> str:
    return f"{method}_{task}_s{seed}"
