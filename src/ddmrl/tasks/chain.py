"""``chain``: multi-step variable tracking with a reasoning trace, in d1's GSM8K format, scored and rewarded by d1.

Prompt ``<chain>c=b,e=4,a=7,d=e,b=a?c``: shuffled assignments, one of them a digit, the others copying another
variable, and a query. Following the query's chain back to its digit takes ``hops`` lookups; ``distractors`` more
assignments (a second chain) share the prompt. Reference answer (d1's ``<reasoning>``/``<answer>`` layout, one
lookup per line, so every example carries the ground-truth reasoning chunks a method such as IGPO inpaints)::

    <reasoning>
    c=b
    b=a
    a=7
    </reasoning>
    <answer>
    7
    </answer>

Reward: d1's GSM8K training reward (:func:`~ddmrl.tasks.d1_scoring.gsm8k_reward`: XML count, soft and strict
format, integer answer, 2.0 for the right answer; at most 4.0). Score: d1's GSM8K evaluation parser
(:func:`~ddmrl.tasks.d1_eval.gsm8k_correct`).

Why it replaces three-number Countdown in the embedded default: Countdown asks for a search with no trace to learn
from, and the tiny model stayed at chance (0-2 %) in every row. Multi-step arithmetic in the same format
(:mod:`ddmrl.tasks.arith`) was tried first: the tiny model did not learn the digit facts (14-30 % of single trace
steps right, 5-17 % of answers, with 600 or 1200 pre-training steps on that task alone), and RL did not move it. Each
step here is a lookup, which the model's attention can learn; the chain length sets the difficulty.
"""

from __future__ import annotations

import random
import string
from typing import Any

from pydantic import Field, model_validator

from ddmrl.config._base import Int, Section, refuse, section
from ddmrl.tasks.base import Example, Task
from ddmrl.tasks.d1_eval import gsm8k_correct, gsm8k_extract
from ddmrl.tasks.d1_scoring import gsm8k_reward

__all__ = ["Chain"]


@section
class Params(Section):
    """Multi-step variable tracking with a reasoning trace in d1's GSM8K format (``ddmrl.tasks.chain``)."""

    hops: Int = Field(3, ge=1, description="Lookups from the query to its digit (trace lines).")
    distractors: Int = Field(3, ge=0, description="Assignments of a second chain in the same prompt.")
    num_names: Int = Field(10, ge=1, le=26, description="Variable names to draw from (a, b, ...).")

    @model_validator(mode="after")
    def _check(self) -> Params:
        if self.hops + self.distractors > self.num_names:
            raise refuse(
                "num_names", self.num_names, f"must be >= hops + distractors = {self.hops + self.distractors}"
            )
        return self


class Chain(Task):
    """A query chain of ``hops`` assignments (hops - 1 copies, then a digit) and ``distractors`` assignments of a
    second chain, over ``num_names`` variable names."""

    params = Params  # its section, task_params.<name> (ddmrl.config validates it)

    name = "chain"
    special_tokens = ("<chain>", "<reasoning>", "</reasoning>", "<answer>", "</answer>")
    reasoning_traces = True

    def __init__(self, hops: int = 3, distractors: int = 3, num_names: int = 10) -> None:
        if hops < 1 or distractors < 0:
            raise ValueError(f"chain: need hops >= 1 and distractors >= 0, got {hops}, {distractors}")
        if not hops + distractors <= num_names <= 26:
            raise ValueError(f"chain: need hops + distractors <= num_names <= 26, got {num_names}")
        self.hops, self.distractors, self.num_names = hops, distractors, num_names
        self.names = string.ascii_lowercase[:num_names]
        self.alphabet = self.names + "0123456789=,?\n"
        n = hops + distractors
        self.prompt_length = 1 + 4 * n - 1 + 2  # <chain> a=b,... ?q
        self.completion_length = 2 + 4 * hops + 2 + 2 + 1 + 1 + 2 + 1  # trace lines, tags, answer, EOS

    def sample(self, rng: random.Random) -> Example:
        names = rng.sample(self.names, self.hops + self.distractors)
        chain, other = names[: self.hops], names[self.hops :]  # chain[0] holds the digit, chain[-1] is the query
        value = rng.randrange(10)
        lines = [f"{chain[0]}={value}"] + [f"{chain[i]}={chain[i - 1]}" for i in range(1, self.hops)]
        statements = list(lines)
        if other:
            statements.append(f"{other[0]}={rng.randrange(10)}")
            statements += [f"{other[i]}={other[i - 1]}" for i in range(1, len(other))]
        rng.shuffle(statements)
        trace = lines[::-1]  # from the query back to the digit
        prompt = ",".join(statements) + "?" + chain[-1]
        return Example(
            id=prompt,
            prompt="<chain>" + prompt,
            answer="<reasoning>\n" + "\n".join(trace) + "\n</reasoning>\n<answer>\n" + str(value) + "\n</answer>\n",
            gold={"reasoning": trace, "answer": str(value)},
        )

    def reasoning_trace(self, example: Example) -> str:
        """The lookup lines inside ``<reasoning>`` (the answer digit after them is not part of it)."""
        return "\n".join(example.gold["reasoning"])

    def reward(self, completion: str, example: Example) -> float:
        """d1's GSM8K training reward (at most 4.0; 2.0 of it for the right answer)."""
        return gsm8k_reward(completion, example.gold["answer"])

    def score(self, completion: str, example: Example) -> dict[str, Any]:
        """d1's GSM8K evaluation verdict, and the parsed prediction."""
        return {
            "correct": gsm8k_correct(completion, float(example.gold["answer"])),
            "prediction": gsm8k_extract(completion),
        }
