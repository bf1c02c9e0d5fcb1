"""RLDF as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its definition
fixes, its own keys) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``.

RLDF (Reinforcement Learning from Denoising Feedback; He et al. 2026, arXiv 2605.25638; ant-research/Drift, LLaDA
and Dream) trains a masked diffusion model on its own denoising trajectory: of each rollout's decoding steps it draws
k (``views_per_step``, the release's ``mask_num`` 4), favouring the steps whose tokens the sampler committed with the
least confidence (softmax of their mean surprisal, temperature 1), and scores the rollout at the very state each drawn
step started from (``ddmrl.masking.rldf``). The loss at a view (``ddmrl.objectives.rldf``) is the clipped token ratio
with a k3 KL over the view's masked tokens the policy already finds likely (p >= 0.6) plus the tokens of the view's
own step; the views' losses are averaged. Advantages: (r - mean) / max(std + 1e-8, 0.01).

Release recipe (configs/llada_math.yaml, llada_code, dream_math, dream_code): LLaDA-8B-Instruct or Dream-7B-Instruct,
8 prompts x 4 rollouts per rollout batch of which 4 groups are trained (groups with reward spread first), threshold
decoding (0.9) in blocks of 32 with a prefix cache, 256 tokens, temperature 1, lr 1e-6 constant, one optimiser step
per rollout batch (num_iterations 1: REINFORCE), epsilon 0.2, beta 0.01 (LLaDA) / 0.04 (Dream), k3 KL, loss_norm
token (LLaDA) / sample (Dream), sample_temperature 1, mask_num 4, low_prob_threshold 0.6, entropy_coeff 0. Its
deviations from the release and their switches: docs/reproduction.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ddmrl.config._base import Bool, Float, Int, Str, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.config.names import Advantages
from ddmrl.methods.base import Method

#: the release's epsilon in the advantages' std (its floor is ddmrl.objectives.rldf.STD_FLOOR)
ADVANTAGE_EPS = 1e-8


@section
class Params(GRPOConfig):
    """RLDF (He et al. 2026, arXiv 2605.25638; ant-research/Drift): views at k = views_per_step denoising steps of
    each rollout drawn by the surprisal of the tokens they committed, each view the state its step started from; the
    clipped token loss and k3 KL over the view's masked tokens of probability >= rldf_low_prob_threshold and the
    step's own tokens. Release: mask_num 4, low_prob_threshold 0.6, beta 0.01 (LLaDA), loss_norm token (LLaDA),
    std-floored z-scores (scale_rewards rldf). ``rldf_release_views``: the release's masks (of the positions after
    the first EOS, and none for a rollout decoded in one step)."""

    method: Str = "rldf"
    remasking: Literal["rldf"] = "rldf"
    views_per_step: Int = Field(4, ge=1, description="RLDF: the denoising steps drawn per rollout (mask_num).")
    scale_rewards: Advantages = Field(
        "rldf", description="Group advantages (ddmrl.objectives.ADVANTAGES); RLDF's: (r - mean) / max(std, 0.01)."
    )
    rldf_low_prob_threshold: Float = Field(
        0.6,
        ge=0,
        lt=1,
        description="RLDF: a view's masked tokens train only where the policy's probability is at least this (the "
        "view's own step's tokens always); 0: every masked token.",
    )
    rldf_release_views: Bool = Field(
        False,
        description="RLDF: the released code's masks, which number the steps of the valid tokens only: positions "
        "after the first EOS masked in the view of the first step and visible in the others (instead of masked "
        "while they were in the sampler's state), and no view of a rollout decoded in one step.",
    )


class Rldf(Method):
    """RLDF's record: the release's advantage epsilon and its view masks behind ``rldf_release_views``."""

    def advantage_eps(self, cfg: Any) -> float:
        return ADVANTAGE_EPS

    def legacy_views(self, cfg: Any) -> bool:
        return bool(getattr(cfg, "rldf_release_views", False))


# surprisal-drawn step views, masked valid tokens as candidates, the filtered clipped token loss
METHOD = Rldf(
    name="rldf",
    params=Params,
    display="RLDF",
    weighting="rldf",
    objective="rldf",
    paper="He et al. 2026, Reinforcement Learning from Denoising Feedback (RLDF; arXiv 2605.25638)",
)
