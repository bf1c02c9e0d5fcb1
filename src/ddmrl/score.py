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
from ddmrl.tasks.math_verify_scoring import require_math_verify
from ddmrl.tasks.scoring import PROTOCOLS, TASKS, parse_ground_truth, score_item, summarize

__all__ = ["main", "score_records"]

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
