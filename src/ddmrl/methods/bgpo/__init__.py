"""BGPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its definition
fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``.

BGPO (Lin, Zhang, Hou, Li 2025, Boundary-Guided Policy Optimization for Memory-efficient RL of Diffusion Large
Language Models, ACL 2026, arXiv 2510.11683; THU-KEG/BGPO, carried by DARE as ``*_dp_actor_bgpo.py``). The
ELBO-based objective of a rollout o with advantage A is A exp(ELBO_theta(o) - ELBO_old(o)) (clipped), the ELBO a
mean of m one-sample Monte Carlo estimates l_j = (T / x_j) sum_{k masked in j} log p_theta(o_k | o_masked_j) / L
(view j masks x_j of the T valid completion tokens, stratified counts; L the completion length). Its gradient
needs all m views' graphs at once. BGPO maximises instead the lower bound

    J_BGPO = (1/m) sum_j  A r_j,   r_j = 1 + (l_j - l_j_old)   if A > 0     (e^x >= 1 + x)
                                   r_j = exp(l_j - l_j_old)     if A <= 0    (Jensen: e^{mean x} <= mean e^x)

(each r_j PPO-clipped), linear in the views: each view's gradient is taken and freed on its own and accumulated,
so memory does not grow with m; on policy it equals the ELBO objective in value and gradient. Views ``stratified``;
its weighting and objective are its own (``ddmrl.methods.bgpo.objective``), named by where they live: BGPO is this
package and its line in ``METHODS``.

Release recipe (DARE ``recipe/llada/run_bgpo_llada_8b_instruct.sh``): LLaDA-8B-Instruct, lr 5e-7, weight decay 0.01,
G 8, 16 prompts per step, one optimiser step per rollout batch, mc_num = n_l = 16 views, epsilon 0.2, dual clip 3,
no KL, token-mean loss, temperature 0.6, 512 tokens in 256 steps with blocks of 32. Deviations: docs/reproduction.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ddmrl.config._base import Float, Int, Str, refuse, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.config.names import ViewSampler
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """BGPO (Lin et al. 2025, arXiv 2510.11683): per optimiser step views_per_step views (the paper's MC samples,
    16 in its recipes) masking stratified counts x_j of the valid completion tokens; per view the sequence ratio of
    its one-sample ELBO bounded linearly (A > 0: 1 + Delta) or by Jensen (A <= 0: exp Delta), PPO-clipped; the mean
    over views, so each view's gradient is taken on its own (constant memory in views_per_step). No KL (beta 0, as
    its recipes). ``dual_clip``: the release's dual clip (3.0), off by default."""

    method: Str = "bgpo"
    remasking: ViewSampler = "stratified"
    views_per_step: Int = Field(16, ge=1)
    beta: Literal[0.0] = 0.0
    dual_clip: Float = Field(
        0.0,
        ge=0,
        description="BGPO: verl's dual clip, the objective of a negative advantage at least c A (the release's "
        "clip_ratio_c: 3.0); 0: none (the paper's PPO clip).",
    )

    def _check_method(self) -> None:
        if self.dual_clip and self.dual_clip <= 1:
            raise refuse("dual_clip", self.dual_clip, "the dual clip's bound c must exceed 1 (verl's clip_ratio_c)")


class BGPO(Method):
    """Its objective is a mean of one term per view: the loop takes each view's gradient on its own."""

    def separable_views(self, cfg: Any) -> bool:
        return True


# stratified mask counts, views_per_step views per step; per view 1 + Delta (A > 0) or exp(Delta) (A <= 0) of its
# one-sample ELBO, clipped, averaged over the views (one backward pass each); no KL
METHOD = BGPO(
    name="bgpo",
    params=Params,
    display="BGPO",
    weighting="ddmrl.methods.bgpo.objective:bgpo_elbo_weights",
    objective="ddmrl.methods.bgpo.objective:bgpo",
    paper="Lin et al. 2025, Boundary-Guided Policy Optimization for Memory-efficient RL of Diffusion Large Language "
    "Models (BGPO; ACL 2026, arXiv 2510.11683)",
    switches=("dual_clip",),
)
