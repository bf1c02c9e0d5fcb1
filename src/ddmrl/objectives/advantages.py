"""Group-relative advantages (GRPO, Shao et al. 2024; TRL's ``scale_rewards``), MDPO's per-step advantages and
d-TreeRPO's per-edge advantages of a tree of rollouts."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from ddmrl.objectives import ADVANTAGES

if TYPE_CHECKING:
    from ddmrl.rollout import Rollouts


def group_advantages(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str = "group", eps: float = 1e-4
) -> tuple[torch.Tensor, torch.Tensor]:
    """A_i = (r_i - mean_g r) / (std_g r + eps) over consecutive groups of ``num_generations``.

    ``scale_rewards="none"`` keeps r_i - mean_g r (d1's code). std is the unbiased (Bessel) estimate, as in TRL
    and MaskGRPO. A group whose rewards are all equal has zero advantages.

    Args:
        rewards: [B * G] rewards, grouped consecutively.
    Returns:
        advantages [B * G] and a [B] bool flag per group with zero reward spread (TRL's frac_reward_zero_std).
    """
    if scale_rewards not in ADVANTAGES:
        raise ValueError(f"unknown scale_rewards '{scale_rewards}'; choose one of {', '.join(ADVANTAGES)}")
    r = rewards.view(-1, num_generations)  # [B, G]
    std = r.std(1, keepdim=True)
    return ADVANTAGES[scale_rewards](r, std, eps).flatten(), std.squeeze(1) < 1e-6


def z_score(r: torch.Tensor, std: torch.Tensor, eps: float) -> torch.Tensor:
    """GRPO's advantages (Shao et al. 2024, Eq. 3): (r - mean_g r) / (std_g r + eps), [B, G]."""
    return (r - r.mean(1, keepdim=True)) / (std + eps)


def mean_centred(r: torch.Tensor, std: torch.Tensor, eps: float) -> torch.Tensor:
    """r - mean_g r, [B, G]: not scaled (d1's code, GDPO, wd1; Dr. GRPO's scale_rewards="none")."""
    return r - r.mean(1, keepdim=True)


def population_zscore(r: torch.Tensor, _std: torch.Tensor, _eps: float) -> torch.Tensor:
    """DiRL's ``z_score_normalize`` (DiPO's release): (r - mean) / std with the population std (ddof 0) and no
    epsilon, 0 for a group of equal rewards (tested as equality: the release's ``std != 0`` on a rounded mean would
    z-score equal rewards whose sum is inexact). [B, G] -> [B, G]."""
    centred = r - r.mean(1, keepdim=True)
    sd = r.std(1, correction=0, keepdim=True)
    equal = (r == r[:, :1]).all(1, keepdim=True)  # [B, 1]
    return torch.where(equal, 0.0, centred / sd.where(~equal, 1.0))


def mdpo_step_advantages(step_rewards: torch.Tensor, num_generations: int, eps: float = 1e-4) -> torch.Tensor:
    """MDPO's per-step advantages (He et al. 2025, arXiv 2508.13148; "adv-v4" of its released trainer).

    From the rewards r_s of the predictions x̂_0^(s) of steps s = 1..S (the last one the completion's):

        a_s = (r_s - r_{s-1}) + 1 + mean(r_{s+1}, ..., r_S)     (r_0 := 0: the first step uses r_1 itself;
                                                                  the last step's future mean is r_S)

    the reward gained by step s plus the mean reward of the predictions that follow it, then normalised per step
    across the G rollouts of a group: A_s = (a_s - mean_g a_s) / (std_g a_s + eps) (Bessel std, as the code).

    Args:
        step_rewards: [N, S] per-step rewards of N = B * G rollouts grouped consecutively.
    Returns:
        [N, S] advantages.
    """
    r = step_rewards
    s = r.shape[1]
    gain = torch.cat([r[:, :1], r[:, 1:] - r[:, :-1]], dim=1) + 1  # [N, S]
    after = r[:, 1:].flip(1).cumsum(1).flip(1) / torch.arange(s - 1, 0, -1, dtype=r.dtype)  # [N, S - 1]
    a = (gain + torch.cat([after, r[:, -1:]], dim=1)).view(-1, num_generations, s)  # [B, G, S]
    return ((a - a.mean(1, keepdim=True)) / (a.std(1, keepdim=True) + eps)).view(-1, s)


def tree_advantages(rewards: torch.Tensor, branching: tuple[int, ...]) -> torch.Tensor:
    """d-TreeRPO's step-wise advantages (Pan et al. 2025, arXiv 2512.09675; THU-BPM/d-TreeRPO
    ``_perform_tree_search_and_compute_advantages``): the rewards of the leaves propagate bottom-up, a node's value
    being the mean of its children's (so the mean reward of its leaves), and the edge into node n is credited with

        A(n) = V(n) - mean_{m in siblings(n), m != n} V(m)        (0 for the mean when n has no sibling)

    the node's value against its siblings' (leave-one-out; K / (K - 1) (V(n) - V(parent)) for K siblings).

    Args:
        rewards: [B * G] the leaves' rewards, G = prod(branching) per prompt in depth-first order
            (``ddmrl.rollout.Tree``).
        branching: the children of a node at each depth, the root's first.
    Returns:
        [D, B * G]: row i's advantage at depth d, the edge from its node at depth d to its node at depth d + 1
        (rows under one node repeat its edge's).
    """
    g = math.prod(branching)
    r = rewards.view(-1, g)  # [B, G]
    out, nodes = [], 1
    for k in branching:
        nodes *= k
        value = r.view(r.shape[0], nodes, g // nodes).mean(-1)  # [B, n] the nodes at this depth
        sib = value.view(r.shape[0], nodes // k, k)  # [B, parents, K]
        rest = (sib.sum(-1, keepdim=True) - sib) / max(k - 1, 1)  # [B, parents, K] the siblings' mean
        adv = (sib - rest).view(r.shape[0], nodes)  # [B, n]
        out.append(adv.repeat_interleave(g // nodes, 1).flatten())  # [B * G]
    return torch.stack(out)


def rollout_tree_advantages(rewards: torch.Tensor, rollouts: Rollouts) -> torch.Tensor:
    """[D, N] :func:`tree_advantages` of rollouts sampled as a tree (``ddmrl.rollout.rollout``'s ``branching``)."""
    if rollouts.tree is None:
        raise ValueError("tree advantages need rollouts sampled as a tree (the method's rollout_options branching)")
    return tree_advantages(rewards, rollouts.tree.branching)
