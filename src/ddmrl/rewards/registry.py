"""Image reward models built by name (:data:`ddmrl.rewards.REWARD_MODELS`, the registry of their names) and the
config form of a weighted reward.

``load_reward(name, **kwargs)`` builds a scorer without loading anything heavy (loading happens on first
``score``). :func:`reward_from_params` turns a params section such as::

    reward_models:
      clip:        {model: clip_hf, weight: 0.1, weights: /models/clip-vit-large-patch14}
      imagereward: {weight: 0.1, weights: /models/ImageReward}

into a :class:`~ddmrl.rewards.combine.WeightedSum` (``model`` defaults to the entry's name), refusing bad entries
with one :class:`ddmrl.config.ConfigError` line naming the key.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddmrl.config import ConfigError
from ddmrl.config.tasks import is_reward_model, reward_models
from ddmrl.rewards import REWARD_MODELS
from ddmrl.rewards.combine import WeightedSum
from ddmrl.rewards.interface import ImageRewardModel

#: UniGRPO text-to-image reward weights (MMaDA paper: CLIP reward and ImageReward, each scaled by 0.1)
UNIGRPO_T2I_WEIGHTS: dict[str, float] = {"clip": 0.1, "imagereward": 0.1}


@dataclass(frozen=True)
class RewardComponent:
    """One entry of a weighted reward: registry ``model`` name, its ``weight`` and constructor ``kwargs``."""

    model: str
    weight: float = 1.0
    kwargs: dict[str, Any] = field(default_factory=dict)


def weighted_sum(components: Mapping[str, Mapping[str, Any] | RewardComponent]) -> WeightedSum:
    """A :class:`WeightedSum` from ``{name: {model: ..., weight: ..., **kwargs}}`` (or :class:`RewardComponent`)."""
    return reward_from_params(components, key="components")


def reward_class(name: Any, where: str) -> Any:
    """The reward model ``name`` names (built in, ``module:attribute`` or an entry point of ``ddmrl.rewards``),
    imported; a one-line :class:`ConfigError` naming ``where`` when there is none or it cannot be imported."""
    if not is_reward_model(name):
        choices = ", ".join(sorted(reward_models()))
        raise ConfigError(f"{where} = {name!r}: unknown reward model; choose one of {choices} (or module:attribute)")
    try:
        return REWARD_MODELS[name]
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{where} = {name!r}: cannot be imported ({e}); is its module on PYTHONPATH?") from None


def _check_kwargs(name: str, kwargs: Mapping[str, Any], where: str) -> None:
    params = inspect.signature(REWARD_MODELS[name]).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    for key in kwargs:
        if key not in params:
            raise ConfigError(
                f"{where}.{key}: not an option of reward model '{name}'; options: {', '.join(sorted(params))}"
            )


def load_reward(name: str, **kwargs: Any) -> ImageRewardModel:
    """The reward model registered as ``name``, configured with ``kwargs`` (nothing is loaded yet).

    >>> load_reward("clip_hf", weights="/nonexistent").loaded
    False
    """
    if name not in REWARD_MODELS:  # built in, module:attribute or an entry point
        raise ValueError(f"unknown reward model '{name}'; choose one of {', '.join(sorted(REWARD_MODELS))}")
    try:
        _check_kwargs(name, kwargs, name)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    return REWARD_MODELS[name](**kwargs)


def reward_from_params(
    section: Mapping[str, Mapping[str, Any] | RewardComponent], key: str = "reward_models"
) -> WeightedSum:
    """A :class:`WeightedSum` from a params section ``{entry: {model?, weight?, **kwargs}}``; ``model`` defaults
    to ``entry`` and ``weight`` to 1. Errors name ``key.entry.option``."""
    if not isinstance(section, Mapping) or not section:
        raise ConfigError(f"{key} = {section!r}: must be a non-empty mapping of reward entries")
    components: dict[str, tuple[ImageRewardModel, float]] = {}
    for entry, spec in section.items():
        where = f"{key}.{entry}"
        if isinstance(spec, RewardComponent):
            model, weight, kwargs = spec.model, spec.weight, dict(spec.kwargs)
        elif isinstance(spec, Mapping):
            kwargs = dict(spec)
            model = kwargs.pop("model", entry)
            weight = kwargs.pop("weight", 1.0)
        else:
            raise ConfigError(f"{where} = {spec!r}: must be a mapping (model, weight and the model's options)")
        cls = reward_class(model, f"{where}.model")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            raise ConfigError(f"{where}.weight = {weight!r}: must be a finite number")
        _check_kwargs(model, kwargs, where)
        try:
            components[entry] = (cls(**kwargs), float(weight))
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from None
    return WeightedSum(components)
