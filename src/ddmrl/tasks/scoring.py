"""The benchmarks' scoring rules, shared by :class:`ddmrl.tasks.benchmarks.Benchmark` (scoring a run's generations) and
``python -m ddmrl.score`` (re-scoring saved ones): the accepted ground-truth formats, one verdict per item, and the
papers' pooled accuracy (d1's protocol, math-verify, or MBPP pass@1; the formats are listed in :mod:`ddmrl.score`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ddmrl.tasks import d1_eval
from ddmrl.tasks.math_verify_scoring import gsm8k_gold_text, math_verify_correct
from ddmrl.tasks.mbpp import MbppTests, extract_code, pass_at_1

TASKS = ("gsm8k", "math500", "countdown", "sudoku", "mbpp")
PROTOCOLS = ("d1", "math_verify")


# --------------------------------------------------------------------------------------------- ground truths


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _gsm8k_gold(ground_truth: Any, protocol: str) -> float | str | None:
    if ground_truth is None or _is_number(ground_truth):
        return None if ground_truth is None else float(ground_truth)
    if not isinstance(ground_truth, str):
        raise ValueError(f"gsm8k ground_truth must be a number, null or a string, got {type(ground_truth).__name__}")
    if "####" in ground_truth:
        if protocol == "math_verify":
            return gsm8k_gold_text(ground_truth)
        return d1_eval.gsm8k_gold(ground_truth)
    try:
        return float(ground_truth.replace(",", ""))
    except ValueError:
        raise ValueError(
            f"gsm8k ground_truth {ground_truth[:40]!r} is neither a number nor a '####' solution"
        ) from None


def _countdown_gold(ground_truth: Any, question: str) -> tuple[list[int], float]:
    if isinstance(ground_truth, list) and len(ground_truth) == 2:
        numbers, target = ground_truth
    elif isinstance(ground_truth, dict) and {"numbers", "target"} <= ground_truth.keys():
        numbers, target = ground_truth["numbers"], ground_truth["target"]
    elif isinstance(ground_truth, dict) and {"input", "output"} <= ground_truth.keys():
        try:
            numbers = [int(n) for n in str(ground_truth["input"]).split(",")]
            target = int(ground_truth["output"])
        except ValueError:
            raise ValueError(
                "countdown ground_truth 'input' must be comma-separated integers and 'output' an integer"
            ) from None
    elif ground_truth is None:
        numbers, target = d1_eval.countdown_from_question(question)
        if not numbers or target is None:
            raise ValueError("countdown ground_truth is null and the question has no 'Numbers: [...]'/'Target: N'")
    else:
        raise ValueError(
            "countdown ground_truth must be [numbers, target], {'numbers', 'target'}, {'input', 'output'} or null"
        )
    if not isinstance(numbers, list) or not numbers or not all(_is_int(n) for n in numbers):
        raise ValueError(f"countdown numbers must be a non-empty list of integers, got {numbers!r}")
    if not _is_number(target):
        raise ValueError(f"countdown target must be a number, got {target!r}")
    return numbers, target


def _sudoku_gold(ground_truth: Any, question: str) -> tuple[str, str]:
    if isinstance(ground_truth, dict):
        puzzle = ground_truth.get("puzzle", ground_truth.get("Puzzle"))
        solution = ground_truth.get("solution", ground_truth.get("Solution"))
    else:
        puzzle, solution = None, ground_truth
    if puzzle is None:
        puzzle = d1_eval.sudoku_puzzle_from_question(question if isinstance(question, str) else "")
    for name, grid in (("puzzle", puzzle), ("solution", solution)):
        if not isinstance(grid, str) or len(grid) != 16 or not grid.isdigit():
            raise ValueError(f"sudoku {name} must be a string of 16 digits, got {grid!r}")
    return puzzle, solution


def parse_ground_truth(task: str, ground_truth: Any, question: str = "", protocol: str = "d1") -> Any:
    """The gold value ``task``'s scorer needs, from any accepted ``ground_truth`` format (module docstring);
    raises ``ValueError`` naming what is wrong.

    >>> parse_ground_truth("gsm8k", "Half of 36 is 18.\\n#### 18")
    18.0
    >>> parse_ground_truth("countdown", {"input": "30,100,93", "output": "23"})
    ([30, 100, 93], 23)
    >>> parse_ground_truth("sudoku", "3142243142131324", "Solve the following Sudoku puzzle: 3102200002100320\\n")
    ('3102200002100320', '3142243142131324')
    """
    if task == "gsm8k":
        return _gsm8k_gold(ground_truth, protocol)
    if task == "math500":
        if not isinstance(ground_truth, str):
            raise ValueError(f"math500 ground_truth must be the answer string, got {type(ground_truth).__name__}")
        return ground_truth
    if task == "countdown":
        return _countdown_gold(ground_truth, question)
    if task == "sudoku":
        return _sudoku_gold(ground_truth, question)
    if task == "mbpp":
        if not isinstance(ground_truth, dict):
            raise ValueError("mbpp ground_truth must be an object with 'test_list'")
        return MbppTests.from_record(ground_truth)
    raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


# ---------------------------------------------------------------------------------------------------- scoring


def score_item(task: str, generation: str, gold: Any, protocol: str = "d1") -> dict[str, Any]:
    """Verdict on one generation against a parsed gold (:func:`parse_ground_truth`): ``correct`` and
    ``extracted``; Sudoku adds ``correct_cells`` and ``empty_cells``, MBPP ``status`` and ``detail``.

    >>> score_item("gsm8k", "<answer>\\\\boxed{18}</answer>", 18.0)
    {'correct': True, 'extracted': 18.0}
    """
    if protocol == "math_verify":
        if task not in ("gsm8k", "math500"):
            raise ValueError(f"--protocol math_verify scores gsm8k and math500, not {task}")

        return {"correct": math_verify_correct(generation, gold, task), "extracted": None}
    if protocol != "d1":
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
    if task == "gsm8k":
        prediction = d1_eval.gsm8k_extract(generation)
        return {"correct": prediction is not None and gold is not None and prediction == gold, "extracted": prediction}
    if task == "math500":
        prediction = d1_eval.math_extract(generation)
        return {"correct": prediction is not None and d1_eval.is_equiv(prediction, gold), "extracted": prediction}
    if task == "countdown":
        numbers, target = gold
        return {
            "correct": d1_eval.countdown_eval_correct(generation, numbers, target),
            "extracted": d1_eval.countdown_eval_extract(generation),
        }
    if task == "sudoku":
        puzzle, solution = gold
        right, empty = d1_eval.sudoku_eval_cells(generation, puzzle, solution)
        return {
            "correct": right == empty,
            "extracted": d1_eval.sudoku_eval_extract(generation),
            "correct_cells": right,
            "empty_cells": empty,
        }
    if task == "mbpp":
        result = pass_at_1(generation, gold)
        return {
            "correct": result.passed,
            "extracted": extract_code(generation),
            "status": result.status,
            "detail": result.detail,
        }
    raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


def summarize(task: str, protocol: str, scores: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The reported numbers: ``n``, ``correct`` and ``accuracy`` (percent; Sudoku: pooled cell accuracy).

    >>> summarize("sudoku", "d1", [{"correct": True, "correct_cells": 8, "empty_cells": 8},
    ...                            {"correct": False, "correct_cells": 1, "empty_cells": 10}])["accuracy"]
    50.0
    """
    n = len(scores)
    correct = sum(bool(s["correct"]) for s in scores)
    out: dict[str, Any] = {"task": task, "protocol": protocol, "n": n, "correct": correct}
    if task == "sudoku":
        cells = sum(s["correct_cells"] for s in scores)
        empty = sum(s["empty_cells"] for s in scores)
        out.update(accuracy=100.0 * cells / empty if empty else 0.0, correct_cells=cells, empty_cells=empty)
    else:
        out["accuracy"] = 100.0 * correct / n if n else 0.0
    return out
