"""GSM8K and MATH500 as :class:`~ddmrl.tasks.base.Task` objects, for the paper profiles (d1, MaskGRPO on LLaDA).

Training prompts come from a training set (d1: ``openai/gsm8k`` train; ``ankner/math-500`` train), in d1's training
style (``diffu-grpo/data_utils.py``: generic ``<reasoning>``/``<answer>`` system prompt, no prefill); the held-out
set is the benchmark's test set in d1's evaluation style (its system prompts, ``<reasoning>`` prefill) and is
scored with d1's evaluation parsers (:mod:`ddmrl.tasks.d1_eval`, the ``python -m ddmrl.score`` rules). The training
reward is d1's (:func:`~ddmrl.tasks.d1_scoring.gsm8k_reward`, :func:`~ddmrl.tasks.d1_scoring.math_reward`).

These are chat tasks (:attr:`Task.chat`): a prompt reaches the model through the tokenizer's chat template as one
user turn (:meth:`chat_text`), as in d1, so they need a checkpoint whose tokenizer has one (LLaDA-8B-Instruct).
Sources are read on first use, not when the task is built, so validating params.yaml reads no data.
"""

from __future__ import annotations

import dataclasses
import random
from functools import cached_property
from typing import Any

from pydantic import Field

from ddmrl.config._base import Bool, Int, Section, Str, section
from ddmrl.io import DataError
from ddmrl.tasks.base import Example, Task
from ddmrl.tasks.benchmarks import Benchmark, load_benchmark
from ddmrl.tasks.d1_scoring import gsm8k_reward, math_reward

__all__ = ["Gsm8k", "Math500", "MathReasoning"]

REASONING_PREFILL = "<reasoning>"  # d1's assistant prefill at evaluation


@section
class Params(Section):
    """GSM8K and MATH500 (``ddmrl.tasks.math_reasoning``): d1's prompts, rewards and answer parsers."""

    train: Str = Field(min_length=1, description="Training set: a local file or directory, or a hub id.")
    eval: Str = Field(min_length=1, description="Test set, used whole and in file order (as d1 evaluates).")
    train_split: Str = Field("train", description="Split of the training set.")
    eval_split: Str = Field("test", description="Split of the test set.")
    completion_length: Int = Field(256, ge=1, description="Generation length in tokens (d1: 256).")
    legacy_reward_quirks: Bool = Field(False, description="Reproduce the quirks of d1's reward functions.")


class MathReasoning(Task):
    """A benchmark with a training set: ``train`` and ``eval`` are local files/directories (the download stage's
    ``hub_dir/<item>``) or hub ids (``ddmrl.tasks.benchmarks.load_benchmark``); ``train_split`` / ``eval_split``
    pick a split of a hub dataset or ``save_to_disk`` directory.

    ``legacy_reward_quirks`` reproduces d1's released reward code (its regexes without DOTALL; MATH's
    backspace ``\\b`` boxed test), see :mod:`ddmrl.tasks.d1_scoring`.
    """

    params = Params  # its section, task_params.<name> (ddmrl.config validates it)

    chat = True
    reasoning_traces = True  # GSM8K's worked solution, MATH's solution (where the training item has one)
    prompt_length = 1024  # a prompt longer than this many tokens is refused
    benchmark: str

    def __init__(
        self,
        train: str = "",
        eval: str = "",
        train_split: str = "train",
        eval_split: str = "test",
        completion_length: int = 256,
        legacy_reward_quirks: bool = False,
    ) -> None:
        for key, value in (("train", train), ("eval", eval)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{key} = {value!r}: name the {key} set (a local path or a hub id)")
        if not isinstance(completion_length, int) or completion_length < 1:
            raise ValueError(f"completion_length = {completion_length!r}: must be a positive integer")
        self.train, self.eval, self.train_split, self.eval_split = train, eval, train_split, eval_split
        self.completion_length = completion_length
        self.legacy_reward_quirks = legacy_reward_quirks

    @cached_property
    def _train_set(self) -> Benchmark:
        bench = load_benchmark(self.benchmark, self.train, split=self.train_split, style="train")
        return dataclasses.replace(bench, examples=[_tagged(ex, "train") for ex in bench.examples])

    @cached_property
    def _eval_set(self) -> Benchmark:
        bench = load_benchmark(self.benchmark, self.eval, split=self.eval_split, style="eval")
        return dataclasses.replace(bench, examples=[_tagged(ex, "test") for ex in bench.examples])

    def sample(self, rng: random.Random) -> Example:
        """One training item, uniformly from the training set."""
        return rng.choice(self._train_set.examples)

    def held_out(self, n: int, seed: int) -> list[Example]:
        """The test set in file order (all of it when ``n`` is at least its size, as d1 evaluates GSM8K and
        MATH500; else its first ``n`` items). ``seed`` is unused: the set is fixed."""
        return self._eval_set.examples[:n]

    def generate(self, n: int, seed: int, exclude: set[str] | None = None) -> list[Example]:
        """``n`` distinct training items drawn with ``seed`` (test ids never occur in the training set)."""
        pool = [ex for ex in self._train_set.examples if ex.id not in (exclude or set())]
        if len(pool) < n:
            raise DataError(f"{self.train}: {len(pool)} training items, {n} needed per draw")
        return random.Random(seed).sample(pool, n)

    def chat_text(self, example: Example, tokenizer: Any) -> str:
        """The model input: ``example.prompt`` as one user turn through the chat template, plus d1's
        ``<reasoning>`` prefill for test items (d1 evaluates with it and trains without)."""
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": example.prompt}], add_generation_prompt=True, tokenize=False
        )
        return text + REASONING_PREFILL if example.gold["split"] == "test" else text

    def reasoning_trace(self, example: Example) -> str | None:
        """The reference's reasoning (GSM8K's worked solution without its calculator annotations, MATH's solution),
        before ``</reasoning>``; None for an item without one."""
        return example.answer.split("\n</reasoning>", 1)[0].strip() or None

    @property
    def _scorer(self) -> Benchmark:  # d1's parsers need no items
        return Benchmark(name=self.benchmark, examples=[])

    def score(self, completion: str, example: Example) -> dict[str, Any]:
        return self._scorer.score(completion, example)

    def accuracy(self, scores: list[dict[str, Any]]) -> float:
        return self._scorer.accuracy(scores)


class Gsm8k(MathReasoning):
    """GSM8K: d1's reward against the text after ``####``; scored by d1's GSM8K parser."""

    name = "gsm8k"
    benchmark = "gsm8k"

    def reward(self, completion: str, example: Example) -> float:
        answer = example.gold["solution"].split("####", 1)[1].strip()
        return gsm8k_reward(completion, answer, self.legacy_reward_quirks)


class Math500(MathReasoning):
    """MATH500: d1's reward (``is_equiv`` of the last box and the answer, plus format); scored by d1's parser."""

    name = "math500"
    benchmark = "math500"

    def reward(self, completion: str, example: Example) -> float:
        return math_reward(completion, example.gold["ground_truth"], self.legacy_reward_quirks)


def _tagged(example: Example, split: str) -> Example:
    """``example`` with its split in the id (train and test files number their items alike) and in ``gold``."""
    return dataclasses.replace(example, id=f"{split}-{example.id}", gold={**example.gold, "split": split})
