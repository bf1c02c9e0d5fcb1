"""The math-verify protocol (huggingface/Math-Verify): where it and d1 disagree, and its missing-package error."""

import sys

import pytest

from ddmrl.tasks.d1_eval import gsm8k_correct, math_correct
from ddmrl.tasks.math_verify_scoring import gsm8k_gold_text, math_verify_correct, require_math_verify


def test_gsm8k_gold_text_keeps_the_sign():
    assert gsm8k_gold_text("3 - 6 = -3\n#### -3") == "-3"
    assert gsm8k_gold_text("#### $1,200") == "1200"
    assert gsm8k_gold_text("#### ") is None
    assert gsm8k_gold_text("no marker") is None


@pytest.mark.parametrize(
    ("generation", "gold", "task", "mv", "d1"),
    [
        ("<answer>\\boxed{1,200}</answer>", 1200.0, "gsm8k", True, False),  # d1 reads 1.0
        ("<answer>\\boxed{-3}</answer>", "-3", "gsm8k", True, False),  # d1's gold is None
        ("<answer>\\boxed{17}</answer>", 18.0, "gsm8k", False, False),
        ("<answer>\\boxed{\\pi/2}</answer>", "\\frac{\\pi}{2}", "math500", True, False),  # d1: raw strings
        ("<answer>\\boxed{\\dfrac{1}{4}}</answer>", "\\frac{1}{4}", "math500", True, True),
        ("<answer>\\boxed{3}</answer>", "4", "math500", False, False),
        ("I do not know.", "4", "math500", False, False),
    ],
)
def test_math_verify_against_d1(generation, gold, task, mv, d1):
    pytest.importorskip("math_verify")
    assert math_verify_correct(generation, gold, task) is mv
    if task == "gsm8k":
        assert gsm8k_correct(generation, gold if isinstance(gold, float) else None) is d1
    else:
        assert math_correct(generation, gold) is d1


def test_math_verify_none_gold_and_unknown_task():
    pytest.importorskip("math_verify")
    assert math_verify_correct("\\boxed{1}", None, "gsm8k") is False
    with pytest.raises(ValueError, match="gsm8k and math500"):
        math_verify_correct("\\boxed{1}", "1", "countdown")


def test_missing_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # makes `import math_verify` raise ImportError
    with pytest.raises(RuntimeError, match=r"pip install math-verify==0\.9\.0"):
        require_math_verify()
    with pytest.raises(RuntimeError, match="math-verify is not installed"):
        math_verify_correct("\\boxed{1}", "1", "math500")
