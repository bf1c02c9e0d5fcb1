"""GRPO over MAR's denoising transitions, and MAR-GRPO's stabilisers: multi-trajectory expectation (MTE) on the top-k %
most uncertain tokens, and consistency-aware selection of AR tokens.

The policy's action for a token is the head's denoising trajectory (``ddmrl.mar.sampler``); each stochastic step is
a Gaussian transition with an exact log-probability (``ddmrl.mar.diffusion``), a function of the token's condition z
and so of the transformer. GRPO's surrogate (Shao et al. 2024; PPO's clip, Schulman et al. 2017) is taken per
(token, diffusion step) with the image's group advantage, as Flow-GRPO and DanceGRPO take it per step of an SDE
sampler: psi = min(rho A, clip(rho, 1 - eps, 1 + eps) A), rho = exp(log p_theta - log p_old) of that transition
under that AR step's condition.

MAR-GRPO (Ma et al. 2026, "MAR-GRPO: Stabilized GRPO for AR-diffusion Hybrid Image Generation"; its release
AMAP-ML/mar-grpo, Harmon trainer):

* **MTE**: for every token, M more trajectories are drawn from the head under the condition the token was revealed
  under; a token's spread over them (the standard deviation of their samples, averaged over channels) is its
  uncertainty, and for the top-k % most uncertain tokens of an image the token's surrogate is the mean over the M
  trajectories of their surrogates (:func:`mte_surrogate`) instead of its own trajectory's.
* **consistency-aware selection**: at AR step s, a token the step does not reveal (a draft) is trained only when
  its draft moved towards the final image: cos(draft_s, final) - cos(draft_{s-1}, final) > threshold
  (:func:`consistency_mask`); the tokens the step reveals are always trained.

Note (measured in the tests, a property of the estimator): a trajectory drawn afresh from p(. | z) is independent of
the reward, and E_tau[grad_z log p(tau | z)] = 0, so at the condition the extra trajectories were drawn under, a
token's MTE term has zero expected gradient at rho = 1. MTE replaces the top-k % tokens' single-trajectory gradients
by a 1 / M-variance estimate of zero: it mutes the most uncertain tokens rather than estimating their gradient
better.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ddmrl.mar.diffusion import Schedule, gaussian_log_prob, posterior_mean, step_std


def transition_log_probs(
    head,
    schedule: Schedule,
    z: torch.Tensor,
    traj: torch.Tensor,
    steps: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(traj[k] | traj[k + 1], z) of diffusion steps ``steps`` [I] (each >= 1: stochastic), and their means.

    z [n, D]; traj [K + 1, n, C] -> (log-probs [I, n], means [I, n, C]), differentiable in z and the head."""
    if int(steps.min()) < 1:
        raise ValueError("diffusion step 0 is deterministic (the mean): it has no transition log-probability")
    i, n = len(steps), z.shape[0]
    k = steps.to(z.device).repeat_interleave(n)  # [I * n]
    x_in, x_out = traj[steps + 1].flatten(0, 1), traj[steps].flatten(0, 1)  # [I * n, C]
    eps = head(x_in, schedule.timesteps.to(z.device)[k], z.repeat(i, 1))
    mean = posterior_mean(schedule, x_in, k, eps)
    logp = gaussian_log_prob(x_out, mean, step_std(schedule, k, temperature))
    return logp.view(i, n), mean.view(i, n, -1)


def uncertainty(samples: torch.Tensor) -> torch.Tensor:
    """A token's spread over M trajectories: [M, B, N, C] samples -> [B, N], the standard deviation over M (1 / M
    normalisation) averaged over channels (MAR-GRPO's release: ``std(dim=0, unbiased=False).mean(-1)``)."""
    return samples.std(dim=0, unbiased=False).mean(-1)


def top_percent(score: torch.Tensor, percent: float) -> torch.Tensor:
    """[B, N] bool: the ``max(1, int(N * percent))`` highest-scoring tokens of each image (ties by position)."""
    n = score.shape[-1]
    k = max(1, int(n * percent))
    idx = score.topk(k, dim=-1).indices
    return torch.zeros_like(score, dtype=torch.bool).scatter_(-1, idx, True)


def consistency_mask(
    draft: torch.Tensor,
    previous: torch.Tensor,
    final: torch.Tensor,
    unknown: torch.Tensor,
    revealed: torch.Tensor,
    threshold: float = 0.0,
) -> torch.Tensor:
    """Consistency-aware selection at one AR step: [B, N] bool, the tokens this step reveals, plus those it leaves
    unknown whose draft moved towards the final image, cos(draft, final) - cos(previous, final) > threshold.

    draft, previous, final [B, N, C] (this step's and the previous step's drafts, the generated tokens); unknown,
    revealed [B, N] bool (masked after this step; revealed by it)."""
    gain = F.cosine_similarity(draft, final, dim=-1) - F.cosine_similarity(previous, final, dim=-1)  # [B, N]
    return revealed | (unknown & (gain > threshold))


def mte_surrogate(psi: torch.Tensor, psi_mte: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
    """The per-(token, diffusion step) surrogate with MTE: the mean over the M extra trajectories where ``selected``,
    the token's own trajectory's elsewhere. psi [I, B, N]; psi_mte [M, I, B, N]; selected [B, N] bool."""
    return torch.where(selected, psi_mte.mean(0), psi)


def clipped_surrogate(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """psi = min(rho A, clip(rho, 1 - eps, 1 + eps) A) with rho = exp(logp - old_logp), and where the clip is
    active. logp, old_logp [..., B, N]; advantages [B] (one per image, over its tokens)."""
    ratio = torch.exp(logp - old_logp)
    a = advantages[:, None]
    unclipped, clipped = ratio * a, ratio.clamp(1 - epsilon, 1 + epsilon) * a
    return torch.minimum(unclipped, clipped), (clipped < unclipped)
