"""``dpg``: DPG-Bench (Hu et al. 2024, "ELLA: Equip Diffusion Models with LLM for Enhanced Semantic Alignment"), dense
prompts judged by VQA, for a real model in MMaDA's layout (``paper_mmada_geneval``; MaskGRPO evaluates it with 4
images per prompt, 32 steps, CFG 3.5).

* Prompts: ``eval``, MaskGRPO's ``dataset/DPG/dpg_bench.jsonl`` (1065 rows ``{item_id, prompt}``); questions and
  their dependencies: ``questions``, ELLA's ``dpg_bench/dpg_bench.csv``. Every prompt is held out and nothing trains
  on them (``image.eval_tasks``).
* Protocol (ELLA's ``dpg_bench/README.md`` and ``compute_dpg_bench.py``): 4 images per prompt tiled 2x2 as
  ``<folder>/<item_id>.png``, every question asked of each tile by the VQA model (``vqa``: mPLUG-large, or a server
  speaking :class:`ddmrl.rewards.dpg.VQAServerClient`'s protocol), dependencies zeroed, the DPG score is the mean
  over images x 100 (:func:`ddmrl.rewards.dpg.compute_dpg_bench`, the reference's aggregation).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from ddmrl.config._base import Bool, Float, Int, Section, Str, refuse, section
from ddmrl.io import DataError, read_jsonl
from ddmrl.rewards.dpg import (
    category_of,
    compute_dpg_bench,
    load_dpg_images,
    load_dpg_questions,
    tile_grid,
    vqa_from_params,
)
from ddmrl.tasks.base import Example
from ddmrl.tasks.mmada_images import EvaluationOnly, MMaDAImageTask

if TYPE_CHECKING:
    import torch

__all__ = ["DPGBench"]

PIC_NUM = 4  # the 2x2 grid (dist_eval.sh: PIC_NUM=4)


@section
class VQAParams(Section):
    """DPG-Bench's VQA model (``ddmrl.rewards.dpg.vqa_from_params``)."""

    model: Literal["mplug", "vqa_server"] = Field("mplug", description="mPLUG-large in-process, or a VQA server.")
    model_dir: Str | None = Field(None, description="mplug: the ModelScope model folder.")
    url: Str | None = Field(None, description="vqa_server: the server's URL.")
    device: Str | None = Field(None, description="mplug: the device (default: the GPU when there is one).")
    timeout_s: Float | None = Field(None, gt=0, description="vqa_server: seconds per request.")

    @model_validator(mode="after")
    def _check(self) -> VQAParams:
        options = {"mplug": ("model_dir", "device"), "vqa_server": ("url", "timeout_s")}
        needs = options[self.model][0]
        if getattr(self, needs) is None:
            raise refuse(needs, None, f"vqa model {self.model} needs {needs}")
        for other in options["vqa_server" if self.model == "mplug" else "mplug"]:
            if getattr(self, other) is not None:
                raise refuse(other, getattr(self, other), f"not an option of vqa model {self.model}")
        return self


@section
class Params(Section):
    """DPG-Bench (``ddmrl.tasks.dpg``), an evaluation benchmark in MMaDA's layout: 4 images per prompt, 2x2."""

    eval: Str = Field(min_length=1, description="DPG-Bench's prompts (MaskGRPO's dpg_bench.jsonl, 1065).")
    questions: Str = Field(min_length=1, description="DPG-Bench's questions (ELLA's dpg_bench/dpg_bench.csv).")
    num_image_tokens: Int = Field(1024, ge=1, description="Image tokens (as geneval's).")
    max_seq_length: Int = Field(256, ge=1, description="Text tokens of the prompt (as geneval's).")
    vqa: VQAParams = Field(description="The VQA model that answers the questions (ELLA's: mPLUG-large).")
    legacy_skip_first_question: Bool = Field(
        False, description="Reproduce ELLA's prepare_dpg_data, which drops the CSV's first question."
    )


