"""Reward registry and the params form of a weighted reward (errors name the key)."""

import pytest

from ddmrl.config import ConfigError
from ddmrl.rewards import REWARD_MODELS
from ddmrl.rewards.combine import WeightedSum
from ddmrl.rewards.local_models import HFCLIPScore, ImageRewardScore
from ddmrl.rewards.registry import UNIGRPO_T2I_WEIGHTS, RewardComponent, load_reward, reward_from_params


def test_registry_names():
    assert set(REWARD_MODELS) == {
        "imagereward",
        "hpsv3",
        "clip",
        "clip_hf",
        "deqa",
        "unifiedreward",
        "reward_server",
        "weighted_sum",
    }


def test_load_reward_builds_without_loading():
    m = load_reward("imagereward", weights="/does/not/exist", device="cpu")
    assert isinstance(m, ImageRewardScore) and not m.loaded


def test_load_reward_errors():
    with pytest.raises(ValueError, match="unknown reward model 'nope'; choose one of clip, clip_hf"):
        load_reward("nope")
    with pytest.raises(ValueError, match="clip.weightz: not an option of reward model 'clip'"):
        load_reward("clip", weightz="x")


def test_weighted_sum_from_params_unigrpo():
    section = {
        "clip": {"model": "clip_hf", "weight": UNIGRPO_T2I_WEIGHTS["clip"], "weights": "/m/clip"},
        "imagereward": {"weight": UNIGRPO_T2I_WEIGHTS["imagereward"], "weights": "/m/ir"},
    }
    r = reward_from_params(section)
    assert isinstance(r, WeightedSum)
    (clip, wc), (ir, wi) = r.components["clip"], r.components["imagereward"]
    assert isinstance(clip, HFCLIPScore) and clip.weights == "/m/clip" and wc == 0.1
    assert isinstance(ir, ImageRewardScore) and ir.weights == "/m/ir" and wi == 0.1
    via_registry = load_reward("weighted_sum", components={"c": RewardComponent("clip_hf", 0.5, {"weights": "/x"})})
    assert via_registry.components["c"][1] == 0.5


@pytest.mark.parametrize(
    "section,match",
    [
        ({}, "reward_models = {}: must be a non-empty mapping"),
        ({"clip": 0.1}, "reward_models.clip = 0.1: must be a mapping"),
        ({"x": {"model": "nope"}}, "reward_models.x.model = 'nope': unknown reward model"),
        ({"x": {"model": "weighted_sum"}}, "reward_models.x.model = 'weighted_sum': unknown"),
        ({"clip": {"weight": "big"}}, "reward_models.clip.weight = 'big': must be a finite number"),
        ({"clip": {"weight": float("inf")}}, "reward_models.clip.weight = inf"),
        ({"clip": {"weigths": "/x"}}, "reward_models.clip.weigths: not an option of reward model 'clip'"),
        ({"u": {"model": "unifiedreward", "on_parse_failure": "drop"}}, "reward_models.u: unifiedreward: on_parse"),
    ],
)
def test_params_errors_name_the_key(section, match):
    with pytest.raises(ConfigError, match=match):
        reward_from_params(section)
