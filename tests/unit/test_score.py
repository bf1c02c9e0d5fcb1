"""``python -m ddmrl.score``: accepted ground-truth formats, pooled accuracy, one-line errors; the CLI end to end.

Expected accuracies are worked out by hand from d1's rules; the fixtures' comments live here:

gsm8k.jsonl   1 boxed 18 = 18 (right) | 2 \\boxed{1,200} reads 1.0 (wrong under d1, right under math-verify)
              3 "<answer>72</answer>", gold from '#### 72' (right) | 4 gold null (wrong under both)
              5 gold '#### -3': d1 cannot read it (wrong), math-verify reads -3 (right)
math500.jsonl 1 \\dfrac{1}{4} = \\frac{1}{4} (right) | 2 \\pi/2 vs \\frac{\\pi}{2}: d1 compares raw strings (wrong),
              math-verify (right) | 3 3 vs 4 (wrong) | 4 16\\sqrt3 = 16 \\sqrt{3} (right)
countdown     1 [numbers, target] right | 2 {'numbers', 'target'}, answer tags without a box: wrong
              3 {'input', 'output'} right | 4 null gold, read from the question: right
sudoku        1 8/8 cells | 2 "2143" padded: cells 0 and 3 right, 2/8 | 3 nothing: 0/8 -> 10/24 pooled
mbpp          1 right code passes | 2 wrong code fails
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddmrl.io import DataError
from ddmrl.score import score_records
from ddmrl.tasks import scoring
from ddmrl.tasks.scoring import parse_ground_truth, score_item, summarize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "score"
SRC = Path(__file__).resolve().parents[2] / "src"


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ddmrl.score", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_docstring_examples():
    import doctest

    result = doctest.testmod(scoring)
    assert result.attempted >= 5 and result.failed == 0


# ---------------------------------------------------------------------------------------------- ground truths


@pytest.mark.parametrize(
    ("ground_truth", "protocol", "expected"),
    [
        (18.0, "d1", 18.0),
        (18, "d1", 18.0),
        (None, "d1", None),
        ("Half is 9.\n#### 1,800", "d1", 1800.0),
        ("#### -3", "d1", None),  # d1's regex has no minus
        ("#### -3", "math_verify", "-3"),  # the clean reader keeps it
        ("42", "d1", 42.0),
    ],
)
def test_gsm8k_ground_truth_formats(ground_truth, protocol, expected):
    assert parse_ground_truth("gsm8k", ground_truth, protocol=protocol) == expected


@pytest.mark.parametrize(
    ("ground_truth", "question"),
    [
        ([[30, 100, 93], 23], ""),
        ({"numbers": [30, 100, 93], "target": 23}, ""),
        ({"input": "30,100,93", "output": "23"}, ""),
        (None, "Numbers: [30, 100, 93]\nTarget: 23"),
    ],
)
def test_countdown_ground_truth_formats(ground_truth, question):
    assert parse_ground_truth("countdown", ground_truth, question) == ([30, 100, 93], 23)


def test_sudoku_ground_truth_formats():
    puzzle, solution = "3102200002100320", "3142243142131324"
    question = f"Solve the following Sudoku puzzle: {puzzle}\n"
    assert parse_ground_truth("sudoku", solution, question) == (puzzle, solution)
    assert parse_ground_truth("sudoku", {"puzzle": puzzle, "solution": solution}) == (puzzle, solution)
    assert parse_ground_truth("sudoku", {"Puzzle": puzzle, "Solution": solution}, "ignored") == (puzzle, solution)


@pytest.mark.parametrize(
    ("task", "ground_truth", "question", "message"),
    [
        ("gsm8k", "eighteen", "", "neither a number"),
        ("gsm8k", [18], "", "must be a number"),
        ("math500", 5, "", "answer string"),
        ("countdown", "oops", "", "must be \\[numbers, target\\]"),
        ("countdown", None, "no numbers here", "question has no"),
        ("countdown", [["3", "7"], 10], "", "list of integers"),
        ("countdown", [[3, 7], "10"], "", "target must be a number"),
        ("sudoku", "31422431", "Sudoku puzzle: 3102200002100320", "16 digits"),
        ("sudoku", "3142243142131324", "no puzzle", "Sudoku puzzle"),
        ("mbpp", {"test_list": []}, "", "test_list"),
    ],
)
def test_bad_ground_truths_raise_value_error(task, ground_truth, question, message):
    with pytest.raises(ValueError, match=message):
        parse_ground_truth(task, ground_truth, question)


def test_summarize_pools_sudoku_cells_not_puzzles():
    scores = [
        {"correct": True, "correct_cells": 8, "empty_cells": 8},
        {"correct": False, "correct_cells": 1, "empty_cells": 10},
    ]
    out = summarize("sudoku", "d1", scores)
    assert out["accuracy"] == pytest.approx(50.0)  # 9/18, not the mean of 100% and 10% (55%)
    assert (out["n"], out["correct"], out["correct_cells"], out["empty_cells"]) == (2, 1, 9, 18)


def test_math_verify_protocol_rejects_other_tasks():
    with pytest.raises(ValueError, match="gsm8k and math500"):
        score_item("countdown", "\\boxed{1+2}", ([1, 2], 3), protocol="math_verify")


# ------------------------------------------------------------------------------------------------- library


@pytest.mark.parametrize(
    ("task", "accuracy", "n", "correct"),
    [
        ("gsm8k", 40.0, 5, 2),
        ("math500", 50.0, 4, 2),
        ("countdown", 75.0, 4, 3),
        ("sudoku", 100.0 * 10 / 24, 3, 1),
    ],
)
def test_score_records_d1(task, accuracy, n, correct):
    out = score_records(task, "d1", [FIXTURES / f"{task}.jsonl"])
    assert out["accuracy"] == pytest.approx(accuracy)
    assert (out["n"], out["correct"]) == (n, correct)


def test_score_records_details_name_each_line():
    out = score_records("gsm8k", "d1", [FIXTURES / "gsm8k.jsonl"], details=True)
    items = out["items"]
    assert [i["where"].rsplit(" ", 1)[-1] for i in items] == ["1", "2", "3", "4", "5"]
    assert [i["extracted"] for i in items] == [18.0, 1.0, 72.0, -10.0, -3.0]
    assert [i["correct"] for i in items] == [True, False, True, False, False]


def test_score_records_errors_name_file_and_line():
    with pytest.raises(DataError, match=r"bad_missing_key.jsonl line 3: missing key\(s\) generation"):
        score_records("gsm8k", "d1", [FIXTURES / "bad_missing_key.jsonl"])  # line 2 is blank
    with pytest.raises(DataError, match=r"bad_countdown_gold.jsonl line 2: countdown ground_truth"):
        score_records("countdown", "d1", [FIXTURES / "bad_countdown_gold.jsonl"])


def test_score_records_rejects_empty_and_non_string_generations(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="no records"):
        score_records("gsm8k", "d1", [empty])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "ground_truth": 1, "generation": 1}) + "\n")
    with pytest.raises(DataError, match="bad.jsonl line 1: 'generation' must be a string"):
        score_records("gsm8k", "d1", [bad])
    not_d1 = tmp_path / "x.json"
    not_d1.write_text("[1, 2]")
    with pytest.raises(DataError, match="x.json: a .json input must be d1's"):
        score_records("gsm8k", "d1", [not_d1])


# ---------------------------------------------------------------------------------------------------- CLI


def test_cli_prints_one_json_object_per_task():
    expected = {"gsm8k": 40.0, "math500": 50.0, "countdown": 75.0, "sudoku": 100.0 * 10 / 24, "mbpp": 50.0}
    for task, accuracy in expected.items():
        run = cli("--task", task, "--protocol", "d1", "--input", str(FIXTURES / f"{task}.jsonl"))
        assert run.returncode == 0, run.stderr
        lines = run.stdout.strip().splitlines()
        assert len(lines) == 1
        out = json.loads(lines[0])
        assert out["task"] == task and out["protocol"] == "d1"
        assert out["accuracy"] == pytest.approx(accuracy)


def test_cli_pools_d1_json_and_jsonl_files():
    run = cli(
        "--task",
        "gsm8k",
        "--input",
        str(FIXTURES / "gsm8k_instruct_256_128_0_generations.json"),  # 1 of 2 right
        str(FIXTURES / "gsm8k.jsonl"),  # 2 of 5 right
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert (out["n"], out["correct"]) == (7, 3)
    assert out["accuracy"] == pytest.approx(300 / 7)


def test_cli_details_flag():
    run = cli("--task", "countdown", "--input", str(FIXTURES / "countdown.jsonl"), "--details")
    out = json.loads(run.stdout)
    assert [i["correct"] for i in out["items"]] == [True, False, True, True]
    assert out["items"][1]["extracted"] == "<answer>\n3*9-7\n</answer>"  # no box: d1 keeps the whole text


def test_math_verify_protocol_cli_and_library():
    pytest.importorskip("math_verify")
    run = cli("--task", "gsm8k", "--protocol", "math_verify", "--input", str(FIXTURES / "gsm8k.jsonl"))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["accuracy"] == pytest.approx(80.0)
    out = score_records("math500", "math_verify", [FIXTURES / "math500.jsonl"], details=True)  # in-process: faster
    assert [i["correct"] for i in out["items"]] == [True, True, False, True]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "gsm8k", "--input", "bad_missing_key.jsonl"], "bad_missing_key.jsonl line 3: missing key"),
        (["--task", "countdown", "--input", "bad_countdown_gold.jsonl"], "bad_countdown_gold.jsonl line 2:"),
        (["--task", "countdown", "--protocol", "math_verify", "--input", "countdown.jsonl"], "gsm8k and math500"),
        (["--task", "gsm8k", "--input", "missing.jsonl"], "missing.jsonl: file not found"),
    ],
)
def test_cli_errors_are_one_line(args, message):
    args = [str(FIXTURES / a) if a.endswith((".jsonl", ".json")) else a for a in args]
    run = cli(*args)
    assert run.returncode == 2
    assert run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