class DPGBench(EvaluationOnly, MMaDAImageTask):
    """DPG-Bench prompts (``eval``: JSONL ``{item_id, prompt}``) and questions (``questions``: ``dpg_bench.csv``),
    judged by ``vqa`` (``{model: mplug, model_dir}`` or ``{model: vqa_server, url}``)."""

    params = Params  # its section, task_params.<name> (ddmrl.config validates it)

    name = "dpg"
    samples_per_prompt = PIC_NUM

    def __init__(
        self,
        eval: str = "",
        questions: str = "",
        num_image_tokens: int = 1024,
        max_seq_length: int = 256,
        vqa: dict[str, Any] | None = None,
        legacy_skip_first_question: bool = False,
    ) -> None:
        files = (("eval", eval, "MaskGRPO's dpg_bench.jsonl"), ("questions", questions, "ELLA's dpg_bench.csv"))
        for key, value, what in files:
            if not isinstance(value, str) or not value:
                raise ValueError(f"{key} = {value!r}: name DPG-Bench's {what}")
        super().__init__(num_image_tokens, max_seq_length)
        if not isinstance(vqa, dict):
            raise ValueError(f"vqa = {vqa!r}: name the VQA model ({{model: mplug, model_dir: DIR}} or a vqa_server)")

        self.eval, self.questions, self.legacy_skip_first_question = eval, questions, legacy_skip_first_question
        self.vqa = vqa_from_params(vqa)  # nothing loaded yet

    @cached_property
    def _prompts(self) -> list[Example]:
        rows = read_jsonl(self.eval, required=("item_id", "prompt"))
        return [
            Example(id=str(r["item_id"]), prompt=r["prompt"], answer="", gold={"prompt": r["prompt"]}) for r in rows
        ]

    def held_out(self, n: int, seed: int) -> list[Example]:
        """The prompts in file order (all of them when ``n`` is at least their number); ``seed`` is unused."""
        return self._prompts[:n]

    def judge_images(
        self, folder: str | Path, examples: list[Example], texts: list[list[str]], completion_ids: list[torch.Tensor]
    ) -> list[dict[str, Any]]:
        """Tile each example's 4 images (``completion_ids[i]`` [4, L]) as ``<folder>/<item_id>.png``, score the grids
        read back with the VQA model; one row per item (its score in [0, 1], per tile, and the last tile's
        per-question scores by category, which DPG's category scores pool)."""
        Path(folder).mkdir(parents=True, exist_ok=True)
        size = None
        for ex, ids in zip(examples, completion_ids, strict=True):
            tiles = self.images(ids)
            if len(tiles) != PIC_NUM:
                raise DataError(f"dpg: {len(tiles)} images for item {ex.id}; DPG-Bench tiles exactly {PIC_NUM}")
            size = tiles[0].width
            tile_grid(tiles).save(Path(folder) / f"{ex.id}.png")
        questions = load_dpg_questions(self.questions, self.legacy_skip_first_question)
        result = compute_dpg_bench(load_dpg_images(folder), questions, self.vqa, size, PIC_NUM)
        rows = []
        for ex in examples:
            scored, tuples = result.per_image[ex.id], questions[ex.id].tuples
            categories: dict[str, list[float]] = {}
            for qid, value in scored.last_crop_raw.items():
                categories.setdefault(category_of(tuples[qid])[1], []).append(value)
            path = str(Path(folder) / f"{ex.id}.png")
            rows.append({"id": ex.id, "prompt": ex.prompt, "filename": path, "score": scored.score,
                         "crop_scores": scored.crop_scores, "categories": categories})  # fmt: skip
        return rows

    def summarize_images(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """``score``: DPG's score (the mean image score x 100); ``l1`` / ``l2``: its category scores x 100 (pooled
        over images, the last tile's pre-dependency answers, as the reference computes them)."""
        l2: dict[str, list[float]] = {}
        for r in rows:
            for category, values in r["categories"].items():
                l2.setdefault(category, []).extend(values)
        l1: dict[str, list[float]] = {}
        for category, values in l2.items():
            l1.setdefault(category.split("-")[0].strip(), []).extend(values)

        def mean100(values: list[float]) -> float:
            return 100.0 * sum(values) / len(values)

        return {
            "score": mean100([r["score"] for r in rows]),
            "l1": {k: mean100(v) for k, v in sorted(l1.items())},
            "l2": {k: mean100(v) for k, v in sorted(l2.items())},
            "n_images": len(rows),
        }
