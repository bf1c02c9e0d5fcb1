"""A cleaner math protocol next to d1's: Hugging Face ``math-verify`` (huggingface/Math-Verify).

How it is called (the order matters, ``verify`` is asymmetric):

* gold: GSM8K's final number is parsed with ``ExprExtractionConfig()``; a MATH answer is wrapped in
  ``\\boxed{...}`` and parsed with ``LatexExtractionConfig()`` and ``ExprExtractionConfig()``;
* prediction: the whole generation, parsed with ``LatexExtractionConfig(boxed_match_priority=0)`` (a box beats
  every other match) and ``ExprExtractionConfig()``;
* ``verify(gold, prediction)`` with math-verify's defaults (``float_rounding=6``, ``numeric_precision=15``, 5 s
  timeouts). The timeouts use ``signal.alarm``: call these functions from the main thread (or pass
  ``timeout_seconds=None``).

``math-verify`` is an optional dependency (``pip install "ddmrl[math]"`` or ``pip install math-verify==0.9.0``;
never the ``[antlr4_13_2]`` extra, whose antlr runtime clashes with dvc's omegaconf). It is imported lazily.
"""

from __future__ import annotations

from typing import Any

__all__ = ["gsm8k_gold_text", "math_verify_correct", "require_math_verify"]

_INSTALL = "math-verify is not installed; run `pip install math-verify==0.9.0` (or `pip install 'ddmrl[math]'`)"


def require_math_verify() -> Any:
    """The ``math_verify`` module, or a ``RuntimeError`` that says what to install."""
    try:
        import math_verify
    except ImportError:
        raise RuntimeError(_INSTALL) from None
    return math_verify


def gsm8k_gold_text(solution: str) -> str | None:
    """The final answer of a GSM8K worked solution as text: after the first ``####``, commas and ``$`` dropped.

    Unlike d1's reader this keeps a minus sign, so the two negative test answers can be scored.

    >>> gsm8k_gold_text("... \\n#### -10"), gsm8k_gold_text("#### $1,200"), gsm8k_gold_text("no marker")
    ('-10', '1200', None)
    """
    if "####" not in solution:
        return None
    text = solution.split("####", 1)[1].strip().replace(",", "").replace("$", "")
    return text or None


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def math_verify_correct(generation: str, gold: str | float | None, task: str, timeout_seconds: int | None = 5) -> bool:
    """``verify(parse(gold), parse(generation))`` for ``task`` ``"gsm8k"`` (gold: a number or its text) or
    ``"math500"`` (gold: the LaTeX answer); an unparseable gold or prediction is wrong.

    >>> math_verify_correct("<answer>\\\\boxed{1,200}</answer>", 1200.0, "gsm8k")
    True
    >>> math_verify_correct("so \\\\boxed{\\\\dfrac{1}{2}}", "0.5", "math500")
    True
    """
    mv = require_math_verify()
    if gold is None:
        return False
    if task == "gsm8k":
        gold_text = _number_text(gold) if isinstance(gold, int | float) else str(gold)
        gold_parsed = mv.parse(
            gold_text, extraction_config=[mv.ExprExtractionConfig()], parsing_timeout=timeout_seconds
        )
    elif task == "math500":
        gold_parsed = mv.parse(
            "\\boxed{" + str(gold) + "}",
            extraction_config=[mv.LatexExtractionConfig(), mv.ExprExtractionConfig()],
            parsing_timeout=timeout_seconds,
        )
    else:
        raise ValueError(f"the math_verify protocol scores gsm8k and math500, not {task!r}")
    if not gold_parsed:
        return False
    prediction = mv.parse(
        generation,
        extraction_config=[mv.LatexExtractionConfig(boxed_match_priority=0), mv.ExprExtractionConfig()],
        parsing_timeout=timeout_seconds,
    )
    if not prediction:
        return False
    return bool(mv.verify(gold_parsed, prediction, timeout_seconds=timeout_seconds))
