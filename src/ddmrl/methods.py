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
        remasking: key in ``ddmrl.masking.VIEWS``: how the mu training views of a rollout are built.
        weighting: key in ``ddmrl.objectives.WEIGHTINGS``: per-(view, token) loss weights.
        paper: citation for the docs and tables.
        defaults: paper hyperparameters (TRL names), overridable in params.yaml.
    """

    name: str
    remasking: str
    weighting: str
    paper: str
    defaults: dict[str, Any] = field(default_factory=dict)

    def validate(self, cfg: GRPOConfig, key: str) -> None:
        """Refuse combinations that contradict the method (raises ConfigError naming ``key``)."""
        from ddmrl.config import ConfigError

        remasking = cfg.remasking or self.remasking
        if self.weighting == "rebrl" and remasking == "full_completion":
            raise ConfigError(
                f"{key}.remasking = 'full_completion': RebRL's 1/F rebalancing is a no-op on fully masked views "
                "(algorithms.md A.3 (c)); use rebrl_linear, unigrpo or maskgrpo_fading"
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
}
