"""``hps``: HPSv3 on HPS's evaluation prompts, the human-preference column of RebRL's text-to-image table (MMaDA
9.61 -> RebRL 13.01; Zhang et al. 2026, Table 2), for a real model in MMaDA's layout (``paper_mmada_geneval``).

* Prompts: MaskGRPO's ``dataset/HPS/v3_eval_sample.jsonl`` (500 rows ``{caption, image_file, aspect_ratio,
  category, prompt_id}``, 100 per category: Plants, Architecture, Natural Scenery, Arts, Animals); every row is
  held out and nothing trains on them (``image.eval_tasks``).
* Score: the mean over every image of the scorer's value, HPSv3's ``mu`` by default (``HPSv3Score``,
  Ma et al. 2025, "HPSv3: Towards Wide-Spectrum Human Preference Score"), and its mean per category. Images are
  written as PNGs (``<folder>/<prompt_id>/<k>.png``) and scored as read back from disk.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from PIL import Image
from pydantic import Field, model_validator

from ddmrl.config._base import Int, Section, Str, section
from ddmrl.config.tasks import RewardEntry, check_reward_entries
from ddmrl.io import read_jsonl
from ddmrl.rewards.local_models import HPSv3Score
from ddmrl.rewards.registry import reward_from_params
from ddmrl.tasks.base import Example
from ddmrl.tasks.mmada_images import EvaluationOnly, MMaDAImageTask

if TYPE_CHECKING:
    import torch

__all__ = ["HPSBench"]

#: the score without ``scorer``: HPSv3 (imported here, so that its module is a code dep of this task's stages)
DEFAULT_SCORER: dict[str, Any] = {HPSv3Score.name: {}}


@section
class Params(Section):
    """HPSv3 on HPS's evaluation prompts (``ddmrl.tasks.hps``), an evaluation benchmark in MMaDA's layout."""

    eval: Str = Field(min_length=1, description="HPS's evaluation prompts (MaskGRPO's v3_eval_sample.jsonl, 500).")
    num_image_tokens: Int = Field(1024, ge=1, description="Image tokens (as geneval's).")
    max_seq_length: Int = Field(256, ge=1, description="Text tokens of the prompt (as geneval's).")
    scorer: Annotated[dict[Str, RewardEntry], Field(min_length=1)] | None = Field(
        None, description="The score: reward models as in reward_models (default: HPSv3, {hpsv3: {}})."
    )

    @model_validator(mode="after")
    def _check(self) -> Params:
        check_reward_entries(self.scorer, "scorer")
        return self


class HPSBench(EvaluationOnly, MMaDAImageTask):
    """HPS's evaluation prompts (``eval``: a JSONL with ``caption``; ``prompt_id`` and ``category`` when present),
    scored by ``scorer`` (a ``ddmrl.rewards.registry.reward_from_params`` section; default HPSv3)."""

    params = Params  # its section, task_params.<name> (ddmrl.config validates it)

    name = "hps"

    def __init__(
        self,
        eval: str = "",
        num_image_tokens: int = 1024,
        max_seq_length: int = 256,
        scorer: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(eval, str) or not eval:
            raise ValueError(f"eval = {eval!r}: name HPS's evaluation prompts (e.g. MaskGRPO's v3_eval_sample.jsonl)")
        super().__init__(num_image_tokens, max_seq_length)

        self.eval = eval
        self.scorer = reward_from_params(scorer or DEFAULT_SCORER, key="scorer")  # nothing loaded yet

    @cached_property
    def _prompts(self) -> list[Example]:
        rows = read_jsonl(self.eval, required=("caption",))
        return [
            Example(
                id=str(r.get("prompt_id", i)),
                prompt=r["caption"],
                answer="",
                gold={"prompt": r["caption"], "category": r.get("category", "")},
            )
            for i, r in enumerate(rows)
        ]

    def held_out(self, n: int, seed: int) -> list[Example]:
        """The prompts in file order (all of them when ``n`` is at least their number); ``seed`` is unused."""
        return self._prompts[:n]

    def judge_images(
        self, folder: str | Path, examples: list[Example], texts: list[list[str]], completion_ids: list[torch.Tensor]
    ) -> list[dict[str, Any]]:
        """Write each example's images (``completion_ids[i]`` [K, L]) as ``<folder>/<id>/<k>.png`` and score them as
        read back; one row per image."""
        rows, images = [], []
        for ex, ids in zip(examples, completion_ids, strict=True):
            for k, image in enumerate(self.images(ids)):
                path = Path(folder) / ex.id / f"{k}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                image.save(path)
                with Image.open(path) as im:
                    images.append(im.convert("RGB"))
                rows.append({"id": ex.id, "category": ex.gold["category"], "prompt": ex.prompt, "sample": k,
                             "filename": str(path)})  # fmt: skip
        for row, value in zip(rows, self.scorer.score(images, [r["prompt"] for r in rows]), strict=True):
            row["score"] = value
        return rows

    def summarize_images(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """``score``: the mean over images (HPSv3's table value); ``per_category``: the mean per category."""
        by_category: dict[str, list[float]] = {}
        for r in rows:
            by_category.setdefault(r["category"], []).append(r["score"])
        return {
            "score": sum(r["score"] for r in rows) / len(rows),
            "per_category": {c: sum(v) / len(v) for c, v in sorted(by_category.items())},
            "n_images": len(rows),
        }
