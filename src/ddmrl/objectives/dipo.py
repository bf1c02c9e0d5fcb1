"""DiPO's objective (Zhu et al. 2025, DiRL, arXiv 2512.22234, Eq. 7; OpenMOSS/DiRL ``train/grpo.py`` and
``models/sdar/modeling_sdar.py``): the clipped token ratio of every token at the state its sampler step started
from, summed over the step's tokens and averaged over the sampler steps of the batch,

    J = 1 / (sum_i |tau_i|) sum_i sum_t sum_{o_k in tau_i(t)} C_eps(pi_theta(o_k | tau_i(1:t-1)) / pi_old(...), A_i)
        - beta KL[pi_theta || pi_ref],

C_eps(r, A) = min(r A, clip(r, 1 - eps, 1 + eps) A), |tau_i| the sampler steps of rollout i, the k3 KL per token in the
same sum. It reads the packed views of ``ddmrl.masking.views.dipo_views``: in a view every block holding a target
contributes the targets of exactly one sampler step, so a view's steps are its blocks with a target (blocks of
``sampler.block_length`` from the completion's first position). DAPO's dynamic sampling (the release keeps a group
only if 0 < its mean correctness < 1): the rows of zero advantage leave the batch, numerator and step count alike
(a group of equal rewards has exactly zero advantages when its rewards' sum is exact, as the embedded tasks' binary
and dyadic rewards at G 8; ``scale_rewards: population`` gives exact zeros for any equal rewards).

``dipo_release_loss`` is the released code's normalisation instead: each (rollout, round) view's token mean
(``modeling_sdar``'s ``loss_mean`` over one view per micro-batch, ``batch_size_lm`` 1), summed and divided by the
gradient accumulation count, rollouts x block_size rounds (empty rounds padded): per view the mean over the kept rows
of their token means, averaged over the step's views (docs/reproduction.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.policy_loss import clipped_token_loss

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


def step_counts(targets: torch.Tensor, block_length: int) -> torch.Tensor:
    """The sampler steps of each view and row: its blocks holding a target (one step per block and round).
    [V, N, L] -> [V, N]."""
    v, n, length = targets.shape
    nb = -(-length // block_length)
    padded = torch.nn.functional.pad(targets, (0, nb * block_length - length))  # [V, N, nb bl]
    return padded.view(v, n, nb, block_length).any(-1).sum(-1)


def dipo(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    """Eq. 7 over the step's views (``dipo_release_loss``: the release's per-view token means)."""
    keep = (x.advantages != 0).to(x.weights.dtype)  # [N] DAPO's dynamic sampling
    w = x.weights * keep[None, :, None]  # [V, N, L]
    losses, kls, clips = [], [], []
    for v in range(x.logps.shape[0]):
        ref = None if x.ref is None else x.ref[v]
        tl = clipped_token_loss(x.logps[v], x.old[v], ref, x.advantages, cfg.epsilon, cfg.beta, cfg.epsilon_high)
        losses.append((w[v] * tl.loss).sum(-1))  # [N] summed over each row's targets
        kls.append((w[v] * tl.kl).sum())
        clips.append((w[v] * tl.clipped).sum())
    per_row = torch.stack(losses)  # [V, N]
    tokens = w.sum().clamp_min(1e-8)
    if getattr(cfg, "dipo_release_loss", False):
        token_means = per_row / w.sum(-1).clamp_min(1e-8)  # [V, N]
        loss = (token_means * keep).sum(-1).div(keep.sum().clamp_min(1)).mean()
    else:
        steps = (step_counts(x.targets & (w > 0), cfg.sampler.block_length) * keep).sum()
        loss = per_row.sum() / steps.clamp_min(1)
    return ObjectiveOutput(loss, {"kl": float(sum(kls) / tokens), "clip_ratio": float(sum(clips) / tokens)})
