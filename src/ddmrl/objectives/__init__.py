"""Objectives: advantages, token weights, the clipped policy loss with k3 KL, and aggregation."""

from ddmrl.objectives.advantages import ADVANTAGES, group_advantages
from ddmrl.objectives.losses import OBJECTIVES, ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.policy_loss import TokenLoss, aggregate, clipped_token_loss, k3_kl
from ddmrl.objectives.weights import REBRL_LAMBDA, WEIGHTINGS, realised_ratio, token_weights

__all__ = [
    "ADVANTAGES",
    "OBJECTIVES",
    "ObjectiveInputs",
    "ObjectiveOutput",
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
