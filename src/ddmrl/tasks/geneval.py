"""``geneval``: GenEval's prompts for a real text-to-image model in MMaDA's layout (the paper profile
``paper_mmada_geneval``: RebRL's and MaskGRPO's GenEval table on MMaDA-8B-Base).

* Prompts: lines of GenEval's ``evaluation_metadata.jsonl`` (553; djghosh13/geneval ``prompts/``) are the held-out
  set; training prompts come from another file in the same schema (MaskGRPO trains on its
  ``dataset/GenEval/train_metadata.jsonl``).
* The completion is ``num_image_tokens`` image tokens of MMaDA's layout (``ddmrl.models.layout.MMaDALayout``,
  which ``ddmrl.models.layout.for_task`` builds from the checkpoint's adapter and binds to this task with
  :meth:`GenEval.bind`); decoded to pixels with MAGVIT-v2.
* Reward (RL): the images scored by the reward models of ``reward_models``
  (``ddmrl.rewards.registry.reward_from_params``; MaskGRPO and RebRL use UnifiedReward through a server, its
  score / 5).
* Evaluation: the images in GenEval's folder layout, judged by the official evaluator
  (``ddmrl.rewards.geneval_bridge.run_geneval``, with the environment of ``evaluator``), summarised by
  ``ddmrl.geneval.summarize``.

Sources are read on first use, and reward models load on first use, so validating params.yaml reads nothing.
"""

from __future__ import annotations

import random
import tempfile
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, model_validator

from ddmrl.config._base import Float, Int, Section, Str, section
from ddmrl.config.tasks import RewardEntry, check_reward_entries
from ddmrl.io import DataError, read_jsonl
from ddmrl.rewards.geneval_bridge import GenEvalEnv, run_geneval, write_geneval_layout
from ddmrl.rewards.registry import reward_from_params
from ddmrl.tasks.base import Example
from ddmrl.tasks.mmada_images import MMaDAImageTask

if TYPE_CHECKING:
    import torch

__all__ = ["GenEval"]

METADATA_KEYS = ("tag", "prompt", "include")


@section
class GenEvalEvaluator(Section):
    """The official GenEval evaluator, run in its own environment (``ddmrl.rewards.geneval_bridge.GenEvalEnv``)."""

    geneval_repo: Str = Field(description="Checkout of github.com/djghosh13/geneval.")
    python: Str = Field(description="Python of GenEval's environment (python 3.9, mmdet 2.x).")
    model_path: Str = Field(description="The detector's folder (--model-path).")
    model_config: Str | None = Field(None, description="--model-config (default: mmdet's bundled config).")
    options: dict[Str, Any] = Field(default_factory=dict, description="Further options of evaluate_images.py.")
    timeout_s: Float | None = Field(None, gt=0, description="Seconds before the evaluator is stopped.")


@section
class Params(Section):
    """GenEval (``ddmrl.tasks.geneval``) for real text-to-image models, in MMaDA's layout."""

    eval: Str = Field(min_length=1, description="GenEval's evaluation_metadata.jsonl (553 prompts).")
    train: Str = Field("", description="Training prompts in the same schema (e.g. MaskGRPO's train_metadata.jsonl).")
    num_image_tokens: Int = Field(1024, ge=1, description="Image tokens (512 px with MAGVIT-v2 f = 16: 1024).")
    max_seq_length: Int = Field(256, ge=1, description="Text tokens of the prompt (MaskGRPO's RL: 256).")
    reward_models: Annotated[dict[Str, RewardEntry], Field(min_length=1)] | None = Field(
        None, description="The training reward: a weighted sum of reward models, {entry: {model, weight, ...}}."
    )
    evaluator: GenEvalEvaluator | None = Field(None, description="The official evaluator, for held-out scores.")

    @model_validator(mode="after")
    def _check(self) -> Params:
        check_reward_entries(self.reward_models, "reward_models")
        return self


