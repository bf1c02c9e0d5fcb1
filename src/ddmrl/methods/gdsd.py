"""GDSD as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its definition
fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``; GDSD-TLC, its
released variant, is ``ddmrl.methods.gdsd_tlc`` (the release's second trainer).

GDSD (Guided Denoiser Self-Distillation; Tang et al. 2026, arXiv 2605.29398; GaryBall/GDSD
``gdsd/trainers/gdsd_trainer_batchll.py``) reads reverse-KL regularised RL, max E_pi[psi A] - KL(pi || pi_old)
- beta KL(pi || pi_ref), through its closed-form optimum pi* proportional to pi_old exp(psi A) (and the reference):
an advantage-guided teacher built from the model itself. Instead of an ELBO ratio, the denoiser is distilled
towards it: the student's log-ratio to the old denoiser on the same masked inputs, per token, is regressed onto
psi A, a normalisation-free (squared-error) match that needs no likelihood. Per optimiser step ``views_per_step``
Monte Carlo pairs (the release's num_mc) of ESPO's views (c ~ U{0..T} valid tokens masked, stratified over the rows,
and the complement); a pair's denoising log-likelihood is half the sum of every token's log-prob at the view masking
it (``ddmrl.objectives.gdsd.denoise_weights``), and the loss (``ddmrl.objectives.gdsd``)

    (1/N) sum_i sum_m (clip(l_theta - l_old, log(1 - eps), log(1 + eps_high)) / |y_i| - psi A_i)^2
    + beta (1/N) sum_i mean_m (l_theta - l_ref)^2 / (2 |y_i|)

with leave-one-out advantages. Its deviations from the release and their switches: docs/reproduction.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ddmrl.config._base import Bool, Float, Int, Str, refuse, section
from ddmrl.config.names import Advantages
from ddmrl.methods.base import Method
from ddmrl.methods.mixins import LossAfterEos


@section
class Params(LossAfterEos):
    """GDSD (Tang et al. 2026, GDSD: Reinforcement Learning as Guided Denoiser Self-Distillation for Diffusion
    Language Models, arXiv 2605.29398; GaryBall/GDSD): the student's clipped log-ratio to the old denoiser on
    views_per_step complementary pairs of ESPO's views per step (num_mc), per token, regressed onto psi A
    (squared error, summed over the pairs), plus beta times the k2 KL of the pairs' denoising log-likelihoods over
    |y|; leave-one-out advantages. Release recipe (scripts/train_gdsd.yaml): LLaDA-8B-Instruct with LoRA r 128,
    lr 3e-6, beta 1e-3 (reference synced every 64 steps), epsilon 4e-4 (the clip of the sequence log-ratio), psi 1,
    G 6, mu 8, num_mc 1, 256 tokens in 64 diffusion steps at temperature 1.0 (blocks of 32); GSM8K and MATH: psi 10,
    num_mc 2, lr 3e-6 / 1e-5, beta 1e-3 / 1e-4. ``gdsd_legacy`` reproduces the release's draws over every completion
    position (with loss_after_eos: docs/reproduction.md). ``coupling`` and ``loss_type`` do not apply."""

    method: Str = "gdsd"
    remasking: Literal["espo"] = "espo"
    views_per_step: Int = Field(1, ge=1, description="GDSD: Monte Carlo pairs of views per step (num_mc).")
    scale_rewards: Advantages = "leave_one_out"
    epsilon: Float = Field(
        4e-4,
        gt=0,
        lt=1,
        description="GDSD: the sequence log-ratio l_theta - l_old clipped to [log(1 - epsilon), log(1 + "
        "epsilon_high)] (the release's 4e-4).",
    )
    beta: Float = Field(1e-3, ge=0, description="GDSD: coefficient of the k2 KL of the denoising log-likelihoods.")
    psi: Float = Field(
        1.0,
        gt=0,
        description="GDSD: psi, the teacher's guidance scale: each token's log-ratio is matched to psi A (the "
        "release's psi: 1 in its base recipe, 10 for GSM8K and MATH).",
    )
    gdsd_legacy: Bool = Field(
        False,
        description="GDSD: the released code's mask draws (ESPO's forward_process: integer start, float32 rounding "
        "to even, every completion position; needs loss_after_eos).",
    )

    def _check_method(self) -> None:
        if self.legacy_micro_step_views:
            why = "d1's micro-step view index only applies to one view per step, not to GDSD's pairs"
            raise refuse("legacy_micro_step_views", True, why)
        if self.gdsd_legacy and not self.loss_after_eos:
            why = "reproduces the release, which masks and normalises over every completion position"
            raise refuse("gdsd_legacy", True, f"{why}: set loss_after_eos true")


class GDSD(Method):
    """``gdsd_legacy``: the release's own mask draws (``ddmrl.masking.views.espo_views``)."""

    def legacy_views(self, cfg: Any) -> bool:
        return bool(getattr(cfg, "gdsd_legacy", False))


# ESPO's pairs; l = half the sum of each token's log-prob at the view masking it; (clip(dl) / |y| - psi A)^2
# summed over the pairs; beta k2(l, l_ref) / |y|
METHOD = GDSD(
    name="gdsd",
    params=Params,
    display="GDSD",
    weighting="gdsd_denoise",
    objective="gdsd",
    paper="Tang et al. 2026, GDSD: Reinforcement Learning as Guided Denoiser Self-Distillation for Diffusion "
    "Language Models (arXiv 2605.29398)",
    switches=("loss_after_eos",),
)
