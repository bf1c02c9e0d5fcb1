"""RLDF's objective, token weights and advantages (He et al. 2026, Reinforcement Learning from Denoising Feedback,
arXiv 2605.25638; ant-research/Drift ``trainer/main_rl.py``'s ``DriftTrainer``).

At each of its views (``ddmrl.masking.rldf``: the state a drawn denoising step started from) the loss is the clipped
token ratio with the k3 KL against the reference, over the view's masked valid tokens that the policy already finds
likely, p >= ``rldf_low_prob_threshold`` (the release's low-probability filter: the current policy's probability at
one optimiser step per rollout batch, the rollout policy's otherwise), and always over the tokens the view's own step
committed (its targets):

    K_j = {k masked in view j : pi(o_k | x_{s_j}) >= tau} | {k : step(k) = s_j}
    loss = 1/V sum_j agg_{k in K_j} [ -min(r_k A, clip(r_k, 1 - eps, 1 + eps) A) + beta KL_k ]

agg the batch token mean (``loss_type`` token_mean, the release's ``loss_norm: token``) or the mean of each rollout's
token mean (seq_mean, ``loss_norm: sample``). At one optimiser step per rollout batch the ratio is 1 and its gradient
is the release's REINFORCE term -A log pi (its value, -A, is the release's loss value minus A (1 + log pi)).
Advantages (:func:`rldf_zscore`): (r - mean) / max(std + 1e-8, 1e-2), Bessel std per group.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.policy_loss import aggregate, clipped_token_loss

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig
    from ddmrl.masking.views import Views

#: the release's floor of the group reward's std in its advantages
STD_FLOOR = 1e-2


def rldf_zscore(r: torch.Tensor, std: torch.Tensor, eps: float) -> torch.Tensor:
    """RLDF's group advantages (Drift's ``compute_loss``): (r - mean_g r) / clamp(std_g r + eps, min 1e-2), the
    Bessel std, eps 1e-8 (``Method.advantage_eps``). [B, G] -> [B, G]."""
    return (r - r.mean(1, keepdim=True)) / (std + eps).clamp(min=STD_FLOOR)


def rldf_weights(views: Views, completion_mask: torch.Tensor, _mode: str):
    """omega [V, N, L]: 1 at every masked valid token of a view (the loss's candidates; the objective keeps the
    likely ones and the view's targets)."""
    return (views.masks & completion_mask[None].bool()).float(), None


def kept(x: ObjectiveInputs, v: int, threshold: float, one_step: bool) -> torch.Tensor:
    """[N, L] the tokens view v trains: its masked valid tokens of probability >= threshold (under the current
    policy at one optimiser step per rollout batch, else the rollout policy) and its own step's tokens."""
    w = x.weights[v] > 0
    if threshold <= 0:
        return w
    probs = x.logps[v].detach() if one_step else x.old[v]
    return (w & (probs >= math.log(threshold))) | x.targets[v]


def rldf(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    """The mean over the step's views of the filtered, clipped token loss with the k3 KL (module docstring)."""
    threshold = getattr(cfg, "rldf_low_prob_threshold", 0.0)
    losses, kls, clips, shares = [], [], [], []
    for v in range(x.logps.shape[0]):
        ref = None if x.ref is None else x.ref[v]
        tl = clipped_token_loss(x.logps[v], x.old[v], ref, x.advantages, cfg.epsilon, cfg.beta, cfg.epsilon_high)
        w = kept(x, v, threshold, cfg.num_iterations == 1).to(x.logps.dtype)  # [N, L]
        losses.append(aggregate(tl.loss, w, cfg.loss_type))
        kls.append(aggregate(tl.kl, w, "token_mean").item())
        clips.append(aggregate(tl.clipped, w, "token_mean").item())
        shares.append(float(w.sum() / x.weights[v].sum().clamp_min(1)))
    n = len(losses)
    terms = {"kl": sum(kls) / n, "clip_ratio": sum(clips) / n, "rldf/kept": sum(shares) / n}
    return ObjectiveOutput(torch.stack(losses).mean(), terms)
