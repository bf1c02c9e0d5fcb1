"""The Task interface: one object owns a task's data, prompts, answer checking and reward.

Following nanochat's ``tasks/``: the RL reward and the reported metric come from the same object, so the
training signal and the table cannot drift apart. Text is plain ``str``; the tokenizer
(``ddmrl.models.tokenizer``) is character level, except for the atomic ``special_tokens`` a task declares,
so a task can state its prompt and completion budgets in tokens.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Example:
    """One task instance.

    Attributes:
        id: stable identifier, unique within the task (used for train/eval disjointness).
        prompt: the model input text (no special tokens other than the task's own).
        answer: a reference completion for SFT, in the format the scorer expects.
        gold: JSON-serialisable data the scorer needs (solution, numbers, target, ...).
    """

    id: str
    prompt: str
    answer: str
    gold: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Example:
        return cls(id=record["id"], prompt=record["prompt"], answer=record["answer"], gold=record.get("gold", {}))


class Task(ABC):
    """A task: generator of examples, d1-style reward and evaluation score."""

    name: str
    #: the model of the task's section, ``task_params.<name>``, by which ``ddmrl.config`` validates it: a
    #: :func:`ddmrl.config.section` in the task's module (its ``Params``) whose fields are the constructor's parameters
    params: type
    #: what the completion is: "text", or "image" (a grid of image-code tokens, see ``geneval_mini``)
    modality: str = "text"
    #: tokens after the completion that are part of the layout, never generated (MMaDA's ``<eoi>`` for images)
    completion_suffix: tuple[str, ...] = ()
    #: image tasks: how ``ddmrl.models.layout.for_task`` wraps the model: "tokens" (the task's own image tokens in
    #: MMaDA's order) or "mmada" (MMaDA-8B's own token layout, from the checkpoint's adapter)
    image_layout: str = "tokens"
    #: prompts go through the tokenizer's chat template (:meth:`chat_text`; real checkpoints), not character-encoded
    chat: bool = False
    #: atomic multi-character tokens this task's text uses (each becomes one token)
    special_tokens: tuple[str, ...] = ()
    #: every single character this task's prompts and answers may contain
    alphabet: str = ""
    #: an evaluation benchmark with held-out prompts only (``image.eval_tasks``): no training draw, no reward
    evaluation_only: bool = False
    #: image tasks whose protocol fixes the images per prompt (DPG-Bench's 2x2 grid: 4); None: the evaluate section's
    samples_per_prompt: int | None = None
    #: training examples carry a ground-truth reasoning trace (:meth:`reasoning_trace`), as IGPO's inpainting needs
    reasoning_traces: bool = False
    #: token budgets (a special token counts as one token, every other character as one)
    prompt_length: int
    completion_length: int

    @abstractmethod
    def sample(self, rng: random.Random) -> Example:
        """Draw one random example (unlimited training data)."""

    def generate(self, n: int, seed: int, exclude: set[str] | None = None) -> list[Example]:
        """``n`` distinct examples drawn with ``seed``, none of whose ids is in ``exclude``."""
        rng, exclude, out, seen = random.Random(seed), exclude or set(), [], set()
        for _ in range(1000 * n + 1000):
            if len(out) == n:
                return out
            ex = self.sample(rng)
            if ex.id not in exclude and ex.id not in seen:
                seen.add(ex.id)
                out.append(ex)
        raise ValueError(f"{self.name}: could not draw {n} distinct examples outside the excluded set")

    def held_out(self, n: int, seed: int) -> list[Example]:
        """The held-out evaluation set: ``n`` distinct examples drawn with ``seed`` (training draws exclude their
        ids)."""
        return self.generate(n, seed)

    @staticmethod
    def item_level(item_id: str) -> str | None:
        """An item's difficulty level from its id, for the tables' per-level rows (None: the task has no levels)."""
        return None

    def chat_text(self, example: Example, tokenizer: Any) -> str:
        """The model input text of a chat task (:attr:`chat`)."""
        raise NotImplementedError(f"{self.name} is not a chat task")

    def reasoning_trace(self, example: Example) -> str | None:
        """The ground-truth reasoning of a training example, final answer excluded: a substring of
        ``example.answer`` (None: this example has none). Tasks with traces set :attr:`reasoning_traces`."""
        return None

    def trace_tokens(self, tokenizer: Any, example: Example) -> tuple[int, list[int]] | None:
        """Where the reasoning trace sits in the reference completion: (its first completion position, its token ids),
        or None without a trace. The position is the token count of ``example.answer`` before the trace (IGPO's
        hints are clamped there; Zhao et al. 2026, Sec. 3)."""
        trace = self.reasoning_trace(example)
        if not trace:
            return None
        start = example.answer.find(trace)
        if start < 0:
            raise ValueError(f"{self.name} example {example.id}: its reasoning trace is not part of its answer")
        from ddmrl.models.tokenizer import encode  # the reward and tables stages score texts without torch

        return len(encode(tokenizer, example.answer[:start])), encode(tokenizer, trace)

    def encode_prompts(self, tokenizer: Any, examples: list[Example]) -> Any:
        """[N, P] prompt ids when the task lays out its own prompts (MMaDA's text-to-image layout); ``None``: the
        generic encodings of ``ddmrl.tasks.encoding.encode_prompts``."""
        return None

    def decode(self, tokenizer: Any, completion_ids: Any) -> list[str]:
        """The text of each completion [N, L] (before the first EOS; a chat task without special tokens, as d1
        decodes a real checkpoint's completions)."""
        from ddmrl.models.tokenizer import decode_completion  # the reward and tables stages score texts without torch

        return [decode_completion(tokenizer, row.tolist(), self.chat) for row in completion_ids]

    def batch_rewards(self, completions: list[str], completion_ids: Any, examples: list[Example]) -> list[float]:
        """Rewards of a batch, ``examples[i]`` being the example of completion ``i``: :meth:`reward` of each text,
        unless the task scores something else (decoded images)."""
        return [self.reward(c, ex) for c, ex in zip(completions, examples, strict=True)]

    @abstractmethod
    def reward(self, completion: str, example: Example) -> float:
        """Training reward of one completion (d1's reward function for this task)."""

    @abstractmethod
    def score(self, completion: str, example: Example) -> dict[str, Any]:
        """Evaluation verdict of one completion (d1's evaluation parser); has a bool ``correct`` key."""

    def accuracy(self, scores: list[dict[str, Any]]) -> float:
        """Held-out accuracy in percent from per-example ``score`` dicts (d1's aggregation)."""
        return 100.0 * sum(bool(s["correct"]) for s in scores) / max(len(scores), 1)

    @staticmethod
    def item_score(score: dict[str, Any]) -> tuple[float, float]:
        """One held-out item's (numerator, denominator) of :meth:`accuracy`: the accuracy is sum(numerators) /
        sum(denominators) over the items (``ddmrl.stats`` bootstraps it from these)."""
        return 100.0 * bool(score["correct"]), 1.0

    def summarize_images(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Image tasks: the metrics of ``judge_images``' rows. GenEval's summary by default (per-tag accuracy,
        Overall = the unweighted mean of tags, in percent), with ``accuracy`` = Overall."""
        from ddmrl.geneval import summarize  # image tasks only

        summary = summarize(rows)
        return {"accuracy": summary["overall"], **summary}
