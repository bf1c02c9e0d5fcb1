"""MDPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ddmrl.config._base import Bool, Int, Str, section
from ddmrl.methods.base import Method
from ddmrl.methods.mixins import LossAfterEos


@section
class Params(LossAfterEos):
    """MDPO (He et al. 2025, arXiv 2508.13148; autonomousvision/mdpo): rollouts keep every step's state and full
    prediction x̂_0^(s); each prediction is rewarded; per-step advantages (its code's adv-v4: the step's reward gain
    + 1 + the mean reward of the later predictions, z-scored per step over the group); the sample_train_steps steps
    of largest |advantage| are trained, input x_s, targets x̂_0^(s), weighted by L/|M| and the sampler's confidence;
    k2 KL. Paper and code: LLaDA-8B-Instruct, lr 1e-5 (demo config) or 7e-7 (README), temperature 0.1-0.4, 128
    steps, 512 tokens in one block, G 4, sample_train_steps 8-16, beta 0 (config) or 0.02 (README), one update per
    rollout batch. Optional: running-confidence remasking in the rollouts (sampler.remasking: rcr). As its release, by
    default: every masked position a target, EOS padding included (loss_after_eos), and the rollouts' ranking and
    confidence weights the tempered probability (mdpo_tempered_confidence); docs/reproduction.md."""

    method: Str = "mdpo"
    remasking: Literal["mdpo_topk"] = "mdpo_topk"
    loss_type: Literal["token_mean", "seq_mean"] = "seq_mean"
    loss_after_eos: Bool = True
    mdpo_tempered_confidence: Bool = Field(
        True,
        description="Its rollouts rank and weight by the tempered probability softmax(logits / temperature) of each "
        "proposal (its release's sampler); false: the untempered one (LLaDA's).",
    )
    sample_train_steps: Int = Field(
        8,
        ge=1,
        description="Sampler steps trained per rollout, those of largest absolute per-step advantage (its "
        "sample_train_steps), spread over the num_iterations optimiser steps.",
    )


class MDPO(Method):
    """The rollouts rank, re-mask and weight by the tempered probability softmax(logits / T) when
    ``mdpo_tempered_confidence`` (its release's sampler)."""

    def rollout_options(self, cfg: Any) -> dict[str, Any]:
        return {"tempered_confidence": cfg.mdpo_tempered_confidence}


# per-step rewards of each step's prediction, adv-v4, top-K steps, L/|M| x confidence, k2 KL
METHOD = MDPO(
    name="mdpo",
    params=Params,
    display="MDPO",
    weighting="mdpo_confidence",
    objective="mdpo",
    step_advantage="mdpo",
    paper="He et al. 2025, MDPO: Overcoming the Training-Inference Divide of Masked Diffusion Language Models "
    "(arXiv 2508.13148)",
    switches=("loss_after_eos", "mdpo_tempered_confidence"),
)
