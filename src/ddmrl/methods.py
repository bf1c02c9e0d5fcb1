"""One small record per RL method: which view sampler, token weighting and objective it uses.

A method is a choice for each component (sampler, view sampler, likelihood estimator, token
weighting, objective, advantage, regulariser). Here the sampler (LLaDA semi-AR), the likelihood (one-step
token log-probabilities of a view) and the objective (token-level clipped ratio + k3 KL) are shared; the
records name the rest. Each method's hyperparameters (its defaults, what its definition fixes, its checks) are its
model in ``ddmrl.config.schema`` (``METHOD_CONFIGS``); shared knobs (epsilon, beta, learning rate, advantage
scaling) come from ``grpo:`` so that methods are compared on equal terms. The papers' own values for those are set
by the paper profiles, with their sources.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    """A GRPO-family method for masked diffusion models.

    Attributes:
        name: registry key.
        remasking: key in ``ddmrl.masking.VIEWS``: how the training views of a rollout are built (the default of
            the method's ``remasking`` key).
        weighting: key in ``ddmrl.objectives.WEIGHTINGS``: per-(view, token) loss weights.
        objective: key in ``ddmrl.objectives.OBJECTIVES``: the loss of one optimiser step.
        paper: citation for the docs and tables.
    """

    name: str
    remasking: str
    weighting: str
    paper: str
    objective: str = "token_clip"


METHODS: dict[str, Method] = {
    "diffu_grpo": Method(
        name="diffu_grpo",
        remasking="full_completion",
        weighting="completion_mean",
        paper="Zhao et al. 2025, d1: Scaling Reasoning in Diffusion LLMs via RL (arXiv 2504.12216)",
        # d1: prompt masked with p = 0.15, whole completion masked (paper runs: eps 0.5, beta 0.04, mu 12)
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
        # text runs: gamma 0.6, AR-like fading (paper runs: eps 0.2, beta 0.01, mu 12; its t2t_grpo_train.sh)
    ),
    "rebrl": Method(
        name="rebrl",
        remasking="rebrl_linear",
        weighting="rebrl",
        paper="Zhang et al. 2026, RebRL: Rebalanced Timestep Credits (CVPR 2026)",
        # t_j = j / mu, token-level rebalancing lambda(t) = t with 1/F (RebRL Eq. 11, Algorithm 1)
    ),
    "tracerl": Method(
        name="tracerl",
        remasking="tracerl",
        weighting="masked_mean",
        paper="Wang et al. 2026, TraceRL / TraDo (ICLR 2026, arXiv 2509.06949)",
        # per-row mean over a trace step's tokens, KL against the old policy (dLLM-RL train/rl_llada.py)
    ),
    "gdpo": Method(
        name="gdpo",
        remasking="gdpo_quadrature",
        weighting="gdpo_elbo",
        objective="sequence_clip",
        paper="Rojas et al. 2026, GDPO: Group Diffusion Policy Optimization (ICLR 2026, arXiv 2510.08554)",
        # N = 3 Gauss-Legendre nodes, one mask per node; unnormalised (mean-only) advantages
    ),
    "spg": Method(
        name="spg",
        remasking="block_random",
        weighting="masked_mean",
        objective="spg",
        paper="Wang et al. 2026, SPG: Sandwiched Policy Gradient (ICLR 2026, arXiv 2510.09541)",
        # num_t = 2 block-random masks per step, EUBO beta 1.0, mix 0.5; REINFORCE without KL
    ),
    "wd1": Method(
        name="wd1",
        remasking="full_completion",
        weighting="completion_mean",
        objective="weighted_likelihood",
        paper="Tang et al. 2026, wd1: Weighted Policy Optimization (ICLR 2026, arXiv 2507.08838)",
        # ratio-free: no old or reference likelihood; A = R - mean(R) turned into group softmax weights
    ),
}
