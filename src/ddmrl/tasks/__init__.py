"""Tasks and their registry: embedded (text: d1-style rewards and metrics; image: GenEval-style) and the paper
profiles' GSM8K and MATH500 (d1's prompts, rewards and parsers), and GenEval, HPS and DPG-Bench (MMaDA's layout).

``TASKS`` imports a task's module when the task is first looked up, so a stage runs (and depends on) only its own
task's code; the task classes are importable from here too, each on first use.
"""

from __future__ import annotations

from typing import Any

from ddmrl.registry import Registry, lazy_exports
from ddmrl.tasks.base import Example, Task

TASKS = Registry(
    {
        "sudoku4": "ddmrl.tasks.sudoku4:Sudoku4",
        "countdown3": "ddmrl.tasks.countdown3:Countdown3",
        "arith": "ddmrl.tasks.arith:Arith",
        "chain": "ddmrl.tasks.chain:Chain",
        "geneval_mini": "ddmrl.tasks.geneval_mini:GenEvalMini",
        "geneval": "ddmrl.tasks.geneval:GenEval",
        "hps": "ddmrl.tasks.hps:HPSBench",
        "dpg": "ddmrl.tasks.dpg:DPGBench",
        "gsm8k": "ddmrl.tasks.math_reasoning:Gsm8k",
        "math500": "ddmrl.tasks.math_reasoning:Math500",
    }
)

_LAZY = {
    "Arith": "ddmrl.tasks.arith",
    "Chain": "ddmrl.tasks.chain",
    "Countdown3": "ddmrl.tasks.countdown3",
    "DPGBench": "ddmrl.tasks.dpg",
    "GenEval": "ddmrl.tasks.geneval",
    "GenEvalMini": "ddmrl.tasks.geneval_mini",
    "HPSBench": "ddmrl.tasks.hps",
    "Gsm8k": "ddmrl.tasks.math_reasoning",
    "Math500": "ddmrl.tasks.math_reasoning",
    "Sudoku4": "ddmrl.tasks.sudoku4",
}
__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = ["TASKS", "Example", "Task", "make_task", *_LAZY]


def make_task(name: str, **params: Any) -> Task:
    """Instantiate the task registered as ``name`` with its constructor ``params``.

    >>> make_task("sudoku4", num_empty=6).num_empty
    6
    """
    if name not in TASKS:
        raise ValueError(f"unknown task '{name}'; choose one of {', '.join(sorted(TASKS))}")
    return TASKS[name](**params)
