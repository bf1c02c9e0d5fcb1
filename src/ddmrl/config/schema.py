"""The params.yaml schema: one model per section, one per method, one per task's parameters.

Every key is declared once here, with its type, default, constraint and description; ``docs/params.md`` is
generated from these declarations (``python -m ddmrl.config.docs``). Choices are ``Literal`` types, unknown keys
are refused, and every model is frozen. The names the schema shares with the library (tasks and their modality,
methods, view samplers, reward models) are spelled out here, so that the schema imports nothing of ddmrl; tests
check that they agree with the registries.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import ConfigDict, Field, model_validator
from pydantic import dataclasses as pdc

from ddmrl.config._base import Bool, Float, Int, Section, Str, checked_as, refuse, section
from ddmrl.errors import ConfigError

DEFAULT_PROFILE = "tiny"

# ------------------------------------------------------------------------------------------------ names

TextTask = Literal["sudoku4", "countdown3", "gsm8k", "math500"]
ImageTask = Literal["geneval_mini", "geneval"]
MethodName = Literal["diffu_grpo", "unigrpo", "maskgrpo", "rebrl", "tracerl", "gdpo", "spg", "wd1"]
ViewSampler = Literal[
    "full_completion", "unigrpo", "maskgrpo_fading", "maskgrpo_random", "rebrl_linear", "tracerl",
    "gdpo_quadrature", "block_random",
]  # fmt: skip
RewardModel = Literal["imagereward", "hpsv3", "clip", "clip_hf", "deqa", "unifiedreward", "reward_server"]
ModelKind = Literal["tiny", "llada", "mmada", "hf_masked_lm"]
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
        description="Model family: TinyDDM (embedded), LLaDA, MMaDA or an AutoModelForMaskedLM (docs/real_scale.md).",
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
    if spec.kind == "tiny" and spec.trust_remote_code:
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

    @property
    def pretrained(self) -> bool:
        """True for a downloaded checkpoint (``kind`` other than tiny): nothing is pre-trained here."""
        return self.kind != "tiny"

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

    name: Literal["llada", "maskgit", "emerge"] = Field("llada", description="Which sampler.")
    block_length: Int = Field(4, ge=1, description="llada: tokens per semi-autoregressive block.")
    steps: Int = Field(
        0,
        ge=0,
        description="Denoising steps over the whole completion (0: d1's rule, completion length / 2).",
        json_schema_extra={"why": "0 = completion length / 2"},
    )
    temperature: Float = Field(0.0, ge=0, description="Sampling temperature (Gumbel-max); 0 is greedy.")
    remasking: Literal["low_confidence", "random"] = Field(
        "low_confidence",
        description="llada: which masked tokens to commit each step (LLaDA's default: low_confidence).",
    )
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
        "with confidence >= threshold, or the top n with c_(k) >= 1 - factor / (k + 1) for all k <= n.",
    )
    threshold: Float = Field(0.9, gt=0, le=1, description="parallel: threshold: the confidence bound.")
    factor: Float = Field(1.0, gt=0, description="parallel: factor: the factor of the bound.")

    @model_validator(mode="after")
    def _check(self) -> SamplerConfig:
        if self.kv_cache != "none" and self.name != "llada":
            raise refuse(
                "kv_cache",
                self.kv_cache,
                f"only the llada sampler has semi-autoregressive blocks to cache (name = {self.name!r})",
            )
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
        return self


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
class EvaluateConfig(Section):
    """Held-out evaluation: greedy decoding as in d1's protocol (text); for images, GenEval's several sampled
    images per prompt."""

    batch_size: Int = Field(128, ge=1, description="Prompts decoded together.")
    samples_per_prompt: Int = Field(1, ge=1, description="Generations per held-out prompt (GenEval: 4 images).")
    sampler: SamplerConfig = Field(default_factory=SamplerConfig, description="The evaluation sampler.")


# ------------------------------------------------------------------------------------------------ GRPO

ViewOrDefault = Literal["", ViewSampler]


@section
class GRPOConfig(Section):
    """The hyperparameters of one GRPO run (TRL's names where the concept matches). Each method's model below
    changes the defaults its paper chooses and fixes what its definition requires."""

    method: Str = Field("", description="The method (ddmrl.methods.METHODS); a section's defaults to its name.")
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
    max_grad_norm: Float = Field(1.0, gt=0, description="Gradient clipping.")
    weight_decay: Float = Field(0.0, ge=0, description="AdamW weight decay.")
    gradient_accumulation_steps: Int = Field(
        1, ge=1, description="Micro-batches (of whole prompt groups) per optimiser step; must divide num_prompts."
    )
    scale_rewards: Literal["group", "none"] = Field(
        "group", description="Advantages: group: z-score within a group; none: mean only (d1's code)."
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
        2, ge=1, description="SPG: masks averaged per step (num_t); GDPO: Gauss-Legendre nodes."
    )
    eubo_beta: Float = Field(
        1.0, gt=0, description="SPG: beta of the EUBO proxy (paper: 1.0 Sudoku, 1.5 GSM8K/MATH, 2.0 Countdown)."
    )
    eubo_mix: Float = Field(
        0.5, ge=0, le=1, description="SPG: weight of the EUBO in the proxy for negative advantages (1: pure EUBO)."
    )
    legacy_broadcast_weighting: Bool = Field(
        False, description="Reproduce MaskGRPO's released loss mask (every view's mask broadcast to all views)."
    )
    legacy_micro_step_views: Bool = Field(
        False, description="Reproduce d1's view index taken from the micro-step counter (with gradient accumulation)."
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

    @model_validator(mode="after")
    def _check(self) -> GRPOConfig:
        _check_scale(self)
        if self.num_prompts % self.gradient_accumulation_steps:
            raise refuse(
                "gradient_accumulation_steps",
                self.gradient_accumulation_steps,
                f"must divide num_prompts = {self.num_prompts} (micro-batches hold whole prompt groups)",
            )
        views = self.remasking
        if self.legacy_micro_step_views and views in ("tracerl", "gdpo_quadrature", "block_random"):
            raise refuse(
                "legacy_micro_step_views",
                True,
                f"d1's micro-step view index only applies to one view per step, not to {views}",
            )
        if views == "maskgrpo_fading" and self.coupling == "trajectory":
            raise refuse(
                "coupling", "trajectory", "AR-like fading has its own position-wise curve; use independent or nested"
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


@section
class GRPOSection(GRPOConfig):
    """``grpo:``: which runs exist, and the hyperparameters every method section starts from (shared, so that
    methods are compared on equal terms; a method section may override any of them)."""

    methods: tuple[SectionName, ...] = Field(
        ("diffu_grpo", "unigrpo", "maskgrpo", "rebrl", "tracerl", "gdpo", "spg", "wd1"),
        description="Runs to train: sections of methods: (a section's method defaults to its name).",
    )
    seeds: Seeds = Field((0,), description="Seeds per run (several give the run-to-run spread: mean ± std).")

    def _check_method(self) -> None:
        if self.method:
            raise refuse("method", self.method, "each section of methods: chooses its method (methods.<name>.method)")
        twice = sorted({m for m in self.methods if self.methods.count(m) > 1})
        if twice:
            raise refuse("methods", list(self.methods), f"lists {', '.join(twice)} more than once")

    @property
    def defaults(self) -> GRPOConfig:
        """The shared hyperparameters alone."""
        return GRPOConfig(**{k: getattr(self, k) for k in GRPOConfig.__pydantic_fields__})


# -------------------------------------------------------------------------------------- methods (ddmrl.methods)


@section
class DiffuGRPOConfig(GRPOConfig):
    """diffu-GRPO (d1; Zhao et al. 2025, arXiv 2504.12216): the whole completion masked, the prompt masked with
    p_mask_prompt, one-step token log-probs. Paper runs: epsilon 0.5, beta 0.04, mu 12."""

    method: Literal["diffu_grpo"] = "diffu_grpo"
    remasking: ViewSampler = "full_completion"


@section
class UniGRPOConfig(GRPOConfig):
    """UniGRPO (MMaDA; Yang et al. 2025, arXiv 2505.15809, Algorithm 1): mask ratios evenly spaced from a random
    start up to fully masked."""

    method: Literal["unigrpo"] = "unigrpo"
    remasking: ViewSampler = "unigrpo"


@section
class MaskGRPOConfig(GRPOConfig):
    """MaskGRPO (Ma et al. 2026, ICLR, arXiv 2510.02880): truncated ratios t_j = gamma + (1 - gamma) j / mu with
    AR-like fading (text; images: maskgrpo_random, gamma 0.8). Paper runs: epsilon 0.2, beta 0.01, mu 12."""

    method: Literal["maskgrpo"] = "maskgrpo"
    remasking: ViewSampler = "maskgrpo_fading"


@section
class RebRLConfig(GRPOConfig):
    """RebRL (Zhang et al. 2026, CVPR, Rebalanced Timestep Credits): views at t_j = j / mu, token-level
    rebalancing lambda(t) = t with the 1/F token factor (rebrl_mode: token)."""

    method: Literal["rebrl"] = "rebrl"
    remasking: ViewSampler = "rebrl_linear"

    def _check_method(self) -> None:
        if self.remasking == "full_completion":
            raise refuse(
                "remasking",
                self.remasking,
                "RebRL's 1/F rebalancing is a no-op on fully masked views; "
                "use rebrl_linear, unigrpo or maskgrpo_fading",
            )


@section
class TraceRLConfig(GRPOConfig):
    """TraceRL / TraDo (Wang et al. 2026, ICLR, arXiv 2509.06949): views rebuilt from the sampler's own order,
    consecutive steps merged by shrink, every token a target exactly once; per-row mean, KL against the old policy
    (dLLM-RL's train/rl_llada.py)."""

    method: Literal["tracerl"] = "tracerl"
    remasking: ViewSampler = "tracerl"
    loss_type: Literal["token_mean", "seq_mean"] = "seq_mean"
    kl_target: Literal["ref", "old"] = "old"


@section
class GDPOConfig(GRPOConfig):
    """GDPO (Rojas et al. 2026, ICLR, arXiv 2510.08554): the sequence ratio of a Gauss-Legendre ELBO over
    views_per_step nodes (one mask per node); mean-only advantages by definition."""

    method: Literal["gdpo"] = "gdpo"
    remasking: ViewSampler = "gdpo_quadrature"
    views_per_step: Int = Field(3, ge=1)
    scale_rewards: Literal["none"] = "none"


@section
class SPGConfig(GRPOConfig):
    """SPG (Wang et al. 2026, ICLR, arXiv 2510.09541): REINFORCE with an ELBO proxy for positive advantages and an
    EUBO/ELBO mix for the others, views_per_step block-random masks per step; no KL by definition."""

    method: Literal["spg"] = "spg"
    remasking: ViewSampler = "block_random"
    beta: Literal[0.0] = 0.0


@section
class Wd1Config(GRPOConfig):
    """wd1 (Tang et al. 2026, ICLR, arXiv 2507.08838): ratio-free weighted likelihood with group-softmax weights of
    +-A and d1's one-step log-likelihood; by definition no KL and mean-only advantages."""

    method: Literal["wd1"] = "wd1"
    remasking: ViewSampler = "full_completion"
    beta: Literal[0.0] = 0.0
    scale_rewards: Literal["none"] = "none"


METHOD_CONFIGS: dict[str, type[GRPOConfig]] = {
    c.__pydantic_fields__["method"].default: c
    for c in (
        DiffuGRPOConfig, UniGRPOConfig, MaskGRPOConfig, RebRLConfig, TraceRLConfig, GDPOConfig, SPGConfig, Wd1Config
    )
}  # fmt: skip
MethodConfig = Annotated[Union[tuple(METHOD_CONFIGS.values())], Field(discriminator="method")]  # noqa: UP007


def fixed_values(method: str) -> dict[str, Any]:
    """What the method's definition fixes (a ``Literal`` of one value in its model, e.g. SPG's beta 0)."""
    out = {}
    for name, info in METHOD_CONFIGS[method].__pydantic_fields__.items():
        values = get_args(info.annotation) if get_origin(info.annotation) is Literal else ()
        if name != "method" and len(values) == 1:
            out[name] = values[0]
    return out


# ------------------------------------------------------------------------------------------------ task parameters


@section
class Sudoku4Params(Section):
    """4x4 Sudoku in d1's format (``ddmrl.tasks.sudoku4``)."""

    num_empty: Int = Field(
        8, ge=1, le=12, description="Empty cells per puzzle (d1's puzzles have 8; 4 givens at least for uniqueness)."
    )


@section
class Countdown3Params(Section):
    """Three-number Countdown in d1's format (``ddmrl.tasks.countdown3``)."""

    max_number: Int = Field(20, ge=1, description="The three numbers are drawn from [1, max_number].")
    max_target: Int = Field(100, ge=1, description="Targets are positive integers up to max_target.")


@section
class MathParams(Section):
    """GSM8K and MATH500 (``ddmrl.tasks.math_reasoning``): d1's prompts, rewards and answer parsers."""

    train: Str = Field(min_length=1, description="Training set: a local file or directory, or a hub id.")
    eval: Str = Field(min_length=1, description="Test set, used whole and in file order (as d1 evaluates).")
    train_split: Str = Field("train", description="Split of the training set.")
    eval_split: Str = Field("test", description="Split of the test set.")
    completion_length: Int = Field(256, ge=1, description="Generation length in tokens (d1: 256).")
    legacy_reward_quirks: Bool = Field(False, description="Reproduce the quirks of d1's reward functions.")


@section
class GenEvalMiniParams(Section):
    """geneval-mini (``ddmrl.tasks.geneval_mini``): GenEval's tags, prompts and rules on a small canvas of colour
    codes, judged by an exact detector."""

    height: Int = Field(8, ge=7, le=16, description="Canvas rows (7 holds four plus shapes).")
    width: Int = Field(8, ge=7, le=16, description="Canvas columns.")
    partial_credit: Bool = Field(
        False, description="Reward the fraction of GenEval's checks passed (1 exactly when GenEval says correct)."
    )
    placement: Literal["slots", "free"] = Field(
        "slots", description="Reference scenes put objects in the canvas's quadrants (slots) or anywhere (free)."
    )


@pdc.dataclass(frozen=True, config=ConfigDict(extra="allow"))
class RewardEntry:
    """One term of a weighted reward (``ddmrl.rewards.reward_from_params``); any other key is an option of the
    reward model, checked when the task is built."""

    model: RewardModel | None = Field(None, description="Reward model (default: the entry's name).")
    weight: Annotated[Float, Field(allow_inf_nan=False)] = Field(1.0, description="Weight in the sum.")


@section
class GenEvalEvaluator(Section):
    """The official GenEval evaluator, run in its own environment (``ddmrl.rewards.geneval_bridge.GenEvalEnv``)."""

    geneval_repo: Str = Field(description="Checkout of github.com/djghosh13/geneval.")
    python: Str = Field(description="Python of GenEval's environment (python 3.9, mmdet 2.x).")
    model_path: Str = Field(description="The detector's folder (--model-path).")
    model_config: Str | None = Field(None, description="--model-config (default: mmdet's bundled config).")
    options: dict[Str, Any] = Field(default_factory=dict, description="Further options of evaluate_images.py.")
    timeout_s: Float | None = Field(None, gt=0, description="Seconds before the evaluator is stopped.")


@section
class GenEvalParams(Section):
    """GenEval (``ddmrl.tasks.geneval``) for real text-to-image models, in MMaDA's layout."""

    eval: Str = Field(min_length=1, description="GenEval's evaluation_metadata.jsonl (553 prompts).")
    train: Str = Field("", description="Training prompts in the same schema (e.g. MaskGRPO's train_metadata.jsonl).")
    num_image_tokens: Int = Field(1024, ge=1, description="Image tokens (512 px with MAGVIT-v2 f = 16: 1024).")
    max_seq_length: Int = Field(256, ge=1, description="Text tokens of the prompt (MaskGRPO's RL: 256).")
    reward_models: Annotated[dict[Str, RewardEntry], Field(min_length=1)] | None = Field(
        None, description="The training reward: a weighted sum of reward models, {entry: {model, weight, ...}}."
    )
    evaluator: GenEvalEvaluator | None = Field(None, description="The official evaluator, for held-out scores.")

    @model_validator(mode="after")
    def _check(self) -> GenEvalParams:
        for entry, term in (self.reward_models or {}).items():
            if term.model is None and entry not in get_args(RewardModel):
                raise refuse(
                    f"reward_models.{entry}.model",
                    entry,
                    f"unknown reward model; choose one of {', '.join(get_args(RewardModel))}",
                )
        return self


@section
class TextTaskParams(Section):
    """Generator parameters per text task (``ddmrl.tasks``); a task left out takes its generator's defaults."""

    sudoku4: Sudoku4Params | None = Field(None, description="4x4 Sudoku.")
    countdown3: Countdown3Params | None = Field(None, description="Three-number Countdown.")
    gsm8k: MathParams | None = Field(None, description="GSM8K (paper profiles).")
    math500: MathParams | None = Field(None, description="MATH500 (paper profiles).")


@section
class ImageTaskParams(Section):
    """Generator parameters per image task (``ddmrl.tasks``)."""

    geneval_mini: GenEvalMiniParams | None = Field(None, description="geneval-mini (embedded).")
    geneval: GenEvalParams | None = Field(None, description="GenEval (paper profiles).")


TASK_PARAMS: dict[str, type] = {
    name: info.annotation.__args__[0]
    for params in (TextTaskParams, ImageTaskParams)
    for name, info in params.__pydantic_fields__.items()
}
TASK_MODALITY: dict[str, str] = {
    **dict.fromkeys(get_args(TextTask), "text"),
    **dict.fromkeys(get_args(ImageTask), "image"),
}


# ------------------------------------------------------------------------------------------------ the whole file


@section
class ImageConfig(Section):
    """``image:``, the text-to-image branch in MMaDA's layout (prompt, <soi>, image tokens, <eoi>): its tasks, its
    own base model (pre-trained by the download stage with caption dropout, so that classifier-free guidance
    works), its GRPO runs and its evaluation (GenEval's protocol: several sampled images per prompt). The branch is
    off unless ``tasks`` names an image task."""

    tasks: tuple[ImageTask, ...] = Field((), description="Image tasks (at most one: one layout per pipeline).")
    task_params: Annotated[dict[Str, Any], checked_as(ImageTaskParams)] = Field(
        default_factory=dict, description="Generator parameters per image task."
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
    tasks: tuple[TextTask, ...] = Field(("sudoku4", "countdown3"), description="Text tasks.")
    task_params: Annotated[dict[Str, Any], checked_as(TextTaskParams)] = Field(
        default_factory=dict, description="Generator parameters per text task."
    )
    model: ModelConfig = Field(default_factory=ModelConfig, description="The text model.")
    download: DownloadConfig = Field(default_factory=DownloadConfig, description="The download stage.")
    sft: SFTConfig = Field(default_factory=SFTConfig, description="The sft stage.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="The rollout and reward stages.")
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig, description="Held-out evaluation (text).")
    grpo: GRPOSection = Field(default_factory=GRPOSection, description="The GRPO runs and their shared keys.")
    methods: dict[SectionName, MethodConfig] = Field(
        default_factory=dict,
        description="Method sections: every key of GRPOConfig; method defaults to the section's name.",
        json_schema_extra={"type": "mapping: section name to a [method section](#methods)"},
    )
    image: ImageConfig = Field(default_factory=ImageConfig, description="The text-to-image branch.")
    image_sections: dict[SectionName, MethodConfig] = Field(
        default_factory=dict, json_schema_extra={**_INTERNAL, "key": "image.method_overrides"}
    )  # the image runs' sections, resolved (every section named by image.methods or image.method_overrides)
    raw: dict[str, Any] = Field(default_factory=dict, json_schema_extra=_INTERNAL)  # the merged file, as written

    @model_validator(mode="after")
    def _check(self) -> Config:
        if len(self.image.tasks) > 1:
            raise refuse("image.tasks", list(self.image.tasks), "one image task per pipeline (one layout)")
        if not self.tasks and not self.image.tasks:
            raise refuse("tasks", [], "must name at least one task (or image.tasks)")
        return self

    @property
    def image_methods(self) -> dict[str, GRPOConfig]:
        """Image run section -> hyperparameters, in image.methods order."""
        return {m: self.image_sections[m] for m in self.image.methods}

    def runs(self) -> list[tuple[str, str, int]]:
        """(method section, task, seed) of every GRPO run: text runs, then image runs."""
        text = [(m, t, s) for m in self.grpo.methods for t in self.tasks for s in self.grpo.seeds]
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
