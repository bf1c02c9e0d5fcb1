"""Tasks and their registry: embedded (text: d1-style rewards and metrics; image: GenEval-style) and the paper
profiles' GSM8K and MATH500 (d1's prompts, rewards and parsers) and GenEval (MMaDA's layout)."""

from __future__ import annotations

from typing import Any

from ddmrl.tasks.arith import Arith
from ddmrl.tasks.base import Example, Task
from ddmrl.tasks.chain import Chain
from ddmrl.tasks.countdown3 import Countdown3
from ddmrl.tasks.geneval import GenEval
from ddmrl.tasks.geneval_mini import GenEvalMini
from ddmrl.tasks.math_reasoning import Gsm8k, Math500
from ddmrl.tasks.sudoku4 import Sudoku4

__all__ = [
    "TASKS",
    "Arith",
    "Chain",
    "Countdown3",
    "Example",
    "GenEval",
    "GenEvalMini",
    "Gsm8k",
    "Math500",
    "Sudoku4",
    "Task",
    "make_task",
]

TASKS: dict[str, type[Task]] = {
    "sudoku4": Sudoku4,
    "countdown3": Countdown3,
    "arith": Arith,
    "chain": Chain,
    "geneval_mini": GenEvalMini,
    "geneval": GenEval,
    "gsm8k": Gsm8k,
    "math500": Math500,
}


def make_task(name: str, **params: Any) -> Task:
    """Instantiate the task registered as ``name`` with its constructor ``params``.

    >>> make_task("sudoku4", num_empty=6).num_empty
    6
    """
    if name not in TASKS:
        raise ValueError(f"unknown task '{name}'; choose one of {', '.join(sorted(TASKS))}")
    return TASKS[name](**params)
