"""EBPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its definition
fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``.

EBPO (ELBO-based block policy optimisation; LLaDA2.1, arXiv 2602.08676) was written for block-diffusion models
(LLaDA2.x, SDAR); no official code is public, and ddmrl follows yjyddq/DARE's implementation
(``_forward_process_ebpo``, ``compute_ebpo_composite_elbo``, ``compute_policy_loss_ebpo``). The completion's
log-likelihood is a composite ELBO, the mean over M Monte Carlo timesteps of the sum over its blocks of each block's
ELBO given the blocks before it:

    L_theta(y) = (1/M) sum_m sum_b sum_{k in block b, masked at (m, b)} log p_theta(y_k | y_<b, block b noised) / p_mb

with c_mb ~ U{1..l_b} of block b's l_b tokens masked (p_mb = c_mb / l_b; the (m, b) cells of a completion
stratified), and PPO once on rho = exp(L_theta - L_old) (Eq. 4-5; no length normalisation), plus beta k3 of the
composite ELBOs. On a full-sequence model ddmrl builds one view per (m, b): the earlier blocks clean and every later
position masked, the state its semi-AR sampler decodes block b from (``ddmrl.masking.views.ebpo_views``); a
block-diffusion model hides the later blocks by its attention instead.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ddmrl.config._base import Int, Str, refuse, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """EBPO (LLaDA2.1, arXiv 2602.08676; yjyddq/DARE's implementation, no official code): the sequence ratio of a
    composite block ELBO (views_per_step Monte Carlo timesteps, DARE's mc_num, each one view per block of the
    sampler's block_length: earlier blocks clean, c ~ U{1..l_b} of the block masked, later positions masked), not
    normalised by the length, clipped in the log domain, plus beta k3 of the composite ELBOs. DARE's recipes (SDAR
    1.7B-8B chat, LLaDA2-mini): lr 5e-7, mc_num 16, blocks of 4 (SDAR) matching the rollout's, no KL, one PPO epoch.
    Tested here on the tiny full-sequence model with the block partition of its semi-AR sampler; ``coupling`` does
    not apply."""

    method: Str = "ebpo"
    remasking: Literal["ebpo_blocks"] = "ebpo_blocks"
    views_per_step: Int = Field(1, ge=1, description="EBPO: Monte Carlo timesteps per step (DARE's mc_num).")

    def _check_method(self) -> None:
        if self.legacy_micro_step_views:
            why = "d1's micro-step view index only applies to one view per step, not to ebpo's block views"
            raise refuse("legacy_micro_step_views", True, why)


# per step: M timesteps x one view per block (earlier blocks clean, c ~ U{1..l_b} of the block, later masked);
# composite ELBO = (1/M) sum of the blocks' sum_k log p / p_mask; exp(dELBO) clipped in the log domain; beta k3
METHOD = Method(
    name="ebpo",
    params=Params,
    display="EBPO",
    weighting="ebpo_elbo",
    objective="ebpo_clip",
    paper="LLaDA2.1 technical report (arXiv 2602.08676): EBPO, as implemented in yjyddq/DARE",
)
