"""Objectives: advantages, token weights, the clipped policy loss with k3 KL, and aggregation."""

from ddmrl.objectives.advantages import group_advantages
from ddmrl.objectives.policy_loss import TokenLoss, aggregate, clipped_token_loss, k3_kl
from ddmrl.objectives.weights import REBRL_LAMBDA, realised_ratio, token_weights

WEIGHTINGS = ("completion_mean", "masked_mean", "rebrl")

__all__ = [
    "REBRL_LAMBDA",
    "WEIGHTINGS",
    "TokenLoss",
    "aggregate",
    "clipped_token_loss",
    "group_advantages",
    "k3_kl",
    "realised_ratio",
    "token_weights",
]
