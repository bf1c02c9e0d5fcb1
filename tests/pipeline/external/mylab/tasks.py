"""A researcher's own task, outside ddmrl: write a word of ``length`` letters backwards. A task's name is part of
run and file names, so it is named by an entry point of the ``ddmrl.tasks`` group (``../mylab-0.1.dist-info``:
``reverse = mylab.tasks:Reverse``), and params.yaml says ``tasks: [reverse]``."""

from __future__ import annotations

import random
from typing import Any

from pydantic import Field

from ddmrl.config._base import Int, Section, section
from ddmrl.tasks.base import Example, Task

LETTERS = "abcde"


@section
class Params(Section):
    """Write a word backwards (``mylab.tasks``)."""

    length: Int = Field(5, ge=2, le=8, description="Letters per word.")


class Reverse(Task):
    """A word of ``length`` letters from ``abcde``; the answer is the word reversed, then an end token."""

    params = Params
    name = "reverse"
    special_tokens = ("<rev>",)
    alphabet = LETTERS

    def __init__(self, length: int = 5) -> None:
        self.length = length
        self.prompt_length = 1 + length
        self.completion_length = length + 2  # the word and room for the end token

    def sample(self, rng: random.Random) -> Example:
        word = "".join(rng.choice(LETTERS) for _ in range(self.length))
        return Example(id=word, prompt="<rev>" + word, answer=word[::-1], gold={"answer": word[::-1]})

    def reward(self, completion: str, example: Example) -> float:
        """The fraction of letters in place (partial credit, so that a group's rewards spread)."""
        gold = example.gold["answer"]
        return sum(a == b for a, b in zip(completion.strip(), gold, strict=False)) / len(gold)

    def score(self, completion: str, example: Example) -> dict[str, Any]:
        return {"correct": completion.strip() == example.gold["answer"], "prediction": completion.strip()}
