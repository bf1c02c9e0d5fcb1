"""Group-relative advantages (GRPO, Shao et al. 2024; TRL's ``scale_rewards``)."""

from __future__ import annotations

import torch


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


ADVANTAGES = {
    "group": lambda r, std, eps: (r - r.mean(1, keepdim=True)) / (std + eps),  # GRPO z-score
    "none": lambda r, std, eps: r - r.mean(1, keepdim=True),  # mean-only (d1's code, GDPO, wd1)
}
