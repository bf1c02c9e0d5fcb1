"""One small record per RL method: which view sampler, token weighting and advantage it uses.

A method is a choice in each row of algorithms.md Part C (sampler, view sampler, likelihood estimator, token
weighting, objective, advantage, regulariser). Here the sampler (LLaDA semi-AR), the likelihood (one-step
token log-probabilities of a view) and the objective (token-level clipped ratio + k3 KL) are shared; the
records name the rest. ``defaults`` hold only the method-defining choices (views, gamma, rebalancing mode);
shared knobs (epsilon, beta, learning rate, advantage scaling) come from ``grpo:`` so that methods are compared
on equal terms. The papers' own values for those are set by the paper profiles, with their sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


@dataclass(frozen=True)
class Method:
    """A GRPO-family method for masked diffusion models.

    Attributes:
        name: registry key.
        remasking: key in ``ddmrl.masking.VIEWS``: how the training views of a rollout are built.
        weighting: key in ``ddmrl.objectives.WEIGHTINGS``: per-(view, token) loss weights.
        objective: key in ``ddmrl.objectives.OBJECTIVES``: the loss of one optimiser step.
        paper: citation for the docs and tables.
        defaults: method-defining hyperparameters, overridable in params.yaml.
        fixed: values the method's definition requires (a method section contradicting them is refused).
    """

    name: str
    remasking: str
    weighting: str
    paper: str
    objective: str = "token_clip"
    defaults: dict[str, Any] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)

    def validate(self, cfg: GRPOConfig, key: str) -> None:
        """Refuse combinations that contradict the method (raises ConfigError naming ``key``)."""
        from ddmrl.config import ConfigError

        for k, v in self.fixed.items():
            if getattr(cfg, k) != v:
                raise ConfigError(f"{key}.{k} = {getattr(cfg, k)!r}: {self.name} requires {v!r} by definition")
        from ddmrl.masking import VIEWS

        remasking = cfg.remasking or self.remasking
        if remasking not in VIEWS:
            raise ConfigError(
                f"{key}.remasking = {remasking!r}: unknown view sampler; choose one of {', '.join(VIEWS)}"
            )
        if cfg.legacy_micro_step_views and (remasking in ("tracerl", "gdpo_quadrature", "block_random")):
            raise ConfigError(
                f"{key}.legacy_micro_step_views = True: d1's micro-step view index only applies to one view per "
                f"step, not to {remasking}"
            )
        if self.weighting == "rebrl" and remasking == "full_completion":
            raise ConfigError(
                f"{key}.remasking = 'full_completion': RebRL's 1/F rebalancing is a no-op on fully masked views "
                "(algorithms.md A.3 (c)); use rebrl_linear, unigrpo or maskgrpo_fading"
            )
        if remasking == "maskgrpo_fading" and cfg.coupling == "trajectory":
            raise ConfigError(
                f"{key}.coupling = 'trajectory': AR-like fading has its own position-wise curve; "
                "use independent or nested"
            )
        if remasking == "maskgrpo_fading" and cfg.gamma < 0.5:
            raise ConfigError(
                f"{key}.gamma = {cfg.gamma!r}: AR-like fading needs gamma >= 0.5 (its keep curve saturates below "
                "a mask ratio of 0.5; maskgrpo.md section 4)"
            )


METHODS: dict[str, Method] = {
    "diffu_grpo": Method(
        name="diffu_grpo",
        remasking="full_completion",
        weighting="completion_mean",
        paper="Zhao et al. 2025, d1: Scaling Reasoning in Diffusion LLMs via RL (arXiv 2504.12216)",
        # d1: prompt masked with p = 0.15, whole completion masked (paper runs: eps 0.5, beta 0.04, mu 12)
        defaults={"p_mask_prompt": 0.15},
    ),
    "unigrpo": Method(
        name="unigrpo",
        remasking="unigrpo",
        weighting="masked_mean",
        paper="Yang et al. 2025, MMaDA (arXiv 2505.15809), UniGRPO, Algorithm 1",
    ),
    "maskgrpo": Method(
        name="maskgrpo",
        remasking="maskgrpo_fading",
        weighting="masked_mean",
        paper="Ma et al. 2026, MaskGRPO (ICLR 2026, arXiv 2510.02880)",
        # text runs: gamma 0.6, AR-like fading (paper runs: eps 0.2, beta 0.01, mu 12; maskgrpo.md section 7.1)
        defaults={"gamma": 0.6},
    ),
    "rebrl": Method(
        name="rebrl",
        remasking="rebrl_linear",
        weighting="rebrl",
        paper="Zhang et al. 2026, RebRL: Rebalanced Timestep Credits (CVPR 2026)",
        # t_j = j / mu, token-level rebalancing lambda(t) = t with 1/F (algorithms.md A.3)
        defaults={"rebrl_mode": "token", "coupling": "independent"},
    ),
    "tracerl": Method(
        name="tracerl",
        remasking="tracerl",
        weighting="masked_mean",
        paper="Wang et al. 2026, TraceRL / TraDo (ICLR 2026, arXiv 2509.06949)",
        # per-row mean over a trace step's tokens, KL against the old policy (dLLM-RL train/rl_llada.py)
        defaults={"loss_type": "seq_mean", "kl_target": "old", "shrink": 2},
    ),
    "gdpo": Method(
        name="gdpo",
        remasking="gdpo_quadrature",
        weighting="gdpo_elbo",
        objective="sequence_clip",
        paper="Rojas et al. 2026, GDPO: Group Diffusion Policy Optimization (ICLR 2026, arXiv 2510.08554)",
        # N = 3 Gauss-Legendre nodes, one mask per node; unnormalised (mean-only) advantages
        defaults={"views_per_step": 3},
        fixed={"scale_rewards": "none"},
    ),
    "spg": Method(
        name="spg",
        remasking="block_random",
        weighting="masked_mean",
        objective="spg",
        paper="Wang et al. 2026, SPG: Sandwiched Policy Gradient (ICLR 2026, arXiv 2510.09541)",
        # num_t = 2 block-random masks per step, EUBO beta 1.0, mix 0.5; REINFORCE without KL
        defaults={"views_per_step": 2, "eubo_beta": 1.0, "eubo_mix": 0.5},
        fixed={"beta": 0.0},
    ),
    "wd1": Method(
        name="wd1",
        remasking="full_completion",
        weighting="completion_mean",
        objective="weighted_likelihood",
        paper="Tang et al. 2026, wd1: Weighted Policy Optimization (ICLR 2026, arXiv 2507.08838)",
        # ratio-free: no old or reference likelihood; A = R - mean(R) turned into group softmax weights
        defaults={"p_mask_prompt": 0.15},
        fixed={"scale_rewards": "none", "beta": 0.0},
    ),
}
