"""Re-score saved generations without a model: d1's protocol, or math-verify, or MBPP pass@1.

Usage::

    python -m ddmrl.score --task {gsm8k,math500,countdown,sudoku,mbpp} [--protocol {d1,math_verify}] \\
        --input FILE [FILE ...] [--details]

Prints ONE JSON object on stdout: ``task``, ``protocol``, ``n`` (items), ``correct`` (items judged correct) and
``accuracy`` in percent as the papers report it. For Sudoku, ``accuracy`` is d1's cell accuracy: correct empty
cells over empty cells, pooled over every item of every file (``correct_cells``, ``empty_cells``; ``correct``
then counts fully solved puzzles). Several files are pooled, as d1's ``parse_and_get_acc.py`` pools its per-rank
files. ``--details`` adds ``items``: per item its file, line, extracted answer and verdict. A malformed file
or record ends the run with one line ``error: FILE line N: ...`` on stderr and exit status 2.

Input files:

* JSONL (any name but ``*.json``): one object per line with ``question`` (str), ``ground_truth`` and
  ``generation`` (str, the decoded completion, special tokens and all);
* d1's per-rank ``*.json`` files: ``{"generations": [{"question", "prompt_input", "generations",
  "ground_truth"}, ...], ...}``, read as they are.

Accepted ``ground_truth`` per task:

* ``gsm8k``: a number (d1 stores the float it parsed from the dataset answer), ``null`` (d1's value for the two
  negative answers: never correct under d1), a GSM8K worked solution containing ``####`` (d1's gold regex is
  applied; with ``--protocol math_verify`` the text after ``####`` is used, minus signs included), or a plain
  number as a string (``"18"``).
* ``math500``: the MATH-500 ``answer`` string (LaTeX, e.g. ``"\\\\frac{14}{3}"``).
* ``countdown``: ``[numbers, target]`` as d1 stores it (``[[30, 100, 93], 23]``); ``{"numbers": [...],
  "target": t}``; a line of d1's test file ``{"input": "30,100,93", "output": "23"}``; or ``null``, and then the
  numbers and target are read from the question (``Numbers: [30, 100, 93]\\nTarget: 23``) as d1 falls back to.
* ``sudoku``: the 16-digit solution string as d1 stores it, with the puzzle read from the question (its first 16
  characters if all digits, else the 16 digits after ``Sudoku puzzle: ``); or ``{"puzzle": ..., "solution":
  ...}`` (also d1's CSV keys ``Puzzle``/``Solution``), and then the question is not read.
* ``mbpp``: ``{"test_list": [...], "test_imports": [...], "test_setup_code": "..."}`` (the last two optional);
  protocol ``d1`` here means pass@1 in :mod:`ddmrl.sandbox` (d1 has no code scorer; see
  :mod:`ddmrl.tasks.mbpp`).

``--protocol math_verify`` applies to gsm8k and math500 only and needs ``pip install math-verify==0.9.0``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ddmrl.io import DataError, read_json, read_jsonl
from ddmrl.tasks import d1_eval
from ddmrl.tasks.math_verify_scoring import gsm8k_gold_text, math_verify_correct, require_math_verify
from ddmrl.tasks.mbpp import MbppTests, extract_code, pass_at_1

__all__ = ["PROTOCOLS", "TASKS", "main", "parse_ground_truth", "score_item", "score_records", "summarize"]

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


# --------------------------------------------------------------------------------------------------- reading


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(location, {question, ground_truth, generation}) for every item of a JSONL or d1 JSON file."""
    if path.suffix == ".json":
        data = read_json(path)
        items = data.get("generations") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise DataError(f"{path}: a .json input must be d1's {{'generations': [...]}} file")
        for i, item in enumerate(items):
            where = f"{path} item {i}"
            if not isinstance(item, dict) or "generations" not in item:
                raise DataError(f"{where}: expected an object with 'generations', 'question' and 'ground_truth'")
            yield (
                where,
                {
                    "question": item.get("question", ""),
                    "ground_truth": item.get("ground_truth"),
                    "generation": item["generations"],
                },
            )
        return
    records = read_jsonl(path, required=("question", "ground_truth", "generation"))
    raw_lines = path.read_bytes().split(b"\n")  # read_jsonl has checked that every line decodes
    lines = [n for n, raw in enumerate(raw_lines, 1) if raw.decode("utf-8").strip()]
    for n, record in zip(lines, records, strict=True):
        yield f"{path} line {n}", record


def score_records(task: str, protocol: str, paths: Sequence[str | Path], details: bool = False) -> dict[str, Any]:
    """Score every item of ``paths`` (pooled); a bad record raises :class:`DataError` naming file and line."""
    if protocol == "math_verify" and task not in ("gsm8k", "math500"):
        raise DataError(f"--protocol math_verify scores gsm8k and math500, not {task}")
    if protocol == "math_verify":
        require_math_verify()
    scores, items = [], []
    for raw in paths:
        for where, record in _records(Path(raw)):
            question, generation = record["question"], record["generation"]
            if not isinstance(generation, str):
                raise DataError(f"{where}: 'generation' must be a string, got {type(generation).__name__}")
            if not isinstance(question, str):
                raise DataError(f"{where}: 'question' must be a string, got {type(question).__name__}")
            try:
                gold = parse_ground_truth(task, record["ground_truth"], question, protocol)
            except ValueError as e:
                raise DataError(f"{where}: {e}") from None
            verdict = score_item(task, generation, gold, protocol)
            scores.append(verdict)
            if details:
                items.append({"where": where, **verdict})
    if not scores:
        raise DataError(f"{', '.join(map(str, paths))}: no records to score")
    out = summarize(task, protocol, scores)
    if details:
        out["items"] = items
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddmrl.score", description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--protocol", default="d1", choices=PROTOCOLS)
    parser.add_argument("--input", required=True, nargs="+", metavar="FILE", help="JSONL or d1 *.json files")
    parser.add_argument("--details", action="store_true", help="add per-item verdicts under 'items'")
    args = parser.parse_args(argv)
    try:
        result = score_records(args.task, args.protocol, args.input, details=args.details)
    except (DataError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
