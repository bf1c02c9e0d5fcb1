"""What every text-to-image task in MMaDA's layout shares (``geneval``, ``hps``, ``dpg``): captions laid out by the
checkpoint's adapter, image tokens decoded by MAGVIT-v2, both attached by ``ddmrl.models.layout.for_task``
(:meth:`MMaDAImageTask.bind`), and prompt files read on first use, so validating params.yaml reads nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PIL import Image

from ddmrl.io import DataError
from ddmrl.tasks.base import Example, Task

if TYPE_CHECKING:
    import torch

__all__ = ["MMaDAImageTask"]


class MMaDAImageTask(Task):
    """``num_image_tokens`` image tokens per sample (MMaDA at 512 px: 1024) after ``max_seq_length`` caption tokens
    (MMaDA's RL: 256)."""

    modality = "image"
    image_layout = "mmada"

    def __init__(self, num_image_tokens: int = 1024, max_seq_length: int = 256) -> None:
        for key, value in (("num_image_tokens", num_image_tokens), ("max_seq_length", max_seq_length)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} = {value!r}: must be a positive integer")
        self.completion_length, self.max_seq_length = num_image_tokens, max_seq_length
        self.prompt_length = max_seq_length + 2  # MMaDA's text part (max_seq_length + 1) and <|soi|>
        self._prompt_ids: Callable[[list[str]], torch.Tensor] | None = None
        self._decode: Callable[[torch.Tensor], torch.Tensor] | None = None

    def bind(self, prompt_ids: Callable[[list[str]], torch.Tensor], decode: Callable[[torch.Tensor], torch.Tensor]):
        """Attach the model's prompt layout (captions -> [N, P] ids) and image decoder (completion ids [N, L] ->
        uint8 images [N, H, W, 3]); ``ddmrl.models.layout.for_task`` does this when it wraps the model."""
        self._prompt_ids, self._decode = prompt_ids, decode

    def _bound(self) -> None:
        if self._prompt_ids is None or self._decode is None:
            raise RuntimeError(f"{self.name}: the task is not bound to a model; wrap the model with for_task first")

    def encode_prompts(self, tokenizer: Any, examples: list[Example]) -> torch.Tensor:
        self._bound()
        return self._prompt_ids([ex.prompt for ex in examples])

    def decode(self, tokenizer: Any, completion_ids: torch.Tensor) -> list[str]:
        """Image tokens as text: the token ids, space-separated (lossless; MMaDA's codes are not text tokens)."""
        return [" ".join(map(str, row.tolist())) for row in completion_ids]

    def images(self, completion_ids: torch.Tensor) -> list[Image.Image]:
        """Completion ids [N, L] -> N PIL images (MAGVIT-v2)."""
        self._bound()
        return [Image.fromarray(a.cpu().numpy()) for a in self._decode(completion_ids)]

    def reward(self, completion: str, example: Example) -> float:
        raise NotImplementedError(f"{self.name} scores decoded images in batches")

    def score(self, completion: str, example: Example) -> dict[str, Any]:
        raise NotImplementedError(f"{self.name} judges decoded images on a folder (judge_images)")


class EvaluationOnly:
    """A benchmark with held-out prompts only (``image.eval_tasks``): nothing trains on it."""

    name: str
    evaluation_only = True

    def _refuse(self, what: str) -> DataError:
        return DataError(f"{self.name} is an evaluation benchmark (image.eval_tasks): it has no {what}")

    def sample(self, rng: Any) -> Example:
        raise self._refuse("training prompts")

    def generate(self, n: int, seed: int, exclude: set[str] | None = None) -> list[Example]:
        raise self._refuse("training prompts")

    def batch_rewards(self, completions: list[str], completion_ids: Any, examples: list[Example]) -> list[float]:
        raise self._refuse("training reward")
