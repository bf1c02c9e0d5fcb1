"""WeightedSum: weighted per-image sums, NaN propagation, per-component logging, lazy components."""

import math

import pytest
from PIL import Image

from ddmrl.rewards.combine import WeightedSum
from ddmrl.rewards.interface import ImageRewardModel


class Const(ImageRewardModel):
    def __init__(self, values):
        super().__init__()
        self.values = values

    def _load(self):
        pass

    def _score(self, images, prompts):
        return self.values[: len(images)]


def batch(n):
    return [Image.new("RGB", (2, 2)) for _ in range(n)], ["p"] * n


def test_unigrpo_style_sum():
    clip, ir = Const([30.0, 20.0]), Const([1.5, -0.5])
    reward = WeightedSum({"clip": (clip, 0.1), "imagereward": (ir, 0.1)})
    assert not clip.loaded
    out = reward.score(*batch(2))
    assert out == pytest.approx([3.15, 1.95])
    assert reward.last_components == {"clip": [30.0, 20.0], "imagereward": [1.5, -0.5]}
    assert clip.load_count == ir.load_count == 1


def test_nan_component_gives_nan_sum_for_that_image_only():
    out = WeightedSum({"a": (Const([1.0, math.nan]), 2.0), "b": (Const([1.0, 1.0]), 1.0)}).score(*batch(2))
    assert out[0] == 3.0 and math.isnan(out[1])


def test_bad_components_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        WeightedSum({})
    with pytest.raises(ValueError, match="component 'x'"):
        WeightedSum({"x": (object(), 1.0)})
