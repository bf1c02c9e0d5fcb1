"""MBPP protocol pieces: splits, prompt, code extraction, program assembly, pass@1 and the assert fraction."""

import doctest
import json
from pathlib import Path

import pytest

from ddmrl.sandbox import SandboxLimits
from ddmrl.tasks import mbpp
from ddmrl.tasks.mbpp import MbppTests, assert_fraction, extract_code, mbpp_split_of, pass_at_1, program

ROWS = Path(__file__).resolve().parents[2] / "fixtures" / "benchmarks" / "mbpp.jsonl"
LIMITS = SandboxLimits(timeout_s=5)
ADD = MbppTests(("assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 5) == 5"))


def test_docstring_examples():
    result = doctest.testmod(mbpp)
    assert result.attempted >= 5 and result.failed == 0


def test_splits_follow_task_ids():
    assert [mbpp_split_of(i) for i in (1, 10, 11, 510, 511, 600, 601, 974)] == [
        "prompt",
        "prompt",
        "test",
        "test",
        "validation",
        "validation",
        "train",
        "train",
    ]
    with pytest.raises(ValueError, match="outside 1-974"):
        mbpp_split_of(975)


def test_extract_code_prefers_the_first_python_block():
    text = "```text\nnot code\n```\n```python\ndef add(a, b):\n    return a + b\n```\n```python\nx = 1\n```"
    assert extract_code(text) == "def add(a, b):\n    return a + b\n"


def test_real_rows_pass_with_their_reference_code():
    for line in ROWS.read_text().splitlines():
        row = json.loads(line)
        result = pass_at_1(f"```python\n{row['code']}\n```", MbppTests.from_record(row), LIMITS)
        assert result.passed, (row["task_id"], result.detail)


def test_right_and_wrong_solutions():
    right = pass_at_1("```python\ndef add(a, b):\n    return a + b\n```", ADD, LIMITS)
    assert (right.passed, right.status) == (True, "ok")
    wrong = pass_at_1("```python\ndef add(a, b):\n    return a * b\n```", ADD, LIMITS)
    assert (wrong.passed, wrong.status) == (False, "failed")  # add(1, 2) == 2, the first assert fails
    missing = pass_at_1("I cannot write this function.", ADD, LIMITS)
    assert (missing.passed, missing.status) == (False, "error")  # the prose is not Python
    looping = pass_at_1(
        "```python\ndef add(a, b):\n    while True:\n        pass\n```", ADD, SandboxLimits(timeout_s=1)
    )
    assert (looping.passed, looping.status) == (False, "timeout")


def test_assert_fraction_counts_each_assert_alone():
    # a * b: add(1,2)=2 wrong, add(2,2)=4 right, add(0,5)=0 wrong -> 1 of 3
    assert assert_fraction("```python\ndef add(a, b):\n    return a * b\n```", ADD, LIMITS) == pytest.approx(1 / 3)


def test_program_puts_imports_and_setup_first():
    tests = MbppTests(("assert f() == 2",), ("import math",), "K = 2")
    assert program("def f():\n    return K", tests) == "import math\nK = 2\ndef f():\n    return K\nassert f() == 2"


def test_bad_test_records():
    for record, message in (
        ({}, "test_list"),
        ({"test_list": ["assert 1"], "test_imports": "import math"}, "test_imports"),
        ({"test_list": ["assert 1"], "test_setup_code": 3}, "test_setup_code"),
    ):
        with pytest.raises(ValueError, match=message):
            MbppTests.from_record(record)
