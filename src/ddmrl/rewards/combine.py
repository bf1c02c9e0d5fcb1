"""Weighted sums of image rewards, e.g. UniGRPO's text-to-image reward 0.1 * CLIP + 0.1 * ImageReward (MMaDA,
Yang et al. 2025, section UniGRPO)."""

from __future__ import annotations

from collections.abc import Mapping

from PIL import Image

from ddmrl.rewards.interface import ImageRewardModel


class WeightedSum(ImageRewardModel):
    """``sum_k weight_k * component_k.score(images, prompts)``, per image.

    Components load lazily, each on its own first use. A NaN from any component makes that image's sum NaN (the
    caller decides how to treat it; GRPO's ``on_nonfinite``). ``last_components`` keeps the unweighted per-component
    scores of the last batch, for TRL-style ``rewards/<name>`` logging.
    """

    name = "weighted_sum"

    def __init__(self, components: Mapping[str, tuple[ImageRewardModel, float]]) -> None:
        super().__init__()
        if not components:
            raise ValueError("weighted_sum: needs at least one component")
        for key, value in components.items():
            if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], ImageRewardModel)):
                raise ValueError(f"weighted_sum: component '{key}' must be (ImageRewardModel, weight)")
        self.components = {k: (m, float(w)) for k, (m, w) in components.items()}
        self.last_components: dict[str, list[float]] = {}

    def _load(self) -> None:
        """Nothing of its own; components load on first use."""

    def _score(self, images: list[Image.Image], prompts: list[str]) -> list[float]:
        total = [0.0] * len(images)
        self.last_components = {}
        for key, (model, weight) in self.components.items():
            scores = model.score(images, prompts)  # [N]
            self.last_components[key] = scores
            total = [t + weight * s for t, s in zip(total, scores, strict=True)]
        return total
