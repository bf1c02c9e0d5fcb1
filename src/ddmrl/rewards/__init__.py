"""Image reward models behind one interface, the GenEval official-evaluator bridge and DPG-Bench scoring.

Text rewards live with their tasks (:mod:`ddmrl.tasks`). See docs/rewards.md for weights and environments.
``REWARD_MODELS`` is the only list of the reward models' names (the schema validates a reward entry's ``model``
by it); looking a name up imports its module only. An entry may also name a reward model outside the package, as
``module:attribute`` or as an entry point of the ``ddmrl.rewards`` group (docs/extending.md). A reward model is a
class of the contract :class:`ddmrl.rewards.interface.ImageRewardModel`, built (nothing loaded yet) from its
options; :mod:`ddmrl.rewards.registry` builds them and their weighted sums from params.
"""

from __future__ import annotations

from typing import NamedTuple

from ddmrl.registry import Registry


class RewardModel(NamedTuple):
    """A reward model's entry in ``REWARD_MODELS``: where it is, and what the schema reads of it by name without
    importing it. One outside the package has the defaults."""

    spec: str
    combines: bool = False  # a combination of the other entries (their weighted sum), not a reward model itself


REWARD_MODELS = Registry(
    {
        "imagereward": "ddmrl.rewards.local_models:ImageRewardScore",
        "hpsv3": "ddmrl.rewards.local_models:HPSv3Score",
        "clip": "ddmrl.rewards.local_models:OpenCLIPScore",
        "clip_hf": "ddmrl.rewards.local_models:HFCLIPScore",
        "deqa": "ddmrl.rewards.local_models:DeQAScore",
        "unifiedreward": "ddmrl.rewards.remote:UnifiedRewardClient",
        "reward_server": "ddmrl.rewards.remote:RewardServerClient",
        "weighted_sum": RewardModel("ddmrl.rewards.registry:weighted_sum", combines=True),  # the others' sum
    },
    group="ddmrl.rewards",
)


def reward_model(name: str) -> RewardModel:
    """The record of reward model ``name`` (``REWARD_MODELS``)."""
    return REWARD_MODELS.record(name, RewardModel)
