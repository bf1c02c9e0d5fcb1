"""The image-reward interface: ``score(images, prompts) -> list[float]``, one float per (image, prompt) pair.

Every model-backed scorer of docs/rewards.md (HPSv3, ImageReward, DeQA, CLIP score, UnifiedReward) sits
behind :class:`ImageRewardModel`. A scorer is built from a config (weights path, device, server URL) without
touching any heavy package; the package is imported and the weights are loaded on the first ``score`` call, once.
So a config can name scorers that only exist in another environment (docs/rewards.md: no hub, separate
envs), and a missing package or weights file is reported, in one line, only when that scorer is actually used.
"""

from __future__ import annotations

import importlib
import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from PIL import Image


class RewardSetupError(RuntimeError):
    """A reward model cannot be set up: missing package, weights file or server. One line, naming what to
    install or download and where to put it (line breaks are folded)."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def require_module(import_name: str, pip_name: str, scorer: str, hint: str = "") -> ModuleType:
    """``import_name`` imported, or a :class:`RewardSetupError` naming the pip package that provides it."""
    try:
        return importlib.import_module(import_name)
    except ImportError as e:
        extra = f" {hint}" if hint else ""
        raise RewardSetupError(
            f"{scorer}: Python package '{import_name}' is not importable ({e}); install it with "
            f"`pip install {pip_name}` (in a separate environment, see docs/rewards.md).{extra}"
        ) from None


def require_path(path: str | Path | None, scorer: str, what: str, source: str, *, is_dir: bool = False) -> Path:
    """``path`` as a :class:`Path` if it exists (a directory when ``is_dir``), else a one-line
    :class:`RewardSetupError` saying what belongs there and where to download it from."""
    kind = "directory" if is_dir else "file"
    if path is None or str(path) == "":
        raise RewardSetupError(f"{scorer}: no {what} path configured; {source}")
    p = Path(path).expanduser()
    ok = p.is_dir() if is_dir else p.is_file()
    if not ok:
        raise RewardSetupError(f"{scorer}: {what} {kind} {p} not found; {source}")
    return p


def default_device(device: str | None) -> str:
    """``device``, or ``cuda`` when torch sees a GPU and ``cpu`` otherwise."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_batch(images: Sequence[Any], prompts: Sequence[str], scorer: str) -> None:
    """Refuse a batch whose lengths differ or whose items are not PIL images / strings (one-line ValueError)."""
    if len(images) != len(prompts):
        raise ValueError(f"{scorer}: got {len(images)} images but {len(prompts)} prompts (one prompt per image)")
    for i, im in enumerate(images):
        if not isinstance(im, Image.Image):
            raise ValueError(f"{scorer}: images[{i}] is a {type(im).__name__}, expected a PIL.Image.Image")
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise ValueError(f"{scorer}: prompts[{i}] is a {type(p).__name__}, expected str")


class ImageRewardModel(ABC):
    """A batch image reward: ``score(images, prompts)`` gives one float per pair (NaN where a scorer could not
    produce a value, e.g. an unparsable UnifiedReward reply; see each scorer).

    Subclasses implement :meth:`_load` (import the package, load the weights; called once, on first use) and
    :meth:`_score` (score one batch with the loaded model). ``load_count`` says how many times :meth:`_load` ran.
    """

    #: registry name (also used in error messages)
    name: str = "reward"

    def __init__(self) -> None:
        self._loaded = False
        self._load_lock = threading.Lock()
        self.load_count = 0

    @property
    def loaded(self) -> bool:
        return self._loaded

    def ensure_loaded(self) -> None:
        """Load the model now (idempotent, thread safe)."""
        if self._loaded:
            return
        with self._load_lock:
            if not self._loaded:
                self._load()
                self.load_count += 1
                self._loaded = True

    def score(self, images: Sequence[Image.Image], prompts: Sequence[str]) -> list[float]:
        """[N] rewards of ``images[i]`` for ``prompts[i]``."""
        check_batch(images, prompts, self.name)
        if not images:
            return []
        self.ensure_loaded()
        out = [float(s) for s in self._score(list(images), list(prompts))]
        if len(out) != len(images):
            raise RuntimeError(f"{self.name}: the model returned {len(out)} scores for {len(images)} images")
        return out

    __call__ = score

    @abstractmethod
    def _load(self) -> None:
        """Import the backing package and load the weights (raise :class:`RewardSetupError` when impossible)."""

    @abstractmethod
    def _score(self, images: list[Image.Image], prompts: list[str]) -> list[float]:
        """Scores of a non-empty, validated batch."""


def nan_count(values: Sequence[float]) -> int:
    """How many entries of ``values`` are NaN."""
    return sum(1 for v in values if isinstance(v, float) and math.isnan(v))
