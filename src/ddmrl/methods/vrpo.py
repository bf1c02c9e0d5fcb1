"""VRPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its definition
fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``.

VRPO (Variance-Reduced Preference Optimization; LLaDA 1.5, Zhu et al. 2025, arXiv 2505.19223) is DPO for a masked
diffusion model, whose log-likelihoods are replaced by ELBO estimates (the paper's L_DPO-E):

  L(theta) = -E_(y_w, y_l) log sigma( beta (B_theta(y_w) - B_ref(y_w)) - beta (B_theta(y_l) - B_ref(y_l)) )

  B_pi(y) ~ (1/n_t) sum_{j=1..n_t} (1/n_yt) sum_{k=1..n_yt} l_pi(y_t^(k), t^(j), y | x),
  l_pi(y_t, t, y | x) = (1/t) sum_i 1[y_t^i = M] log p_pi(y^i | y_t, x)

with the paper's three variance reductions: a larger budget n = n_t n_yt; its optimal allocation n_t = n, n_yt = 1
(one mask per timestep: ``stratified`` views, ``views_per_step`` = n_t timesteps per optimiser step); antithetic
sampling, the same timesteps and masks for B_theta and B_ref (the loop evaluates the policy and the reference on the
same views). The timesteps are those of DARE's implementation (yjyddq/DARE, the reference, as the paper released no
training code): LLaDA's discrete form, l masked tokens of the |y| valid ones with weight |y| / l, the n_t counts
stratified from one uniform start (``ddmrl.masking.views.stratified_counts``). Online here: the preference pairs
are each group's best and worst rollout by the task reward (``ddmrl.objectives.vrpo.preference_pairs``; groups of
equal rewards give none), where DARE trains on a fixed preference data set (UltraFeedback).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ddmrl.config._base import Int, Str, refuse, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """VRPO (LLaDA 1.5; Zhu et al. 2025, arXiv 2505.19223; DARE's implementation, yjyddq/DARE
    ``llada_dp_actor_vrpo.py``): DPO on ELBO estimates of each group's best and worst rollout (by reward; groups of
    equal rewards give no pair), with views_per_step timesteps and one mask each per ELBO (optimal allocation),
    the policy's and the reference's ELBOs on the same masks (antithetic sampling); beta is DPO's beta (> 0), the
    reference the frozen one (kl_target ref). Every rollout is sampled and evaluated; only the pairs' rows enter
    the loss. DARE's recipe (run_vrpo_llada_8b_instruct.sh; offline UltraFeedback pairs): LLaDA-8B-Instruct,
    lr 5e-7, weight decay 0.01, batches of 64 pairs in mini-batches of 32, mc_num = n_l = 4 (4 timesteps, one mask
    each), beta 0.2 on ELBOs divided by the 512-token response length (ddmrl's beta 0.2 / 512 on the sequence ELBO:
    docs/reproduction.md), 512 prompt and 512 response tokens, 10 epochs. ``coupling`` does not apply (each
    timestep's mask is drawn on its own)."""

    method: Str = "vrpo"
    remasking: Literal["stratified"] = "stratified"
    kl_target: Literal["ref"] = "ref"
    views_per_step: Int = Field(4, ge=1)

    def _check_method(self) -> None:
        if self.beta <= 0:
            raise refuse("beta", self.beta, "VRPO's DPO beta must be > 0 (the loss is flat at beta 0)")
        if self.legacy_micro_step_views:
            raise refuse("legacy_micro_step_views", True, "VRPO's ELBO uses every view of its step")


# n_t = 4 stratified timesteps, one mask each, shared by policy and reference; DPO on each group's best vs worst
METHOD = Method(
    name="vrpo",
    params=Params,
    display="VRPO",
    weighting="vrpo_elbo",
    objective="vrpo",
    paper="Zhu et al. 2025, LLaDA 1.5: Variance-Reduced Preference Optimization for Large Language Diffusion Models "
    "(VRPO; arXiv 2505.19223)",
)
