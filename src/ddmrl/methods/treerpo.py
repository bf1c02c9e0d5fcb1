"""d-TreeRPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``.

d-TreeRPO (Pan et al. 2025, arXiv 2512.09675; THU-BPM/d-TreeRPO ``dtreerpo/dtreerpo_trainer.py``, transcribed in
DARE as ``verl/trainer/ppo/dtreerpo_algos.py``) samples each prompt's rollouts as a tree: the fully masked root is
continued ``num_tree_samples`` times to sampler step N / s, each state reached there ``tree_branch_factor`` times to
2 N / s, ..., to the end (s = ``tree_contraction_factor`` depths, N the sampler's steps;
``ddmrl.rollout.tree_rollout``, the llada sampler resuming each copy of a partial state). The leaves' rewards
propagate bottom-up, V(node) = the mean of its children's values, and the edge into node n is credited with

    A(n) = V(n) - mean_{m in siblings(n), m != n} V(m)                          (``objectives.advantages``)

Each edge (parent state x_p -> child state x_c) is an action: its log-probability is the one-step factorised
p_theta(x_c | x_p) = prod_{k: x_p^k masked, x_c^k not} p_theta(x_c^k | x_p) from one forward pass of x_p
(``masking.views.tree_views``), and the loss (``objectives.tree_clip``) is

    L = - mean_e (1 / |M_e|) sum_{k in M_e} [min(rho_k A_e, clip(rho_k, 1 -/+ eps) A_e) - beta k3_k]
        + lambda(t) mean_{(g, k)} KL(q_{g,k} || p_theta(. | x_p)_k),

rho_k = p_theta / p_old of the child's token k, the self-distillation term pulling the parent's prediction at each
position towards the tokens its children of positive advantage revealed there, weighted by softmax(A / tau(t)),
with lambda(t) = lambda_max (e^{gamma t/T} - 1) / (e^gamma - 1) rising and tau(t) = tau_max (1 - t/T)^beta_sd falling
over the run's T optimiser steps.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ddmrl.config._base import Float, Int, Str, refuse, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """d-TreeRPO (Pan et al. 2025, d-TreeRPO: Towards More Reliable Policy Optimization for Diffusion Language
    Models, arXiv 2512.09675; THU-BPM/d-TreeRPO): rollouts sampled as a tree (num_tree_samples children of the root,
    tree_branch_factor of every later node, tree_contraction_factor depths over the sampler's steps; num_generations
    = its leaves, so num_tree_samples follows from it by default), per-edge advantages (a node's mean leaf reward
    against its siblings'), the clipped token ratio of each edge's one-step transition with beta k3 KL, and the
    time-scheduled self-distillation loss. Release recipe
    (slurm_scripts/dtreerpo.yaml): LLaDA-8B-Instruct with LoRA r 128, lr 3e-5, beta 0.01, epsilon 0.4, mu 12,
    T 4, s 2, 4 trees (G 16 leaves) per prompt, 256 tokens in 128 steps (blocks of 32), lambda_max 3e-3, gamma 2,
    tau_max 2, beta_sd 0.7 over 30000 steps (docs/reproduction.md)."""

    method: Str = "treerpo"
    remasking: Literal["tree"] = "tree"
    tree_branch_factor: Int = Field(4, ge=1, description="d-TreeRPO: T, children of every node below the root.")
    tree_contraction_factor: Int = Field(2, ge=1, description="d-TreeRPO: s, the tree's depths (branching at N/s).")
    num_tree_samples: Int = Field(
        0, ge=0, description="d-TreeRPO: children of the root; 0: num_generations / tree_branch_factor^(s - 1)."
    )
    sd_lambda_max: Float = Field(3e-3, ge=0, description="d-TreeRPO: the self-distillation weight at the end.")
    sd_gamma: Float = Field(2.0, gt=0, description="d-TreeRPO: the growth rate of the self-distillation weight.")
    sd_tau_max: Float = Field(2.0, gt=0, description="d-TreeRPO: the softmax temperature of A at the start.")
    sd_beta: Float = Field(0.7, ge=0, description="d-TreeRPO: the exponent of the temperature's decay.")

    def _check_method(self) -> None:
        below = self.tree_branch_factor ** (self.tree_contraction_factor - 1)  # the leaves under a root child
        if self.num_generations % below or self.num_tree_samples not in (0, self.num_generations // below):
            why = "the tree's leaves, num_tree_samples x tree_branch_factor^(tree_contraction_factor - 1)"
            raise refuse("num_generations", self.num_generations, f"must be {why} (= {below} x the root's children)")
        lone = "a node's only child has no sibling to be credited against (the release credits it its raw value)"
        if self.tree_contraction_factor > 1 and self.tree_branch_factor < 2:
            raise refuse("tree_branch_factor", self.tree_branch_factor, f"must be >= 2: {lone}")
        if self.num_generations // below < 2:
            raise refuse("num_generations", self.num_generations, f"must give the root >= 2 children: {lone}")
        s, why = self.sampler, "the tree resumes partial states of the plain llada sampler"
        for key, want in {"name": "llada", "kv_cache": "none", "parallel": "none", "schedule": "linear"}.items():
            if getattr(s, key) != want:
                raise refuse(f"sampler.{key}", getattr(s, key), f"{why} ({key} {want})")
        if s.remasking == "rcr":
            raise refuse("sampler.remasking", s.remasking, f"{why}: rcr re-masks earlier tokens")
        if self.aux_policy.kind != "none":
            raise refuse("aux_policy.kind", self.aux_policy.kind, f"{why}: no unmasking or schedule policy")


class TreeRPO(Method):
    """The rollouts are a tree (``ddmrl.rollout.rollout``'s ``branching``)."""

    def rollout_options(self, cfg: Any) -> dict[str, Any]:
        depth, width = cfg.tree_contraction_factor, cfg.tree_branch_factor
        roots = cfg.num_tree_samples or cfg.num_generations // width ** (depth - 1)
        return {"branching": (roots,) + (width,) * (depth - 1)}


# a tree of rollouts; each edge's one-step transition from its parent state; A = V(node) - mean V(siblings);
# clipped token ratio per edge + beta k3 + lambda(t) self-distillation
METHOD = TreeRPO(
    name="treerpo",
    params=Params,
    display="d-TreeRPO",
    weighting="masked_mean",
    objective="tree_clip",
    view_advantage="tree",
    paper="Pan et al. 2025, d-TreeRPO: Towards More Reliable Policy Optimization for Diffusion Language Models "
    "(arXiv 2512.09675)",
)