class GenEval(MMaDAImageTask):
    """GenEval prompts; images scored by reward models (RL) and by the official evaluator (evaluation).

    ``eval`` / ``train``: metadata JSONL files. ``num_image_tokens``: image tokens per sample (MMaDA at 512 px: 1024);
    ``max_seq_length``: caption tokens of the layout (MMaDA's RL: 256). ``reward_models``: the params section of
    ``ddmrl.rewards.registry.reward_from_params``. ``evaluator``: ``ddmrl.rewards.geneval_bridge.GenEvalEnv`` fields
    (``geneval_repo``, ``python``, ``model_path``, ...).
    """

    params = Params  # its section, task_params.<name> (ddmrl.config validates it)

    name = "geneval"

    def __init__(
        self,
        eval: str = "",
        train: str = "",
        num_image_tokens: int = 1024,
        max_seq_length: int = 256,
        reward_models: dict[str, Any] | None = None,
        evaluator: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(eval, str) or not eval:
            raise ValueError(f"eval = {eval!r}: name GenEval's evaluation_metadata.jsonl")
        super().__init__(num_image_tokens, max_seq_length)

        self.eval, self.train = eval, train
        self.reward_model = reward_from_params(reward_models) if reward_models else None  # nothing loaded yet
        self.evaluator = GenEvalEnv(**evaluator) if evaluator else None

    # ----------------------------------------------------------------------------------------------- prompts

    def _read(self, path: str, split: str) -> list[Example]:
        rows = read_jsonl(path, required=METADATA_KEYS)
        return [
            Example(
                id=f"{split}-{i}",
                prompt=r["prompt"],
                answer="",
                gold={"prompt": r["prompt"], "metadata": r, "split": split},
            )
            for i, r in enumerate(rows)
        ]

    @cached_property
    def _train_set(self) -> list[Example]:
        if not self.train:
            raise DataError("geneval: train is not set (a metadata JSONL of training prompts, e.g. MaskGRPO's)")
        return self._read(self.train, "train")

    @cached_property
    def _held_prompts(self) -> set[str]:
        return {ex.prompt for ex in self._read(self.eval, "test")}

    def held_out(self, n: int, seed: int) -> list[Example]:
        """The evaluation prompts in file order (all 553 when ``n`` is at least that); ``seed`` is unused."""
        return self._read(self.eval, "test")[:n]

    def sample(self, rng: random.Random) -> Example:
        return rng.choice(self._train_set)

    def generate(self, n: int, seed: int, exclude: set[str] | None = None) -> list[Example]:
        """``n`` distinct training prompts drawn with ``seed``; a training prompt whose text is a held-out one is
        never drawn (GenEval's prompts must stay unseen)."""
        held = self._held_prompts
        pool = [ex for ex in self._train_set if ex.id not in (exclude or set()) and ex.prompt not in held]
        if len(pool) < n:
            raise DataError(f"{self.train}: {len(pool)} training prompts outside the held-out ones, {n} needed")
        return random.Random(seed).sample(pool, n)

    # ----------------------------------------------------------------------------------------------- scores

    def batch_rewards(self, completions: list[str], completion_ids: Any, examples: list[Example]) -> list[float]:
        """The reward models' scores of the decoded images for their prompts."""
        if self.reward_model is None:
            raise DataError("geneval: reward_models is not set (e.g. {unifiedreward: {base_url: ...}})")
        return self.reward_model.score(self.images(completion_ids), [ex.prompt for ex in examples])

    def judge_images(
        self, folder: str | Path, examples: list[Example], texts: list[list[str]], completion_ids: list[torch.Tensor]
    ) -> list[dict[str, Any]]:
        """Write each example's images (``completion_ids[i]`` [K, L]) in GenEval's layout under ``folder`` and run
        the official evaluator on it; its results rows."""
        if self.evaluator is None:
            raise DataError("geneval: evaluator is not set (geneval_repo, python, model_path of the official one)")
        items = [(ex.gold["metadata"], self.images(ids)) for ex, ids in zip(examples, completion_ids, strict=True)]
        write_geneval_layout(folder, items)
        with tempfile.TemporaryDirectory() as tmp:  # the stage writes the rows where the DAG says
            return run_geneval(folder, Path(tmp) / "results.jsonl", self.evaluator)
