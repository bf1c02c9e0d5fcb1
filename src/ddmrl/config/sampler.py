"""The sampler section (a rollout's or an evaluation's) and the rollout stage's."""

from __future__ import annotations

import importlib
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from ddmrl.config._base import (
    Bool,
    Float,
    Int,
    Section,
    describe,
    refuse,
    section,
)
from ddmrl.config.names import SamplerName, adapter, described
from ddmrl.samplers import DEFAULT_SAMPLER, SAMPLERS, sampler_record


@section
class SamplerConfig(Section):
    """The reverse process (``ddmrl.samplers``): LLaDA's semi-autoregressive low-confidence sampler (Nie et al.
    2025), MaskGIT's cosine confidence sampler (Chang et al. 2022; MMaDA's ``t2i_generate``) or MaskGRPO's emerge
    (ancestral) sampler."""

    name: SamplerName = Field(
        DEFAULT_SAMPLER,
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
        record = sampler_record(self.name)
        if self.kv_cache != "none" and not record.kv_cache:
            raise refuse(
                "kv_cache",
                self.kv_cache,
                f"only the llada sampler has semi-autoregressive blocks to cache (name = {self.name!r}; the block "
                "sampler's exact cache is options.block.kv_cache)",
            )
        why = record.why or f"not an option of the {self.name} sampler"
        if self.parallel not in record.parallel:
            raise refuse("parallel", self.parallel, why)
        if self.cfg_scale and not record.guidance:
            raise refuse("cfg_scale", self.cfg_scale, why)
        if self.remasking not in record.remasking:
            raise refuse("remasking", self.remasking, why)
        if self.parallel != "none" and record.llada_keys and self.remasking != "low_confidence":
            raise refuse(
                "parallel", self.parallel, "ranks tokens by the model's confidence: it needs remasking: low_confidence"
            )
        options = {"remasking": self.remasking == "rcr", "schedule": self.schedule == "ass", "eoser": self.eoser}
        for key, on in options.items():
            if on and not record.llada_keys:
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
            if on and not record.llada_keys:
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
    """Each entry of ``options`` by the ``Params`` of its sampler's module (imported only for a named entry)."""
    for name, given in sampler.options.items():
        params = sampler_params(name)
        if params is None:
            where = "no such sampler" if name not in SAMPLERS else f"the {name} sampler has no options of its own"
            raise refuse(f"options.{name}", given, where)
        try:
            adapter(params).validate_python(given or {})
        except ValidationError as e:
            raise described(describe(e, params, f"options.{name}")) from None


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
