"""Scoring rules of d1 (Zhao et al. 2025, diffu-GRPO) for Countdown, 4x4 Sudoku, GSM8K and MATH, as pure functions.

Two families, kept apart on purpose, as in d1:

* training rewards (d1 ``reward_func.py``): :func:`sudoku_reward`, :func:`countdown_reward`, :func:`gsm8k_reward`,
  :func:`math_reward`; they read the content of the last ``<answer>...</answer>`` block (MATH: the last box);
* evaluation parsers (d1 ``eval/parse_and_get_acc.py``): :func:`sudoku_extract` / :func:`sudoku_cells` and
  :func:`countdown_extract` / :func:`countdown_correct`; they are more lenient about where the answer sits.

The rules are restated from d1's ``eval/parse_and_get_acc.py`` and ``diffu-grpo/reward_func.py``; no upstream
code is copied. Arithmetic is evaluated with a small ``ast`` walker
(:func:`ddmrl.tasks.arithmetic.evaluate_arithmetic`), never with ``eval``; the MATH reward uses d1's MATH helpers
(:mod:`ddmrl.tasks.d1_eval`), as d1's does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ddmrl.tasks.arithmetic import evaluate_arithmetic
from ddmrl.tasks.d1_eval import SUDOKU_CELLS, is_equiv, last_boxed_only_string, remove_boxed

__all__ = [
    "countdown_correct",
    "countdown_extract",
    "countdown_reward",
    "gsm8k_reward",
    "last_answer_block",
    "math_reward",
    "sudoku_cells",
    "sudoku_extract",
    "sudoku_reward",
]

_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ARITHMETIC_CHARS = re.compile(r"^[\d+\-*/().\s]+$")
_INTEGERS = re.compile(r"\d+")
#: d1's Sudoku eval cascade (``parse_sudoku_answers``), tried in order; the first non-blank capture wins
_SUDOKU_PATTERNS = tuple(
    re.compile(p, re.DOTALL)
    for p in (
        r"<answer>.*?```\s*([\d\s]+)```",  # fenced digits inside the answer
        r"<answer>(.*?)(?:<\|eot_id\|>|<\|endoftext\|>|</answer>)",  # the answer block
        r"</answer>\s*(.*?)(?:<\|eot_id\|>|<\|endoftext\|>|$)",  # text after a closing tag
        r".*?(\d{16})\s*</answer>",  # 16 digits right before a closing tag
        r"\b(\d{16})\b",  # any standalone 16 digits
    )
)
#: ``expr = number`` (d1 keeps the left side of an equation whose right side is a number)
_EQUATION = re.compile(r"([\d+\-*/().\s]+?)\s*=\s*[\d.\s]*\d")

# --------------------------------------------------------------------------------------------- shared helpers


def last_answer_block(completion: str) -> str | None:
    """Content of the last ``<answer>...</answer>`` pair (may span lines), or ``None`` when there is none.

    >>> last_answer_block("<answer>1</answer> then <answer>\\n2\\n</answer>")
    '\\n2\\n'
    >>> last_answer_block("<answer>unterminated") is None
    True
    """
    blocks = _ANSWER_BLOCK.findall(completion)
    return blocks[-1] if blocks else None


# --------------------------------------------------------------------------------------------------- sudoku


def _pad16(text: str) -> str:
    return (text + "0" * SUDOKU_CELLS)[:SUDOKU_CELLS]


def _empty_cells(puzzle: str) -> list[int]:
    return [i for i, c in enumerate(puzzle[:SUDOKU_CELLS]) if c == "0"]


def sudoku_reward(completion: str, puzzle: str, solution: str) -> float:
    """d1's Sudoku training reward: share of the puzzle's empty cells filled correctly.

    The digits inside the last ``<answer>...</answer>`` are joined, padded with ``0`` / truncated to 16;
    no answer block gives 0.

    >>> sudoku_reward("<answer>3142 2431 4213 1324</answer>", "3102200002100320", "3142243142131324")
    1.0
    >>> sudoku_reward("<answer>3142 2431</answer>", "3102200002100320", "3142243142131324")  # 4 of 8 right
    0.5
    >>> sudoku_reward("3142243142131324", "3102200002100320", "3142243142131324")
    0.0
    """
    block = last_answer_block(completion)
    empty = _empty_cells(puzzle)
    if block is None or not empty:
        return 0.0
    guess = _pad16("".join(c for c in block if c.isdigit()))
    return sum(guess[i] == solution[i] for i in empty) / len(empty)


def sudoku_extract(completion: str) -> str:
    """d1's Sudoku eval extraction: 16 characters from the first regex of the cascade that captures text.

    Order: fenced digits after ``<answer>``; ``<answer>`` up to an end marker or ``</answer>``; text after
    ``</answer>``; 16 digits before ``</answer>``; any standalone 16 digits. Whitespace is removed, then
    the result is padded with ``0`` / truncated to 16. A capture that is only whitespace counts as empty
    (the cascade moves on).

    >>> sudoku_extract("<answer>\\n```\\n3142\\n2431\\n4213\\n1324\\n```\\n</answer>")
    '3142243142131324'
    >>> sudoku_extract("</answer> 3142 2431")
    '3142243100000000'
    >>> sudoku_extract("The grid is 3142243142131324.")
    '3142243142131324'
    >>> sudoku_extract("no digits here")
    '0000000000000000'
    """
    found = ""
    for pattern in _SUDOKU_PATTERNS:
        match = pattern.search(completion)
        if match and match.group(1) and match.group(1).strip():
            found = match.group(1)
            break
    return _pad16(re.sub(r"\s", "", found))


def sudoku_cells(completion: str, puzzle: str, solution: str) -> tuple[int, int]:
    """d1's Sudoku eval count: (empty cells filled correctly, empty cells), from :func:`sudoku_extract`.

    d1 pools these over the test set: accuracy = sum(correct) / sum(empty).

    >>> sudoku_cells("<answer>3142243142131324</answer>", "3102200002100320", "3142243142131324")
    (8, 8)
    >>> sudoku_cells("<answer>31422431</answer>", "3102200002100320", "3142243142131324")
    (4, 8)
    """
    guess = sudoku_extract(completion)
    empty = _empty_cells(puzzle)
    return sum(guess[i] == solution[i] for i in empty), len(empty)


# ------------------------------------------------------------------------------------------------ countdown


def _uses_numbers_once(expression: str, numbers: Sequence[int]) -> bool:
    return sorted(int(n) for n in _INTEGERS.findall(expression)) == sorted(int(n) for n in numbers)


def _hits_target(expression: str, target: float) -> bool:
    """d1's check: only digits/operators/parentheses/dots/spaces, then |value - target| < 1e-5."""
    if not _ARITHMETIC_CHARS.match(expression):
        return False
    try:
        return abs(evaluate_arithmetic(expression) - target) < 1e-5
    except (ValueError, ArithmeticError, TypeError):
        return False


