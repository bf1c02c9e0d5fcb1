"""Image reward models behind one interface, the GenEval official-evaluator bridge and DPG-Bench scoring.

Text rewards live with their tasks (:mod:`ddmrl.tasks`). See docs/rewards.md for weights and environments. Every
name below is imported from its module on first use, so importing the package loads no reward model's code.
"""

from __future__ import annotations

from ddmrl.registry import lazy_exports

_LAZY = {
    "REWARD_MODELS": "ddmrl.rewards.registry",
    "UNIGRPO_T2I_WEIGHTS": "ddmrl.rewards.registry",
    "DeQAScore": "ddmrl.rewards.local_models",
    "HFCLIPScore": "ddmrl.rewards.local_models",
    "HPSv3Score": "ddmrl.rewards.local_models",
    "ImageRewardModel": "ddmrl.rewards.interface",
    "ImageRewardScore": "ddmrl.rewards.local_models",
    "OpenCLIPScore": "ddmrl.rewards.local_models",
    "RewardComponent": "ddmrl.rewards.registry",
    "RewardServerClient": "ddmrl.rewards.remote",
    "RewardSetupError": "ddmrl.rewards.interface",
    "UnifiedRewardClient": "ddmrl.rewards.remote",
    "WeightedSum": "ddmrl.rewards.combine",
    "load_reward": "ddmrl.rewards.registry",
    "reward_from_params": "ddmrl.rewards.registry",
}
__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = list(_LAZY)
