"""params.yaml parsed into frozen dataclasses, validated once.

Every stage script and the Snakemake workflow call :func:`load`, so a bad value is refused before any stage
does work, with one line that names the key, the value and what is allowed::

    params.yaml: grpo.num_generations = 1: must be >= 2 (GRPO needs a group to compare against)

Profiles of scale: ``profile: tiny`` is the default embedded run and needs no other file. Any other profile
``NAME`` overlays ``profiles/NAME.yaml`` (next to params.yaml) onto params.yaml, key by key, before
validation. Hyperparameter names follow TRL's ``GRPOConfig`` where the concept matches.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_PROFILE = "tiny"


class ConfigError(ValueError):
    """A params.yaml problem; its message is one line naming the key (line breaks are folded)."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


# ------------------------------------------------------------------------------------------------ sections


# --------------------------------------------------------------------------------------- scale (training stages)

MIXED_PRECISION = ("no", "bf16", "fp16")
LAUNCHERS = ("python", "accelerate")


@dataclass(frozen=True)
class LoraConfig:
    """LoRA adapters (Hu et al. 2022) through peft; ``r = 0`` trains every weight. d1 uses r 128, alpha 64, dropout
    0.05 on the attention and MLP projections (baselines.md 1.6). Saved models have the adapters merged in."""

    r: int = 0  # adapter rank (0 = off: full fine-tuning)
    alpha: float = 16.0  # peft lora_alpha (the update is scaled by alpha / r)
    dropout: float = 0.0  # dropout on the adapter input
    target_modules: tuple[str, ...] = ("all-linear",)  # module names, or all-linear (every Linear but the LM head)

    def __post_init__(self) -> None:
        _check(self.r >= 0, "r", self.r, "must be >= 0 (0 = no adapters)")
        _check(self.alpha > 0, "alpha", self.alpha, "must be > 0")
        _check(0.0 <= self.dropout < 1.0, "dropout", self.dropout, "must be in [0, 1)")
        _check(len(self.target_modules) >= 1, "target_modules", list(self.target_modules), "must name a module")


@dataclass(frozen=True)
class LaunchConfig:
    """How the engines start a training stage: ``python stages/X.py ...`` or, for several GPUs,
    ``accelerate launch --config_file F --num_processes N stages/X.py ...`` (DDP, DeepSpeed ZeRO or FSDP)."""

    launcher: str = "python"  # python | accelerate
    config_file: str = "configs/accelerate/ddp.yaml"  # accelerate config (ddp, zero2, zero3, fsdp)
    num_processes: int = 1  # processes, one per GPU (the job's GPU count on SLURM)

    def __post_init__(self) -> None:
        _check_choice("launcher", self.launcher, LAUNCHERS)
        _check(self.num_processes >= 1, "num_processes", self.num_processes, "must be >= 1")
        _check(
            self.launcher == "python" or bool(self.config_file),
            "config_file",
            self.config_file,
            "must name an accelerate config file (configs/accelerate/*.yaml)",
        )


def _check_scale(cfg: Any) -> None:
    """The scale keys shared by the sft and grpo sections."""
    _check_choice("mixed_precision", cfg.mixed_precision, MIXED_PRECISION)
    _check(
        cfg.launch.launcher == "accelerate" or cfg.launch.num_processes == 1,
        "launch.num_processes",
        cfg.launch.num_processes,
        "needs launch.launcher: accelerate (python runs one process)",
    )


