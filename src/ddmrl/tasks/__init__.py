"""Tasks and their registry: embedded (text: d1-style rewards and metrics; image: GenEval-style) and the paper
profiles' GSM8K and MATH500 (d1's prompts, rewards and parsers), and GenEval, HPS and DPG-Bench (MMaDA's layout).

``TASKS`` imports a task's module when the task is first looked up, so a stage runs (and depends on) only its own
task's code. A task's class is imported from its module (:class:`~ddmrl.tasks.base.Task`: the contract).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddmrl.registry import Registry

if TYPE_CHECKING:
    from ddmrl.tasks.base import Task

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


__all__ = ["TASKS", "make_task"]


def make_task(name: str, **params: Any) -> Task:
    """Instantiate the task registered as ``name`` with its constructor ``params``.

    >>> make_task("sudoku4", num_empty=6).num_empty
    6
    """
    if name not in TASKS:
        raise ValueError(f"unknown task '{name}'; choose one of {', '.join(sorted(TASKS))}")
    return TASKS[name](**params)
