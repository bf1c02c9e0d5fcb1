"""Tasks and their registry: embedded (text: d1-style rewards and metrics; image: GenEval-style) and the paper
profiles' GSM8K and MATH500 (d1's prompts, rewards and parsers), and GenEval, HPS and DPG-Bench (MMaDA's layout).

One module per task (``ddmrl.tasks.<name>``): its section's model ``Params`` (the keys of ``task_params.<name>``,
their defaults, checks and docs) and its class (:class:`~ddmrl.tasks.base.Task`: the contract), whose ``params`` is
that model and whose ``modality`` and ``evaluation_only`` say which list names it (``tasks``, ``image.tasks`` or
``image.eval_tasks``). ``TASKS`` is the only list of their names; ``ddmrl.config`` validates names and parameters
through it. It imports a task's module when the task is first looked up, so a stage runs (and depends on) only its
own tasks' code, and a task's module imports no torch at module level (validating params.yaml imports it). A task
outside the package is named by an entry point of the ``ddmrl.tasks`` group (not by an import path: a task's name is
part of run and file names).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddmrl.registry import Registry

if TYPE_CHECKING:
    from ddmrl.tasks.base import Task

TASKS = Registry(
    {
        "sudoku4": "ddmrl.tasks.sudoku4:Sudoku4",
        "chain": "ddmrl.tasks.chain:Chain",
        "arith": "ddmrl.tasks.arith:Arith",
        "countdown3": "ddmrl.tasks.countdown3:Countdown3",
        "geneval_mini": "ddmrl.tasks.geneval_mini:GenEvalMini",
        "geneval": "ddmrl.tasks.geneval:GenEval",
        "hps": "ddmrl.tasks.hps:HPSBench",
        "dpg": "ddmrl.tasks.dpg:DPGBench",
        "gsm8k": "ddmrl.tasks.math_reasoning:Gsm8k",
        "math500": "ddmrl.tasks.math_reasoning:Math500",
    },
    group="ddmrl.tasks",
)
#: the text tasks of ``tasks:`` unless a config lists its own
DEFAULT_TASKS = ("sudoku4", "chain")
#: the MAR branch's one task (its continuous encoding is geneval-mini's cells: ``ddmrl.mar.encoding``)
MAR_TASK = "geneval_mini"


__all__ = ["DEFAULT_TASKS", "MAR_TASK", "TASKS", "make_task"]


def make_task(name: str, **params: Any) -> Task:
    """Instantiate the task registered as ``name`` with its constructor ``params``.

    >>> make_task("sudoku4", num_empty=6).num_empty
    6
    """
    if name not in TASKS:
        raise ValueError(f"unknown task '{name}'; choose one of {', '.join(sorted(TASKS))}")
    return TASKS[name](**params)
