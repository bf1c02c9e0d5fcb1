"""The GRPO sections: every knob of the loop and the methods, an auxiliary policy, a method section (validated
by its method's ``Params``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, WrapValidator, model_validator
from pydantic_core import PydanticCustomError

from ddmrl.aux_policies import AUX_POLICIES
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
from ddmrl.config.names import DEFAULT_TRACKERS, SWITCHES, Advantages, Registered, SectionName, Seeds, Tracker, adapter
from ddmrl.config.sampler import SamplerConfig
from ddmrl.config.scale import GradientCheckpointing, LaunchConfig, LoraConfig, MixedPrecision, check_scale
from ddmrl.masking import VIEWS, view_sampler
from ddmrl.methods import METHODS

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
