"""Image reward models behind one interface, the GenEval official-evaluator bridge and DPG-Bench scoring.

Text rewards live with their tasks (:mod:`ddmrl.tasks`). See docs/rewards.md for weights and environments.
"""

from __future__ import annotations

from ddmrl.rewards.combine import WeightedSum
from ddmrl.rewards.interface import ImageRewardModel, RewardSetupError
from ddmrl.rewards.local_models import DeQAScore, HFCLIPScore, HPSv3Score, ImageRewardScore, OpenCLIPScore
from ddmrl.rewards.registry import (
    REWARD_MODELS,
    UNIGRPO_T2I_WEIGHTS,
    RewardComponent,
    load_reward,
    reward_from_params,
)
from ddmrl.rewards.remote import RewardServerClient, UnifiedRewardClient

__all__ = [
    "REWARD_MODELS",
    "UNIGRPO_T2I_WEIGHTS",
    "DeQAScore",
    "HFCLIPScore",
    "HPSv3Score",
    "ImageRewardModel",
    "ImageRewardScore",
    "OpenCLIPScore",
    "RewardComponent",
    "RewardServerClient",
    "RewardSetupError",
    "UnifiedRewardClient",
    "WeightedSum",
    "load_reward",
    "reward_from_params",
]