def countdown_reward(completion: str, numbers: Sequence[int], target: float) -> float:
    """d1's Countdown training reward on the last ``<answer>`` block: 1.0 correct, 0.1 well-formed, 0 none.

    0.1 when the integers in the expression are not exactly the given ones, when it has characters other
    than digits, ``+ - * / ( ) .`` and spaces, when it does not evaluate, or when its value is off.

    >>> countdown_reward("<answer>3*9-7</answer>", [3, 7, 9], 20)
    1.0
    >>> countdown_reward("<answer>7+7+3+3</answer>", [3, 7, 9], 20)  # numbers reused
    0.1
    >>> countdown_reward("3*9-7", [3, 7, 9], 20)
    0.0
    """
    block = last_answer_block(completion)
    if block is None:
        return 0.0
    expression = block.strip()
    if not _uses_numbers_once(expression, numbers):
        return 0.1
    return 1.0 if _hits_target(expression, target) else 0.1


def _last_boxed(text: str) -> str | None:
    """Content of the last terminated ``\\boxed{...}`` (balanced braces), or ``None``."""
    start = text.rfind("\\boxed{")
    while start != -1:
        depth, i = 1, start + len("\\boxed{")
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start + len("\\boxed{") : i - 1]
        start = text.rfind("\\boxed{", 0, start)
    return None


def countdown_extract(completion: str) -> str:
    """The equation d1's Countdown eval parser would score, adapted to our ``<answer>``-tag format.

    Source, first that exists: the last terminated ``\\boxed{}``; else the content of the last ``<answer>``
    block (up to ``</answer>``, or to the end of the text when unterminated); else the whole text.
    d1 goes from the box straight to the whole text (its ``<answer>`` fallback only fires on an unterminated
    box); the ``<answer>`` step is our addition because the embedded models answer inside ``<answer>`` tags
    and never box. Then ``\\div`` becomes ``/``, ``\\times`` and ``\\cdot`` become ``*``, and for
    ``expr = number`` only ``expr`` is kept.

    >>> countdown_extract("<answer>3 \\\\times 9 - 7 = 20</answer>")
    '3 * 9 - 7'
    >>> countdown_extract("<answer>1+1</answer> so \\\\boxed{(9-3)\\\\div 2}")
    '(9-3)/ 2'
    >>> countdown_extract("<answer>3*9-7")
    '3*9-7'
    """
    equation = _last_boxed(completion)
    if equation is None:
        block = last_answer_block(completion)
        if block is None and "<answer>" in completion:
            block = completion[completion.rfind("<answer>") + len("<answer>") :]
        equation = completion if block is None else block
    equation = equation.replace("\\div", "/").replace("\\times", "*").replace("\\cdot", "*")
    match = _EQUATION.search(equation)
    if match:
        equation = match.group(1)
    return equation.strip()


