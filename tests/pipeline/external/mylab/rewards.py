"""A researcher's own image reward model, outside ddmrl: the share of the image in the colours its prompt names (a
cheap stand-in for a learned prompt-adherence score). A reward entry names it as ``{model:
"mylab.rewards:ColourShare"}``; its contract is ``ddmrl.rewards.interface.ImageRewardModel``, its option ``floor``
a constructor argument (checked by ``ddmrl.rewards.registry``)."""

from __future__ import annotations

from ddmrl.rewards.interface import ImageRewardModel
from ddmrl.tasks.geneval_mini import PALETTE


class ColourShare(ImageRewardModel):
    """The fraction of pixels whose colour is one the prompt names (at least ``floor``)."""

    name = "mylab.rewards:ColourShare"

    def __init__(self, floor: float = 0.0) -> None:
        super().__init__()
        self.floor = floor

    def _load(self) -> None:  # nothing to load
        pass

    def _score(self, images, prompts) -> list[float]:
        out = []
        for image, prompt in zip(images, prompts, strict=True):
            named = {PALETTE[c] for c in prompt.split() if c in PALETTE and c != "background"}
            pixels = list(image.convert("RGB").getdata())
            out.append(max(self.floor, sum(p in named for p in pixels) / len(pixels)))
        return out