@dataclass(frozen=True)
class ModelConfig:
    """TinyDDM architecture (``kind: tiny``, embedded profiles: the download stage builds and pre-trains it) or a
    checkpoint the download stage fetches (paper profiles: ``kind`` llada | mmada | hf_masked_lm and the keys of
    ``ddmrl.models.adapters.ModelSpec``; the architecture keys are then unused)."""

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 512
    dropout: float = 0.0
    position_embedding: str = "learned"  # learned (absolute) | rope (rotary, as LLaDA)
    kind: str = "tiny"  # tiny | llada | mmada | hf_masked_lm (docs/real_scale.md)
    path_or_id: str = ""  # checkpoint directory (normally under download.hub_dir) or a hub id in the HF cache
    revision: str | None = None  # hub commit (40 hex with trust_remote_code)
    trust_remote_code: bool = False  # run the checkpoint's own modeling_*.py (LLaDA needs it)
    dtype: str = "float32"  # float32 | bfloat16 | float16 | auto
    mmada_code: str | None = None  # mmada: checkout of github.com/Gen-Verse/MMaDA (the directory holding models/)
    vq_path_or_id: str | None = None  # mmada: MAGVIT-v2 weights
    vq_revision: str | None = None

    @property
    def pretrained(self) -> bool:
        """True for a downloaded checkpoint (``kind`` other than tiny): nothing is pre-trained here."""
        return self.kind != "tiny"

    def spec(self):
        """The ``ddmrl.models.adapters.ModelSpec`` of a downloaded checkpoint (validated)."""
        from ddmrl.models.adapters import ModelSpec

        try:
            return ModelSpec(**{k: getattr(self, k) for k in ModelSpec.__dataclass_fields__})
        except ConfigError as e:  # ModelSpec names its keys model.<key>; this section adds the prefix itself
            raise ConfigError(str(e).removeprefix("model.")) from None

    def __post_init__(self) -> None:
        if self.pretrained:
            self.spec()
        _check_choice("position_embedding", self.position_embedding, ("learned", "rope"))
        for key in ("hidden_size", "num_layers", "num_heads", "intermediate_size"):
            _check(getattr(self, key) >= 1, key, getattr(self, key), "must be >= 1")
        _check(
            self.hidden_size % self.num_heads == 0,
            "hidden_size",
            self.hidden_size,
            f"must be divisible by num_heads = {self.num_heads}",
        )
        _check(0.0 <= self.dropout < 1.0, "dropout", self.dropout, "must be in [0, 1)")


TRAIN_LOSSES = ("elbo", "maskgit")  # ddmrl.training.mdm.mdm_loss


@dataclass(frozen=True)
class TrainConfig:
    """A supervised masked-diffusion training run (the download stage's pre-training, and SFT)."""

    max_steps: int = 1000
    batch_size: int = 64
    learning_rate: float = 1e-3
    warmup_steps: int = 50
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    log_every: int = 50
    save_steps: int = 0  # checkpoint every this many steps for resuming after a kill (0 = never)
    save_total_limit: int = 2  # checkpoints kept (older ones are deleted)
    loss: str = "elbo"  # elbo (LLaDA) or maskgit (MaskGIT's and MMaDA's image loss); ddmrl.training.mdm.mdm_loss

    def __post_init__(self) -> None:
        _check(self.max_steps >= 0, "max_steps", self.max_steps, "must be >= 0")
        _check_choice("loss", self.loss, TRAIN_LOSSES)
        _check(self.log_every >= 1, "log_every", self.log_every, "must be >= 1")
        _check(self.save_steps >= 0, "save_steps", self.save_steps, "must be >= 0 (0 = no checkpoints)")
        _check(self.save_total_limit >= 1, "save_total_limit", self.save_total_limit, "must be >= 1")
        _check(self.batch_size >= 1, "batch_size", self.batch_size, "must be >= 1")
        _check(self.learning_rate > 0, "learning_rate", self.learning_rate, "must be > 0")


