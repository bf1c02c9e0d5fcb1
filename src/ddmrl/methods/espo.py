"""ESPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its definition
fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``.

ESPO (Ou et al. 2025, arXiv 2512.03759; ML-GSAI/ESPO) treats the whole completion y as one action and takes the
ELBO of the masked diffusion model as its log-likelihood:

    L_theta(y) = E_{c ~ U{0..T}} E_{M: c of the T tokens} [ sum_{k in M} log p_theta(y_k | y_M, x) / (c / (T + 1)) ]

(LLaDA's ELBO in its discrete-count form: weight (T + 1) / c on each of the c masked tokens, c = 0 contributing 0).
It is estimated per optimiser step from ``views_per_step`` Monte Carlo samples (the release's num_mc), each a
complementary pair (M, its complement among the valid tokens: the release's ``reduce_var``), the counts of the rows
stratified (``ddmrl.masking.views.espo_views``, weights ``espo_elbo``); the same views give L_theta, L_old and
L_ref. The objective (``ddmrl.objectives.espo``) is the clipped sequence ratio normalised per token,

    rho_i = exp((L_theta(y_i) - L_old(y_i)) / |y_i|),
    J = (1/N) sum_i min(rho_i A_i, clip(rho_i, 1 - eps, 1 + eps_high) A_i)
        - beta (1/N) sum_i (L_theta(y_i) - L_ref(y_i))^2 / (2 |y_i|),

k2 on the ELBOs (the paper's robust KL), |y_i| the valid completion length.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ddmrl.config._base import Bool, Int, Str, refuse, section
from ddmrl.methods.base import Method
from ddmrl.methods.mixins import LossAfterEos


@section
class Params(LossAfterEos):
    """ESPO (Ou et al. 2025, Principled RL for Diffusion LLMs Emerges from a Sequence-Level Perspective, ICLR 2026,
    arXiv 2512.03759; ML-GSAI/ESPO): the sequence ratio exp((ELBO_theta - ELBO_old) / |y|) of a coupled,
    stratified Monte Carlo ELBO (views_per_step complementary pairs per optimiser step, its num_mc), clipped, with
    beta times the k2 KL of the ELBOs over |y| against the reference. Release recipe (recipes/train.yaml):
    LLaDA-8B-Instruct with LoRA r 128, lr 1e-6, beta 0.01 (reference synced every 64 steps), epsilon 0.2, G 10,
    mu 2, num_mc 1, leave-one-out advantages without std scaling, 256 tokens in 256 diffusion steps at temperature
    1.0 (blocks of 32); its Countdown script: mu 8, num_mc 2, G 6, beta 3e-3, lr 3e-6. ``espo_legacy`` reproduces
    the release's draws over every completion position (with loss_after_eos: docs/reproduction.md). ``coupling`` does
    not apply (the pair is its own coupling)."""

    method: Str = "espo"
    remasking: Literal["espo"] = "espo"
    views_per_step: Int = Field(1, ge=1, description="ESPO: Monte Carlo samples of the ELBO per step (num_mc).")
    scale_rewards: Literal["group", "none"] = "none"
    espo_legacy: Bool = Field(
        False,
        description="ESPO: the released code's mask draws (its forward_process: integer start, float32 rounding "
        "to even, every completion position; needs loss_after_eos).",
    )

    def _check_method(self) -> None:
        if self.legacy_micro_step_views:
            why = "d1's micro-step view index only applies to one view per step, not to espo's pairs"
            raise refuse("legacy_micro_step_views", True, why)
        if self.espo_legacy and not self.loss_after_eos:
            why = "reproduces the release, which masks and normalises over every completion position"
            raise refuse("espo_legacy", True, f"{why}: set loss_after_eos true")


class ESPO(Method):
    """``espo_legacy``: the release's own mask draws (``ddmrl.masking.views.espo_views``)."""

    def legacy_views(self, cfg: Any) -> bool:
        return bool(getattr(cfg, "espo_legacy", False))


# c ~ U{0..T} stratified over the rows, M and its complement; ELBO = mean of sum_M log p (T + 1) / c; the ratio
# exp(dELBO / |y|) clipped; beta k2(ELBO, ELBO_ref) / |y|
METHOD = ESPO(
    name="espo",
    params=Params,
    display="ESPO",
    weighting="espo_elbo",
    objective="espo_clip",
    paper="Ou et al. 2025, Principled RL for Diffusion LLMs Emerges from a Sequence-Level Perspective (ESPO; "
    "ICLR 2026, arXiv 2512.03759)",
    switches=("loss_after_eos",),
)
