"""The GRPO sections: every knob of the loop and the methods, an auxiliary policy, a method section (validated
by its method's ``Params``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, WrapValidator, model_validator
from pydantic_core import PydanticCustomError

from ddmrl.aux_policies import AUX_POLICIES, aux_policy_kind
from ddmrl.config._base import (
    DESCRIBED,
    Bool,
    Float,
    Int,
    Section,
    Str,
    describe,
    refuse,
    section,
)
from ddmrl.config.names import DEFAULT_TRACKERS, Advantages, Registered, SectionName, Seeds, Tracker, adapter
from ddmrl.config.sampler import SamplerConfig
from ddmrl.config.scale import GradientCheckpointing, LaunchConfig, LoraConfig, MixedPrecision, check_scale
from ddmrl.masking import VIEWS, view_sampler
from ddmrl.methods import DEFAULT_RUNS, METHODS
from ddmrl.objectives import DEFAULT_ADVANTAGES
from ddmrl.samplers import sampler_record

# ------------------------------------------------------------------------------------------------ GRPO

ViewOrDefault = Annotated[Str, WrapValidator(Registered(VIEWS, extra=("",)))]  # "": the method's own
_OFF = "none"  # the value of a key that turns its feature off (aux_policy.kind, sampler.kv_cache, sampler.parallel)
#: an auxiliary policy of ``ddmrl.aux_policies.AUX_POLICIES``, or none
AuxKind = Annotated[Str, WrapValidator(Registered(AUX_POLICIES, extra=(_OFF,)))]
ScheduleAction = Literal["ratio", "temperature", "cfg"]


@section
class AuxPolicyConfig(Section):
    """An auxiliary policy (``ddmrl.aux_policies``): a second trainable module whose actions the rollout sampler
    draws and records, trained by GRPO on their log-probabilities (a clipped ratio per step) beside the model's
    objective, with its own learning rate, and saved with the model (``<model>/aux_policy/``). ``schedule``:
    Co-GRPO's schedule policy for the maskgit sampler; ``unmasking``: a learned unmasking policy for the llada
    sampler (docs/aux_policies.md)."""

    kind: AuxKind = Field(
        _OFF, description="none, schedule (Co-GRPO; sampler maskgit) or unmasking (learned unmasking; llada)."
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
        DEFAULT_ADVANTAGES,
        description="Advantages (ddmrl.objectives.ADVANTAGES): group: z-score within a group; none: mean "
        "only (d1's code); population: the z-score with the population std and no epsilon (DiPO's release); "
        "leave_one_out: r minus the mean of the group's other rewards (GDSD's release).",
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
    remasking: ViewOrDefault = Field(
        "", description="View sampler (ddmrl.masking.VIEWS): how training views are built; empty: the method's own."
    )
    coupling: Literal["independent", "nested", "trajectory"] = Field(
        "independent",
        description="How the ratio-based view samplers couple a rollout's views: independent masks, nested masks "
        "(one uniform per position), or the sampler's own reveal order.",
    )
    views_per_step: Int = Field(
        2,
        ge=1,
        description="SPG: masks averaged per step (num_t); GDPO: Gauss-Legendre nodes; VRPO: timesteps of each ELBO "
        "(n_t, one mask each); ESPO: Monte Carlo samples of the ELBO (num_mc), a complementary pair of views each; "
        "EBPO: Monte Carlo timesteps (mc_num), a view per block each.",
    )
    legacy_micro_step_views: Bool = Field(
        False, description="Reproduce d1's view index taken from the micro-step counter (with gradient accumulation)."
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
        check_scale(self)
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
        if views:
            _check_views(self, views)
        self._check_method()
        return self

    def _check_method(self) -> None:
        """A method's own checks (its model overrides this)."""