@dataclass(frozen=True)
class DownloadConfig:
    """The download stage: under embedded profiles, synthetic data plus a base model pre-trained from scratch."""

    num_eval: int = 256
    pretrain: TrainConfig = field(default_factory=TrainConfig)
    # paper profiles: what to fetch (``ddmrl.hub.HubItem`` fields: name, repo_id, revision, repo_type,
    # allow_patterns) into hub_dir/<name>; a checksum manifest per item is the stage's DVC-tracked output
    hub: tuple[dict[str, Any], ...] = ()
    hub_dir: str = "data/hub"  # large downloads live here, outside the DAG's outputs (like data/checkpoints)

    def __post_init__(self) -> None:
        _check(self.num_eval >= 1, "num_eval", self.num_eval, "must be >= 1")
        names = [item.name for item in self.hub_items()]
        _check(len(set(names)) == len(names), "hub", names, "item names must be unique")

    def hub_items(self) -> list:
        """``hub`` as validated ``ddmrl.hub.HubItem`` records."""
        from ddmrl.hub import HubItem

        items, allowed = [], {f.name for f in dataclasses.fields(HubItem)}
        for i, raw in enumerate(self.hub):
            unknown = sorted(set(raw) - allowed)
            _check(not unknown, f"hub[{i}]", unknown, f"unknown key(s); allowed: {', '.join(sorted(allowed))}")
            patterns = raw.get("allow_patterns")
            try:
                items.append(HubItem(**{**raw, "allow_patterns": tuple(patterns) if patterns else None}))
            except (TypeError, ValueError) as e:
                raise ConfigError(f"hub[{i}] = {raw!r}: {e}") from None
        return items