def countdown_correct(completion: str, numbers: Sequence[int], target: float) -> bool:
    """d1's Countdown eval verdict: the extracted equation uses each number once and equals the target.

    >>> countdown_correct("\\\\boxed{3 \\\\times 9 - 7}", [3, 7, 9], 20)
    True
    >>> countdown_correct("<answer>3*9-7=20</answer>", [3, 7, 9], 20)
    True
    >>> countdown_correct("<answer>9*3-7-0</answer>", [3, 7, 9], 20)  # an extra number
    False
    """
    equation = countdown_extract(completion)
    return _uses_numbers_once(equation, numbers) and _hits_target(equation, target)


# ------------------------------------------------------------------------------------------ GSM8K and MATH

_STRICT_FORMAT = r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$"
_SOFT_FORMAT = r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>"


def xml_answer(completion: str) -> str:
    """d1's ``extract_xml_answer``: the text between the last ``<answer>`` and the next ``</answer>``, stripped
    (the whole text when there is no tag)."""
    return completion.split("<answer>")[-1].split("</answer>")[0].strip()


def xml_count(completion: str) -> float:
    """d1's ``count_xml``: 0.125 for each of exactly one ``<reasoning>\\n``, ``\\n</reasoning>\\n``,
    ``\\n<answer>\\n`` and ``\\n</answer>``, minus 0.001 per character trailing the answer tags."""
    count = 0.0
    if completion.count("<reasoning>\n") == 1:
        count += 0.125
    if completion.count("\n</reasoning>\n") == 1:
        count += 0.125
    if completion.count("\n<answer>\n") == 1:
        count += 0.125 - len(completion.split("\n</answer>\n")[-1]) * 0.001
    if completion.count("\n</answer>") == 1:
        count += 0.125 - (len(completion.split("\n</answer>")[-1]) - 1) * 0.001
    return count


def gsm8k_reward(completion: str, answer: str, legacy_reward_quirks: bool = False) -> float:
    """d1's GSM8K training reward (``diffu-grpo/reward_func.py``), the sum of five functions (at most 4.0):
    xmlcount (<= 0.5), soft format 0.5 (the text starts with a reasoning pair, then an answer pair), strict format
    0.5 (the whole text is exactly that layout), 0.5 if the extracted answer is all digits, and 2.0 if it equals
    ``answer`` (the text after ``####``) as a string.

    ``legacy_reward_quirks`` reproduces d1's released regexes, compiled without DOTALL: a newline inside the
    tags (every multi-line reasoning) fails both format checks.

    >>> text = "<reasoning>\\n2+3\\nis 5\\n</reasoning>\\n<answer>\\n5\\n</answer>\\n"
    >>> gsm8k_reward(text, "5"), gsm8k_reward(text, "5", legacy_reward_quirks=True)
    (4.0, 3.0)
    """
    flags = 0 if legacy_reward_quirks else re.DOTALL
    extracted = xml_answer(completion)
    return (
        xml_count(completion)
        + (0.5 if re.match(_SOFT_FORMAT, completion, flags) else 0.0)
        + (0.5 if re.match(_STRICT_FORMAT, completion, flags) else 0.0)
        + (0.5 if extracted.isdigit() else 0.0)
        + (2.0 if extracted == answer.strip() else 0.0)
    )


def math_reward(completion: str, answer: str, legacy_reward_quirks: bool = False) -> float:
    """d1's MATH training reward (``reward_func.py``; at most 3.0): 2.0 if d1's ``is_equiv`` holds between the last
    box of the completion and ``answer``, plus the format term 0.5 x (answer tags present) + 0.5 x (1.0 if a
    ``\\boxed`` appears, else 0.5).

    ``legacy_reward_quirks`` reproduces d1's released code, whose boxed test is written with a non-raw ``"\\b"``
    (a backspace) and so never matches: the format term is then 0.75 with answer tags and 0.25 without.

    >>> text = "<answer>\\n\\\\boxed{\\\\frac{1}{2}}\\n</answer>"
    >>> math_reward(text, "\\\\frac12"), math_reward(text, "3", legacy_reward_quirks=True)
    (3.0, 0.75)
    """
    has_box = "\\boxed" in completion
    boxed = last_boxed_only_string(completion) if has_box else None
    correct = boxed is not None and is_equiv(remove_boxed(boxed), answer)
    tags = "<answer>" in completion and "</answer>" in completion
    return (2.0 if correct else 0.0) + 0.5 * tags + 0.5 * (1.0 if has_box and not legacy_reward_quirks else 0.5)
