"""A researcher's own rollout augmenter, outside ddmrl: a group whose samples all have the same reward teaches
nothing (its advantages are 0), so its shorter completions get a small bonus, a tie-break by length. A method names it
by import path, ``Method(augmenter="mylab.augmenters:TIE_BREAK")``; its contract is ``ddmrl.augmenters.base``."""

from __future__ import annotations

import torch

from ddmrl.augmenters.base import Augmented, Augmenter, AugmentInputs

BONUS = 0.01  # at most, for the shortest completion of a tied group


def check(task) -> None:
    """Any task: the bonus reads the completions' lengths only."""


def augment(x: AugmentInputs) -> Augmented:
    """Rewards + BONUS x (1 - length / longest) in every group of equal rewards; the completions unchanged."""
    g = x.num_generations
    rewards = x.rewards.view(-1, g)  # [B, G]
    tied = (rewards == rewards[:, :1]).all(1, keepdim=True)  # [B, 1]
    lengths = x.batch.completion_mask.sum(1).view(-1, g).to(rewards.dtype)  # [B, G]
    bonus = BONUS * (1 - lengths / lengths.max(1, keepdim=True).values.clamp_min(1))  # [B, G]
    edited = torch.where(tied, rewards + bonus, rewards).view(-1)  # [N]
    hints = torch.zeros_like(x.batch.completion_mask, dtype=torch.bool)  # nothing clamped
    stats = {"augment/tied_groups": float(tied.sum())}
    return Augmented(x.batch._replace(hints=hints), edited, stats)


TIE_BREAK = Augmenter(check=check, augment=augment)