@dataclass(frozen=True)
class SFTConfig(TrainConfig):
    """The sft stage: a supervised run plus how it uses the hardware (``ddmrl.training.distributed``)."""

    mixed_precision: str = "no"  # no | bf16 | fp16 (accelerate autocast; fp32 master weights)
    gradient_checkpointing: bool = False  # recompute activations in backward (models that support it)
    lora: LoraConfig = field(default_factory=LoraConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_scale(self)


@dataclass(frozen=True)
class SamplerConfig:
    """The reverse process (``ddmrl.samplers``): LLaDA's semi-autoregressive low-confidence sampler (Nie et al.
    2025), MaskGIT's cosine confidence sampler (Chang et al. 2022; MMaDA's ``t2i_generate``) or MaskGRPO's emerge
    (ancestral) sampler."""

    name: str = "llada"  # llada | maskgit | emerge
    block_length: int = 4  # llada: tokens per semi-autoregressive block
    steps: int = 0  # total denoising steps over the completion (0 = d1's completion_length / 2)
    temperature: float = 0.0  # sampling temperature (Gumbel-max); 0 = greedy
    remasking: str = "low_confidence"  # llada: low_confidence | random
    noise_temperature: float = 1.0  # maskgit: scale of the annealed Gumbel noise on confidences
    cfg_scale: float = 0.0  # classifier-free guidance weight (0 = off); unconditional = prompt fully masked
    kv_cache: str = "none"  # llada: none | prefix | dual (Fast-dLLM's block-wise approximate KV cache)
    parallel: str = "none"  # llada, maskgit: none | threshold | factor (Fast-dLLM's confidence-aware decoding)
    threshold: float = 0.9  # parallel threshold: also commit every masked token with confidence >= threshold
    factor: float = 1.0  # parallel factor: also commit the top n with c_(k) >= 1 - factor / (k + 1) for all k <= n

    def __post_init__(self) -> None:
        _check_choice("name", self.name, ("llada", "maskgit", "emerge"))
        _check_choice("kv_cache", self.kv_cache, ("none", "prefix", "dual"))
        _check(
            self.kv_cache == "none" or self.name == "llada",
            "kv_cache",
            self.kv_cache,
            f"only the llada sampler has semi-autoregressive blocks to cache (name = {self.name!r})",
        )
        _check_choice("parallel", self.parallel, ("none", "threshold", "factor"))
        _check(
            self.parallel == "none" or self.name != "emerge",
            "parallel",
            self.parallel,
            "emerge reveals each position by its own coin (ancestral sampling); no confidence rule applies",
        )
        _check(
            self.parallel == "none" or self.name != "llada" or self.remasking == "low_confidence",
            "parallel",
            self.parallel,
            "ranks tokens by the model's confidence: it needs remasking: low_confidence",
        )
        _check(0 < self.threshold <= 1, "threshold", self.threshold, "must be in (0, 1]")
        _check(self.factor > 0, "factor", self.factor, "must be > 0")
        _check(self.block_length >= 1, "block_length", self.block_length, "must be >= 1")
        _check(self.steps >= 0, "steps", self.steps, "must be >= 0 (0 = completion length / 2)")
        _check(self.temperature >= 0, "temperature", self.temperature, "must be >= 0")
        _check(self.noise_temperature >= 0, "noise_temperature", self.noise_temperature, "must be >= 0")
        _check(self.cfg_scale >= 0, "cfg_scale", self.cfg_scale, "must be >= 0")
        _check_choice("remasking", self.remasking, ("low_confidence", "random"))


@dataclass(frozen=True)
class RolloutConfig:
    """The standalone rollout + reward stages: G samples per prompt from the SFT model (room-for-RL check)."""

    num_prompts: int = 64
    num_generations: int = 8
    sampler: SamplerConfig = field(default_factory=lambda: SamplerConfig(temperature=1.0))

    def __post_init__(self) -> None:
        _check(self.num_prompts >= 1, "num_prompts", self.num_prompts, "must be >= 1")
        _check(
            self.num_generations >= 2,
            "num_generations",
            self.num_generations,
            "must be >= 2 (groups measure the reward spread)",
        )


@dataclass(frozen=True)
class EvaluateConfig:
    """Held-out evaluation: greedy decoding as in d1's protocol (text); for images, GenEval's several sampled
    images per prompt."""

    batch_size: int = 128
    samples_per_prompt: int = 1  # generations per held-out prompt (GenEval: 4 images per prompt)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)

    def __post_init__(self) -> None:
        _check(self.batch_size >= 1, "batch_size", self.batch_size, "must be >= 1")
        _check(self.samples_per_prompt >= 1, "samples_per_prompt", self.samples_per_prompt, "must be >= 1")


@dataclass(frozen=True)
class GRPOConfig:
    """Hyperparameters of one GRPO run (TRL names). A method section may override any of them."""

    method: str = ""  # record in ddmrl.methods.METHODS; defaults to the section name
    max_steps: int = 100
    num_prompts: int = 8  # distinct prompts per step
    num_generations: int = 8  # G, completions per prompt
    num_iterations: int = 4  # mu, optimiser steps (each on its own training view) per rollout batch
    learning_rate: float = 3e-4
    beta: float = 0.01  # k3 KL coefficient against the frozen reference
    epsilon: float = 0.2  # PPO clip range
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    gradient_accumulation_steps: int = 1  # micro-batches (of whole prompt groups) per optimiser step
    scale_rewards: str = "group"  # group (z-score) | none (mean only, as d1's code)
    loss_type: str = "token_mean"  # token_mean (d1/MaskGRPO: global token mean) | seq_mean (per-sequence mean)
    kl_target: str = "ref"  # ref (frozen SFT model; d1, MaskGRPO) | old (rollout-time policy; TraceRL)
    sampler: SamplerConfig = field(default_factory=lambda: SamplerConfig(temperature=1.0))
    # none: training log-probs of the conditional model, although rollouts are sampled with CFG (MaskGRPO's and MMaDA's
    # released code; maskgrpo.md 7) | guided: under the rollout sampler's guidance, the distribution sampled from
    logp_cfg: str = "none"
    # DDM-specific: the training views ("re-masking") and the token weighting
    p_mask_prompt: float = 0.15  # diffu-GRPO: prompt tokens masked with this probability
    gamma: float = 0.6  # MaskGRPO: truncated ratios t_j = gamma + (1 - gamma) j / mu
    remasking: str = ""  # view sampler; empty = the method's own
    coupling: str = "independent"  # independent | nested | trajectory (RebRL A.2)
    rebrl_mode: str = "token"  # none | t1 | t2 | token | token_t2 (RebRL A.3)
    shrink: int = 2  # TraceRL: consecutive sampler steps merged into one trace step
    views_per_step: int = 2  # SPG: masks averaged per step (num_t); GDPO: Gauss-Legendre nodes
    eubo_beta: float = 1.0  # SPG: beta of the EUBO proxy (paper: 1.0 Sudoku, 1.5 GSM8K/MATH, 2.0 Countdown)
    eubo_mix: float = 0.5  # SPG: weight of the EUBO in the negative-advantage proxy ("mix"; 1 = pure EUBO)
    legacy_broadcast_weighting: bool = False  # reproduce MaskGRPO's released loss mask (all views' masks broadcast)
    legacy_micro_step_views: bool = False  # reproduce d1's view index from the micro-step counter (with GA > 1)
    on_nonfinite: str = "skip"  # a non-finite reward, advantage or loss: skip the step (and count it) | stop
    save_steps: int = 0  # checkpoint at the first rollout-batch boundary after every this many steps (0 = never)
    save_total_limit: int = 2  # checkpoints kept
    # scale (ddmrl.training.distributed): precision, memory, adapters, launcher
    mixed_precision: str = "no"  # no | bf16 | fp16 (accelerate autocast; fp32 master weights)
    gradient_checkpointing: bool = False  # recompute activations in backward (models that support it)
    lora: LoraConfig = field(default_factory=LoraConfig)  # r > 0: train adapters; the reference = adapters off
    launch: LaunchConfig = field(default_factory=LaunchConfig)

    def __post_init__(self) -> None:
        _check_scale(self)
        _check(
            self.num_generations >= 2,
            "num_generations",
            self.num_generations,
            "must be >= 2 (GRPO needs a group to compare against)",
        )
        _check(self.num_prompts >= 1, "num_prompts", self.num_prompts, "must be >= 1")
        _check(self.num_iterations >= 1, "num_iterations", self.num_iterations, "must be >= 1")
        _check(
            self.gradient_accumulation_steps >= 1 and self.num_prompts % self.gradient_accumulation_steps == 0,
            "gradient_accumulation_steps",
            self.gradient_accumulation_steps,
            f"must divide num_prompts = {self.num_prompts} (micro-batches hold whole prompt groups)",
        )
        _check(self.shrink >= 1, "shrink", self.shrink, "must be >= 1")
        _check(self.views_per_step >= 1, "views_per_step", self.views_per_step, "must be >= 1")
        _check(self.eubo_beta > 0, "eubo_beta", self.eubo_beta, "must be > 0")
        _check(0 <= self.eubo_mix <= 1, "eubo_mix", self.eubo_mix, "must be in [0, 1]")
        _check_choice("kl_target", self.kl_target, ("ref", "old"))
        _check_choice("logp_cfg", self.logp_cfg, ("none", "guided"))
        _check_choice("on_nonfinite", self.on_nonfinite, ("skip", "stop"))
        _check(self.save_steps >= 0, "save_steps", self.save_steps, "must be >= 0 (0 = no checkpoints)")
        _check(self.save_total_limit >= 1, "save_total_limit", self.save_total_limit, "must be >= 1")
        _check(self.max_steps >= 0, "max_steps", self.max_steps, "must be >= 0")
        _check(self.learning_rate > 0, "learning_rate", self.learning_rate, "must be > 0")
        _check(self.beta >= 0, "beta", self.beta, "must be >= 0")
        _check(0 < self.epsilon < 1, "epsilon", self.epsilon, "must be in (0, 1)")
        _check(0.0 <= self.gamma < 1.0, "gamma", self.gamma, "must be in [0, 1)")
        _check(0.0 <= self.p_mask_prompt < 1.0, "p_mask_prompt", self.p_mask_prompt, "must be in [0, 1)")
        _check_choice("scale_rewards", self.scale_rewards, ("group", "none"))
        _check_choice("loss_type", self.loss_type, ("token_mean", "seq_mean"))
        _check_choice("coupling", self.coupling, ("independent", "nested", "trajectory"))
        _check_choice("rebrl_mode", self.rebrl_mode, ("none", "t1", "t2", "token", "token_t2"))


@dataclass(frozen=True)
class GRPOSection:
    """``grpo:``: which runs exist, and the defaults every method section starts from."""

    methods: tuple[str, ...] = ("diffu_grpo", "unigrpo", "maskgrpo", "rebrl")
    seeds: tuple[int, ...] = (0,)
    defaults: GRPOConfig = field(default_factory=GRPOConfig)


@dataclass(frozen=True)
class ImageConfig:
    """``image:``, the text-to-image branch in MMaDA's layout (prompt, <soi>, image tokens, <eoi>): its tasks, its
    own base model (pre-trained by the download stage with caption dropout, so that classifier-free guidance
    works), its GRPO runs (every ``grpo:`` key, then ``image.grpo``, then ``methods.<name>``, then
    ``image.method_overrides.<name>``) and its evaluation (GenEval's protocol: several sampled images per prompt)."""

    tasks: tuple[str, ...] = ()
    task_params: dict[str, Any] = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    download: DownloadConfig = field(default_factory=DownloadConfig)
    cond_dropout_prob: float = 0.1  # MMaDA's caption dropout during pre-training (the CFG's unconditional form)
    seeds: tuple[int, ...] = ()  # empty: grpo.seeds
    methods: tuple[str, ...] = ()  # image runs: method sections (as grpo.methods)
    grpo: dict[str, Any] = field(default_factory=dict)  # grpo keys overridden for every image run
    method_overrides: dict[str, Any] = field(default_factory=dict)  # section -> its image-only keys
    evaluate: EvaluateConfig = field(
        default_factory=lambda: EvaluateConfig(
            samples_per_prompt=4, sampler=SamplerConfig(name="maskgit", steps=24, temperature=1.0)
        )
    )

    def __post_init__(self) -> None:
        _check(0 <= self.cond_dropout_prob < 1, "cond_dropout_prob", self.cond_dropout_prob, "must be in [0, 1)")


@dataclass(frozen=True)
class Config:
    """The whole params.yaml, after the profile overlay."""

    profile: str
    seed: int
    tasks: tuple[str, ...]
    task_params: dict[str, dict[str, Any]]
    model: ModelConfig
    download: DownloadConfig
    sft: SFTConfig
    rollout: RolloutConfig
    evaluate: EvaluateConfig
    grpo: GRPOSection
    methods: dict[str, GRPOConfig]  # run section name -> resolved hyperparameters (text runs)
    raw: dict[str, Any]  # the merged mapping, for provenance and for the DAG's rerun triggers
    image: ImageConfig = field(default_factory=ImageConfig)
    image_methods: dict[str, GRPOConfig] = field(default_factory=dict)  # image run section -> hyperparameters

    def runs(self) -> list[tuple[str, str, int]]:
        """(method section, task, seed) of every GRPO run: text runs, then image runs."""
        text = [(m, t, s) for m in self.grpo.methods for t in self.tasks for s in self.grpo.seeds]
        seeds = self.image.seeds or self.grpo.seeds
        return text + [(m, t, s) for m in self.image_methods for t in self.image.tasks for s in seeds]

    def run_names(self) -> list[str]:
        """Every GRPO run: ``<method section>_<task>_s<seed>``."""
        return [run_name(*r) for r in self.runs()]

    def run(self, name: str) -> tuple[GRPOConfig, str, int]:
        """(hyperparameters, task, seed) of a run name."""
        for m, t, s in self.runs():
            if run_name(m, t, s) == name:
                return (self.image_methods if t in self.image.tasks else self.methods)[m], t, s
        raise ConfigError(f"unknown run '{name}'; runs are: {', '.join(self.run_names())}")


def run_name(method: str, task: str, seed: int) -> str:
    return f"{method}_{task}_s{seed}"


# ------------------------------------------------------------------------------------------------ loading


def load(path: str | Path) -> Config:
    """Read, overlay the profile, and validate ``path``. Raises :class:`ConfigError` (one line) on any problem."""
    path = Path(path)
    raw = _read_yaml(path)
    profile = raw.get("profile", DEFAULT_PROFILE)
    if not isinstance(profile, str):
        raise ConfigError(f"{path.name}: profile = {profile!r}: must be a profile name")
    if profile != DEFAULT_PROFILE:
        overlay_path = profile_path(path, profile)
        if not overlay_path.exists():
            raise ConfigError(f"{path.name}: profile = {profile!r}: no overlay file {str(overlay_path)!r}")
        raw = deep_merge(raw, _read_yaml(overlay_path))
    try:
        return _build_config(raw)
    except ConfigError as e:
        raise ConfigError(f"{path.name}: {e}") from None


def profile_path(params_path: str | Path, profile: str) -> Path:
    return Path(params_path).parent / "profiles" / f"{profile}.yaml"


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` onto ``base``, recursively for mappings; lists and scalars are replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read as UTF-8 text ({e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a mapping of sections, got {type(data).__name__}")
    return data


def _build_config(raw: dict[str, Any]) -> Config:
    known = {f.name for f in dataclasses.fields(Config)} - {"raw"}
    for key in raw:
        if key not in known:
            raise ConfigError(f"{key}: unknown section; sections are: {', '.join(sorted(known))}")
    tasks = _tasks(raw.get("tasks", ["sudoku4", "countdown3"]), "tasks", "text")
    task_params = _task_params(raw.get("task_params", {}), "task_params")

    _check(isinstance(raw.get("grpo") or {}, dict), "grpo", raw.get("grpo"), "must be a mapping")
    grpo_raw = dict(raw.get("grpo") or {})
    head = {k: grpo_raw.pop(k) for k in ("methods", "seeds") if k in grpo_raw}
    defaults = _section(GRPOConfig, grpo_raw, "grpo")
    grpo = GRPOSection(
        methods=tuple(_as(head.get("methods", GRPOSection.methods), tuple[str, ...], "grpo.methods")),
        seeds=tuple(_as(head.get("seeds", GRPOSection.seeds), tuple[int, ...], "grpo.seeds")),
        defaults=defaults,
    )
    _check(len(grpo.seeds) >= 1, "grpo.seeds", list(grpo.seeds), "must list at least one seed")
    methods_raw = raw.get("methods", {}) or {}
    _check(isinstance(methods_raw, dict), "methods", methods_raw, "must be a mapping of method sections")
    # every section is validated (a typo fails even if the section is not listed in grpo.methods)
    methods = {
        name: _resolve_run(name, methods_raw.get(name), grpo_raw, name in grpo.methods)
        for name in dict.fromkeys([*grpo.methods, *methods_raw])
    }

    image = _section(ImageConfig, raw.get("image", {}), "image")
    image = dataclasses.replace(
        image,
        tasks=_tasks(list(image.tasks), "image.tasks", "image"),
        task_params=_task_params(image.task_params, "image.task_params"),
    )
    _check(len(image.tasks) <= 1, "image.tasks", list(image.tasks), "one image task per pipeline (one layout)")
    _check(len(tasks) + len(image.tasks) >= 1, "tasks", list(tasks), "must name at least one task (or image.tasks)")
    _section(GRPOConfig, image.grpo, "image.grpo")  # names and types of the image overrides
    image_grpo = deep_merge(grpo_raw, image.grpo)
    image_methods = {}
    for name in dict.fromkeys([*image.methods, *image.method_overrides]):
        over = image.method_overrides.get(name) or {}
        _check(isinstance(over, dict), f"image.method_overrides.{name}", over, "must be a mapping of hyperparameters")
        section = deep_merge(methods_raw.get(name) or {}, over)
        resolved = _resolve_run(name, section, image_grpo, True, "image.method_overrides")
        if name in image.methods:
            image_methods[name] = resolved

    return Config(
        profile=_as(raw.get("profile", DEFAULT_PROFILE), str, "profile"),
        seed=_as(raw.get("seed", 0), int, "seed"),
        tasks=tasks,
        task_params=task_params,
        model=_section(ModelConfig, raw.get("model", {}), "model"),
        download=_section(DownloadConfig, raw.get("download", {}), "download"),
        sft=_section(SFTConfig, raw.get("sft", {}), "sft"),
        rollout=_section(RolloutConfig, raw.get("rollout", {}), "rollout"),
        evaluate=_section(EvaluateConfig, raw.get("evaluate", {}), "evaluate"),
        grpo=grpo,
        methods=methods,
        raw=raw,
        image=image,
        image_methods=image_methods,
    )


def _tasks(value: Any, key: str, modality: str) -> tuple[str, ...]:
    """Task names of ``key``, each registered and of ``modality`` (text tasks under ``tasks``, images under
    ``image.tasks``)."""
    from ddmrl.tasks import TASKS

    tasks = tuple(_as(value, tuple[str, ...], key))
    for t in tasks:
        _check_choice(key, t, tuple(TASKS))
        _check(TASKS[t].modality == modality, key, t, f"is not a {modality} task")
    return tasks


def _task_params(value: Any, key: str) -> dict[str, Any]:
    """``task_params`` mapping, each task's generator parameters checked by building the task."""
    from ddmrl.tasks import TASKS, make_task

    task_params = _as(value or {}, dict[str, Any], key)
    for t, kw in task_params.items():
        _check_choice(key, t, tuple(TASKS))
        _check(isinstance(kw, dict), f"{key}.{t}", kw, "must be a mapping of generator parameters")
        try:  # the generator itself checks its parameters
            make_task(t, **kw)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{key}.{t} = {kw!r}: {e}") from None
    return task_params


def _resolve_run(name: Any, section: Any, grpo_raw: dict[str, Any], listed: bool, where: str = "methods"):
    """The hyperparameters of run section ``name``.

    Precedence: dataclass defaults < the method's own defaults < explicit grpo: keys < what the method's definition
    fixes (e.g. SPG has no KL) < the section's keys (validated against the fixed values by the method)."""
    from ddmrl.methods import METHODS

    _check(
        isinstance(name, str) and name.replace("_", "").isalnum(),
        "grpo.methods" if listed and where == "methods" else where,
        name,
        "section names use letters, digits and _ only",
    )
    section = section or {}
    _check(isinstance(section, dict), f"{where}.{name}", section, "must be a mapping of hyperparameters")
    method = section.get("method", name)
    _check(isinstance(method, str), f"{where}.{name}.method", method, "must be a method name")
    if method not in METHODS:
        key = (
            f"{where}.{name}.method"
            if "method" in section
            else ("grpo.methods" if listed and where == "methods" else f"{where}.{name}")
        )
        raise ConfigError(f"{key} = {method!r}: unknown method; choose one of {', '.join(METHODS)}")
    merged = deep_merge(dataclasses.asdict(GRPOConfig()), METHODS[method].defaults)
    merged = deep_merge(deep_merge(deep_merge(merged, grpo_raw), METHODS[method].fixed), section)
    merged["method"] = method
    resolved = _section(GRPOConfig, merged, f"{where}.{name}")
    METHODS[method].validate(resolved, f"{where}.{name}")
    return resolved


def _section(cls: type, data: Any, prefix: str) -> Any:
    """Build dataclass ``cls`` from mapping ``data``: unknown keys and wrong types are errors naming the key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix} = {data!r}: must be a mapping")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(f"{prefix}.{key}: unknown key; allowed: {', '.join(fields)}")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            # a partial sub-section starts from this field's own default (e.g. grpo's sampler has temperature 1)
            default = fields[key].default_factory() if callable(fields[key].default_factory) else hint()
            if isinstance(value, dict):
                value = deep_merge(dataclasses.asdict(default), value)
            kwargs[key] = _section(hint, value, f"{prefix}.{key}")
        else:
            kwargs[key] = _as(value, hint, f"{prefix}.{key}")
    try:
        return cls(**kwargs)
    except ConfigError as e:  # __post_init__ names keys relative to its own section
        raise ConfigError(f"{prefix}.{e}") from None


def _as(value: Any, hint: Any, key: str) -> Any:
    """``value`` checked against the type ``hint`` (int, float, str, bool, tuple[X, ...], dict)."""
    origin = typing.get_origin(hint)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key} = {value!r}: must be a list")
        inner = typing.get_args(hint)[0]
        return tuple(_as(v, inner, key) for v in value)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} = {value!r}: must be a mapping")
        return dict(value)
    if origin in (typing.Union, types.UnionType) or hint is Any:
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key} = {value!r}: must be a number")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} = {value!r}: must be an integer")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} = {value!r}: must be true or false")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key} = {value!r}: must be a string")
        return value
    return value


def _check(ok: bool, key: str, value: Any, why: str) -> None:
    if not ok:
        raise ConfigError(f"{key} = {value!r}: {why}")


def _check_choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    _check(value in allowed, key, value, f"unknown value; choose one of {', '.join(allowed)}")
