"""Group-relative advantages (GRPO, Shao et al. 2024; TRL's ``scale_rewards``), and MDPO's per-step advantages."""

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


STEP_ADVANTAGES = {"mdpo": mdpo_step_advantages}
