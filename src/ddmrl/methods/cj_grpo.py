"""CJ-GRPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from typing import Literal

from ddmrl.config._base import Bool, Str, section
from ddmrl.methods.base import Method
from ddmrl.methods.mixins import LossAfterEos


@section
class Params(LossAfterEos):
    """CJ-GRPO (Yang et al. 2025, arXiv 2509.23924; yjyddq/EOSER-ASS-RL): rollouts keep every state; the loss
    averages over the sampler steps the clipped token surrogate (plus beta k3 KL against the reference) over the
    tokens each step unmasked, with log-probs from the state before the step, so that optimisation follows the
    rollout's trajectory; meant with EOSER and ASS rollouts (sampler: schedule ass, eoser true). Paper and code
    (d1-based): LLaDA-8B-Instruct, lr 3e-6, beta 0.04, epsilon 0.5, G 6, mu 8 (Countdown, Sudoku) or 12 (GSM8K,
    MATH), mean-only advantages, 256 tokens, ASS log2 L = 8 steps, EOSER gamma 0.01 -> 1, LoRA r 128. Every
    transition trained, the EOS padding's included (loss_after_eos, as its release)."""

    method: Str = "cj_grpo"
    remasking: Literal["cj_grpo"] = "cj_grpo"
    loss_after_eos: Bool = True


# every stored step x_s -> x_{s+1}, token mean per step averaged over steps; EOSER + ASS rollouts
METHOD = Method(
    name="cj_grpo",
    params=Params,
    display="CJ-GRPO",
    weighting="masked_mean",
    paper="Yang et al. 2025, Taming Masked Diffusion Language Models via Consistency Trajectory RL with Fewer "
    "Decoding Steps (CJ-GRPO; arXiv 2509.23924)",
    switches=("loss_after_eos",),
)
