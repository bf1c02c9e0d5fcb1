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
        step_advantage: key in ``ddmrl.objectives.advantages.STEP_ADVANTAGES``: per-step advantages from the task
            reward of each step's prediction (MDPO), or "" (one advantage per rollout).
        augmenter: key in ``ddmrl.augmenters.AUGMENTERS``: edits the scored groups before the advantages (IGPO's
            inpainting of all-wrong groups), or "" (none).
    """

    name: str
    remasking: str
    weighting: str
    paper: str
    objective: str = "token_clip"
    step_advantage: str = ""
    augmenter: str = ""


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
        remasking="unigrpo",
        weighting="rebrl",
        paper="Zhang et al. 2026, RebRL: Rebalanced Timestep Credits (CVPR 2026)",
        # a plug-in on UniGRPO's views: lambda(t) = t with 1/F (RebRL Eq. 11, Algorithm 1); rebrl_linear: t_j = j / mu
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
    "mdpo": Method(
        name="mdpo",
        remasking="mdpo_topk",
        weighting="mdpo_confidence",
        objective="mdpo",
        paper="He et al. 2025, MDPO: Overcoming the Training-Inference Divide of Masked Diffusion Language Models "
        "(arXiv 2508.13148)",
        step_advantage="mdpo",
        # per-step rewards of each step's prediction, adv-v4, top-K steps, L/|M| x confidence, k2 KL
    ),
    "cj_grpo": Method(
        name="cj_grpo",
        remasking="cj_grpo",
        weighting="masked_mean",
        paper="Yang et al. 2025, Taming Masked Diffusion Language Models via Consistency Trajectory RL with Fewer "
        "Decoding Steps (CJ-GRPO; arXiv 2509.23924)",
        # every stored step x_s -> x_{s+1}, token mean per step averaged over steps; EOSER + ASS rollouts
    ),
    "cogrpo": Method(
        name="cogrpo",
        remasking="tracerl",
        weighting="masked_mean",
        paper="Zhou, Ni et al. 2025, Co-GRPO: Co-Optimized GRPO for Masked Diffusion Model (arXiv 2512.22288)",
        # the model on its own trajectory (TraceRL's views), plus a schedule policy (aux_policy.kind: schedule)
    ),
    "unmask_policy": Method(
        name="unmask_policy",
        remasking="tracerl",
        weighting="masked_mean",
        paper="Jazbec, Olausson et al. 2025, Learning Unmasking Policies for Diffusion Language Models "
        "(arXiv 2512.09106)",
        # an unmasking policy (aux_policy.kind: unmasking) on the frozen model; the views train the model when joint
    ),
    "igpo": Method(
        name="igpo",
        remasking="full_completion",
        weighting="hint_entropy",
        paper="Zhao et al. 2026, Inpainting-Guided Policy Optimization for Diffusion Large Language Models (IGPO; "
        "ICLR 2026, arXiv 2509.10396)",
        augmenter="igpo",
        # d1's views and objective with clip-higher; all-wrong groups get inpainted samples; top-tau hint entropy
    ),
}