def _check_views(cfg: GRPOConfig, views: str) -> None:
    """What view sampler ``views`` asks of the run (its record's traits, ``ddmrl.masking.ViewSampler``): the keys it
    reads, on the section's model; the plain rollout sampler when it reads the sampler's states; a method with
    per-step advantages when it ranks steps by them."""
    record = view_sampler(views)
    missing = [key for key in record.keys if key not in type(cfg).__pydantic_fields__]
    if missing:
        owner = f"{cfg.method}'s section" if cfg.method else "this section"
        why = f"reads {', '.join(missing)}, which {owner} does not have (a key of the methods that use these views)"
        raise refuse("remasking", views, why)
    if record.states:
        why = f"{views} views are the sampler's stored states: they need the plain llada sampler (kv_cache none, "
        if not sampler_record(cfg.sampler.name).states:
            raise refuse("sampler.name", cfg.sampler.name, f"{why}parallel none)")
        for key in ("kv_cache", "parallel"):
            if getattr(cfg.sampler, key) != _OFF:
                raise refuse(f"sampler.{key}", getattr(cfg.sampler, key), f"{why}parallel none)")
    method = METHODS[cfg.method] if cfg.method in METHODS else None  # a bare GRPOConfig or grpo: names none
    if record.step_advantages and (method is None or not method.step_advantage):
        raise refuse("remasking", views, "ranks the steps by per-step advantages: a method with step_advantage")


def _check_aux(cfg: GRPOConfig) -> None:
    """What the auxiliary policy asks of the run (its record's traits, ``ddmrl.aux_policies.AuxPolicyKind``)."""
    aux, sampler = cfg.aux_policy, cfg.sampler
    if aux.kind == _OFF:
        if aux.freeze_model:
            raise refuse("aux_policy.freeze_model", True, "with no auxiliary policy nothing would be trained")
        if aux.speed_alpha:
            raise refuse("aux_policy.speed_alpha", aux.speed_alpha, "counts an auxiliary policy's steps: set its kind")
        return
    if aux.freeze_model and cfg.lora.r:
        raise refuse("lora.r", cfg.lora.r, "the model is frozen (aux_policy.freeze_model): no adapters to train")
    kind = aux_policy_kind(aux.kind)
    if kind.sampler and sampler.name != kind.sampler:
        raise refuse("sampler.name", sampler.name, f"the {aux.kind} policy drives the {kind.sampler} sampler: use it")
    if kind.actions:
        if "cfg" in aux.actions and not sampler.cfg_scale:
            raise refuse("aux_policy.actions", list(aux.actions), "its cfg scales sampler.cfg_scale: set it > 0")
        if "temperature" in aux.actions and not sampler.temperature:
            why = "its temperature scales sampler.temperature: set it > 0"
            raise refuse("aux_policy.actions", list(aux.actions), why)
    if kind.plain:
        for key in ("kv_cache", "parallel"):
            if getattr(sampler, key) != _OFF:
                raise refuse(f"sampler.{key}", getattr(sampler, key), f"the {aux.kind} policy replaces it: use none")
    if kind.heads:
        if aux.hidden_size % aux.num_heads or (aux.hidden_size // aux.num_heads) % 2:
            raise refuse(
                "aux_policy.hidden_size", aux.hidden_size, f"must split into num_heads = {aux.num_heads} even widths"
            )


@section
class GRPOSection(GRPOConfig):
    """``grpo:``: which runs exist, and the hyperparameters every method section starts from (shared, so that
    methods are compared on equal terms; a method section may override any of them)."""

    methods: tuple[SectionName, ...] = Field(
        DEFAULT_RUNS,
        description="Runs to train: sections of methods: (a section's method defaults to its name).",
    )
    seeds: Seeds = Field(
        (0,), description="Seeds per run (the tables' 95 % intervals are then over seeds as well as held-out items)."
    )

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


def _method_section(value: Any, handler: Any) -> Any:
    """A resolved method section, validated by its method's model (``Params`` in its ``ddmrl.methods`` module);
    a problem is described as that model describes it, below the section's key."""
    method = value.get("method") if isinstance(value, dict) else None
    if not isinstance(method, str) or method not in METHODS:
        return handler(value)
    params = METHODS[method].params
    try:
        return adapter(params).validate_python(value)
    except ValidationError as e:
        raise PydanticCustomError(DESCRIBED, "{text}", {"text": describe(e, params)}) from None


MethodSection = Annotated[GRPOConfig, WrapValidator(_method_section)]
