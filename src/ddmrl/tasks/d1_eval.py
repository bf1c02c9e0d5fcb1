"""d1's evaluation parsers for GSM8K, MATH500, Countdown and Sudoku, rule for rule (quirks included).

These reproduce the offline scorer that produced the LLaDA numbers in d1 (Zhao et al. 2025, diffu-GRPO):
``eval/parse_and_get_acc.py`` (``parse_gsm_answers``, ``parse_math_answers``, ``parse_countdown_answers``,
``parse_sudoku_answers``) and its Hendrycks-style helpers in ``eval/parser_helper.py``, as described in
dllm-reasoning/d1 at commit 837888f and checked against forks of d1's ``eval/`` directory. The rules are
restated here, not copied. Where d1 relied on exceptions (an ``int()`` that fails, an index past the end of a
string) the same inputs still raise here at the same point, so the verdicts agree.

The quirks are kept on purpose, because the point is to reproduce d1's numbers:

* GSM8K: the *first* usable ``\\boxed{...}`` wins, matched non-greedily on one line (``\\boxed{1,200}`` gives 1.0,
  ``\\boxed{\\frac{1}{2}}`` gives the content ``\\frac{1``); the fallback reads the *first* ``<answer>`` block and
  takes its *last* number; gold answers with a minus sign cannot be parsed, so those items are never correct.
* MATH500: the *last* ``\\boxed`` (or ``\\fbox``) with brace matching; ``\\boxed `` with a space anywhere wins over
  every braced box and runs to the next ``$``; no box at all returns the whole text (which then scores wrong, the
  ``<answer>`` fallback only runs for an unterminated or empty box); ``\\fbox{x}`` keeps its wrapper; an answer
  that makes the normaliser raise (``x/2``, a trailing ``\\sqrt``) is compared as a raw string.
* Countdown: the last box, the whole text when there is no box; an ``=`` is cut only when the right side starts
  with a digit, dot or space and the left side has no dot.
* Sudoku: a five-regex cascade, then cell accuracy pooled over all puzzles (not the share solved).

One deliberate difference: d1 evaluates Countdown expressions with ``eval``, so a power with an astronomically large
result (``9**9**9``) hangs it or raises ``OverflowError`` out of the whole run; here such an item is scored wrong
(:func:`ddmrl.tasks.arithmetic.evaluate_arithmetic` refuses results beyond ~100k bits).

Besides the unit tests, the four parsers were compared with a local transcription of d1's functions on 80,000
random and structured generations (not part of the test suite): the extracted answers and verdicts agreed on every
one, apart from the power case above.

The Countdown rule here differs from :func:`ddmrl.tasks.d1_scoring.countdown_extract`, which adds an ``<answer>``
step for the embedded tasks; use this module to re-score LLaDA generations.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ddmrl.tasks.arithmetic import evaluate_arithmetic

__all__ = [
    "countdown_eval_correct",
    "countdown_eval_extract",
    "countdown_from_question",
    "gsm8k_correct",
    "gsm8k_extract",
    "gsm8k_gold",
    "is_equiv",
    "last_boxed_only_string",
    "math_correct",
    "math_extract",
    "remove_boxed",
    "strip_string",
    "sudoku_eval_cells",
    "sudoku_eval_extract",
    "sudoku_puzzle_from_question",
]

SUDOKU_CELLS = 16  # d1's 4x4 Sudoku

_GSM_GOLD = re.compile(r"####\s*\$?([\d,]+(?:\.\d+)?)")  # no minus sign: -10 and -3 give None
_GSM_BOXED = re.compile(r"\\boxed{(.*?)}")  # non-greedy, no DOTALL: a box spanning lines is not seen
_FIRST_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"-?\d+\.?\d*")
_ONLY_DOTS = re.compile(r"^\.+$")
_CD_EQUATION = re.compile(r"([0-9+\-*/() ]+)=[0-9. ]+")
_CD_ALLOWED = re.compile(r"^[\d+\-*/().\s]+$")
_CD_INTEGERS = re.compile(r"\d+")
_CD_Q_NUMBERS = re.compile(r"Numbers: \[([\d, ]+)\]", re.IGNORECASE)
_CD_Q_TARGET = re.compile(r"Target: (\d+)", re.IGNORECASE)
_SUDOKU_Q = re.compile(r"Sudoku puzzle: ([0-9]{16})")
#: d1's Sudoku cascade, tried in order with DOTALL; the first capture that is not blank wins
_SUDOKU_PATTERNS = tuple(
    re.compile(p, re.DOTALL)
    for p in (
        r"<answer>.*?```\s*([\d\s]+)```",
        r"<answer>(.*?)(?:<\|eot_id\|>|<\|endoftext\|>|</answer>)",
        r"</answer>\s*(.*?)(?:<\|eot_id\|>|<\|endoftext\|>|$)",
        r".*?(\d{16})\s*</answer>",
        r"\b(\d{16})\b",
    )
)


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)  # Python's float: accepts "1e3", "1_000", "nan", " 7 "; as in d1
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------------------ GSM8K


def gsm8k_gold(solution: str) -> float | None:
    """d1's gold answer of a GSM8K worked solution: the number after the first ``####`` (commas dropped).

    >>> gsm8k_gold("... so 2 + 16 = 18\\n#### 18"), gsm8k_gold("#### $1,200.50")
    (18.0, 1200.5)
    >>> gsm8k_gold("#### -10") is None  # d1 cannot read negative answers
    True
    """
    match = _GSM_GOLD.search(solution)
    return float(match.group(1).replace(",", "")) if match else None


def gsm8k_extract(generation: str) -> float | None:
    """d1's GSM8K prediction (``parse_gsm_answers``).

    Boxes ``\\boxed{...}`` (non-greedy, on one line) are walked in order; the first whose stripped content is
    not empty and not only dots gives ``float(content)``, or else the first number (``-?\\d+\\.?\\d*``) in it;
    a box without any number is skipped. With no usable box, the *first* ``<answer>...</answer>`` block gives
    ``float`` of its stripped text, or else its *last* number.

    >>> gsm8k_extract("\\\\boxed{...} then \\\\boxed{12} and \\\\boxed{13}")
    12.0
    >>> gsm8k_extract("\\\\boxed{1,200}"), gsm8k_extract("\\\\boxed{\\\\frac{1}{2}}")
    (1.0, 1.0)
    >>> gsm8k_extract("<answer>It is 3 or 4 apples</answer>")
    4.0
    >>> gsm8k_extract("The answer is 42.") is None
    True
    """
    for content in _GSM_BOXED.findall(generation):
        content = content.strip()
        if not content or content == "..." or _ONLY_DOTS.match(content):
            continue
        value = _float_or_none(content)
        if value is not None:
            return value
        numbers = _NUMBER.findall(content)
        if numbers:
            return float(numbers[0])
    match = _FIRST_ANSWER.search(generation)
    if match:
        text = match.group(1).strip()
        if text:
            value = _float_or_none(text)
            if value is not None:
                return value
            numbers = _NUMBER.findall(text)
            if numbers:
                return float(numbers[-1])
    return None


def gsm8k_correct(generation: str, gold: float | None) -> bool:
    """d1's verdict: the prediction equals the gold exactly, as floats; a ``None`` gold is never matched.

    >>> gsm8k_correct("<answer>\\\\boxed{18}</answer>", 18.0), gsm8k_correct("\\\\boxed{18.0001}", 18.0)
    (True, False)
    """
    prediction = gsm8k_extract(generation)
    return prediction is not None and gold is not None and prediction == gold


# ---------------------------------------------------------------------------------------------------- MATH500


def last_boxed_only_string(text: str) -> str | None:
    """d1's variant of Hendrycks' ``last_boxed_only_string``.

    If ``"\\boxed "`` (with a space) occurs anywhere, returns ``"\\boxed "`` plus the text after its *last*
    occurrence up to the next ``$``. Otherwise finds the last ``\\boxed`` (else the last ``\\fbox``) and returns
    it through the brace that brings the count of open braces back to zero, or ``None`` when that never happens.
    With neither ``\\boxed`` nor ``\\fbox`` d1 returns the *whole text* (Hendrycks returns ``None``).

    >>> last_boxed_only_string("so \\\\boxed{\\\\frac{1}{2}} done")
    '\\\\boxed{\\\\frac{1}{2}}'
    >>> last_boxed_only_string("$\\\\boxed 5$ and \\\\boxed{6}")
    '\\\\boxed 5'
    >>> last_boxed_only_string("\\\\boxed{5") is None, last_boxed_only_string("no box")
    (True, 'no box')
    """
    idx = text.rfind("\\boxed")
    if "\\boxed " in text:
        return "\\boxed " + text.split("\\boxed ")[-1].split("$")[0]
    if idx < 0:
        idx = text.rfind("\\fbox")
        if idx < 0:
            return text
    depth = 0
    for i in range(idx, len(text)):
        if text[i] == "{":
            depth += 1
        if text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[idx : i + 1]
    return None


def remove_boxed(boxed: str) -> str:
    """d1's ``remove_boxed``: drop a leading ``\\boxed `` or a ``\\boxed{...}`` wrapper; anything else unchanged.

    >>> remove_boxed("\\\\boxed{5}"), remove_boxed("\\\\boxed 5"), remove_boxed("\\\\fbox{5}")
    ('5', '5', '\\\\fbox{5}')
    """
    if "\\boxed " in boxed:
        if not boxed.startswith("\\boxed "):
            raise ValueError(f"malformed boxed string: {boxed!r}")  # d1: AssertionError (never reached)
        return boxed[len("\\boxed ") :]
    if boxed.startswith("\\boxed{") and boxed.endswith("}"):
        return boxed[len("\\boxed{") : -1]
    return boxed


def _fix_fracs(string: str) -> str:
    substrs = string.split("\\frac")
    new_str = substrs[0]
    for substr in substrs[1:]:
        new_str += "\\frac"
        if substr[0] == "{":  # IndexError on an empty piece, as in d1 (is_equiv then compares raw strings)
            new_str += substr
            continue
        if len(substr) < 2:
            return string
        a, b = substr[0], substr[1]
        if b != "{":
            new_str += "{" + a + "}{" + b + "}" + substr[2:]
        else:
            new_str += "{" + a + "}" + b + substr[2:]
    return new_str


def _fix_a_slash_b(string: str) -> str:
    parts = string.split("/")
    if len(parts) != 2:
        return string
    a, b = int(parts[0]), int(parts[1])  # ValueError for non-integers is NOT caught, as in d1
    if string != f"{a}/{b}":
        return string
    return "\\frac{" + str(a) + "}{" + str(b) + "}"


def _remove_right_units(string: str) -> str:
    if "\\text{ " in string:
        splits = string.split("\\text{ ")
        if len(splits) != 2:
            raise ValueError("more than one '\\text{ ' unit")  # d1: AssertionError
        return splits[0]
    return string


def _fix_sqrt(string: str) -> str:
    if "\\sqrt" not in string:
        return string
    splits = string.split("\\sqrt")
    new_string = splits[0]
    for split in splits[1:]:
        if split[0] != "{":  # IndexError when "\sqrt" ends the string, as in d1
            new_string += "\\sqrt{" + split[0] + "}" + split[1:]
        else:
            new_string += "\\sqrt" + split
    return new_string


def strip_string(string: str) -> str:
    """d1's (Hendrycks') answer normaliser; raises where d1's raises (see :func:`is_equiv`).

    >>> strip_string("\\\\dfrac{1}{2}"), strip_string("0.5"), strip_string("1/2"), strip_string("x = 3")
    ('\\\\frac{1}{2}', '\\\\frac{1}{2}', '\\\\frac{1}{2}', '3')
    >>> strip_string("\\\\left( 3, \\\\sqrt2 \\\\right)"), strip_string("10\\\\%"), strip_string(".25")
    ('(3,\\\\sqrt{2})', '10', '0.25')
    """
    string = string.replace("\n", "")
    string = string.replace("\\!", "")
    string = string.replace("\\\\", "\\")
    string = string.replace("tfrac", "frac").replace("dfrac", "frac")
    string = string.replace("\\left", "").replace("\\right", "")
    string = string.replace("^{\\circ}", "").replace("^\\circ", "")
    string = string.replace("\\$", "")
    string = _remove_right_units(string)
    string = string.replace("\\%", "")  # d1 does this twice ("\\%" and "\%" are the same string)
    string = string.replace(" .", " 0.").replace("{.", "{0.")
    if len(string) == 0:
        return string
    if string[0] == ".":
        string = "0" + string
    sides = string.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        string = sides[1]
    string = _fix_sqrt(string)
    string = string.replace(" ", "")
    string = _fix_fracs(string)
    if string == "0.5":
        string = "\\frac{1}{2}"
    return _fix_a_slash_b(string)


def is_equiv(prediction: str | float | None, gold: str | float | None) -> bool:
    """d1's ``is_equiv``: a float on either side compares numerically (``< 1e-6``); otherwise the normalised
    strings must be equal, and if normalising either side raises, the raw strings must be equal.

    >>> is_equiv("\\\\frac12", "\\\\dfrac{1}{2}"), is_equiv("x/2", "\\\\frac{x}{2}"), is_equiv("x/2", "x/2")
    (True, False, True)
    """
    if type(prediction) is float or type(gold) is float:
        try:
            return abs(float(prediction) - float(gold)) < 1e-6  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
    if prediction is None and gold is None:
        return True
    if prediction is None or gold is None:
        return False
    try:
        return strip_string(prediction) == strip_string(gold)
    except Exception:  # d1 catches everything the normaliser raises
        return prediction == gold


def math_extract(generation: str) -> str | None:
    """d1's MATH500 prediction (``parse_math_answers``): ``remove_boxed(last_boxed_only_string(text))``; when
    that is ``None`` (unterminated box) or empty (empty box), the stripped content of the *first*
    ``<answer>...</answer>`` block if there is one.

    >>> math_extract("<answer>\\\\boxed{\\\\frac{\\\\pi}{2}}</answer>")
    '\\\\frac{\\\\pi}{2}'
    >>> math_extract("<answer> 7 </answer> \\\\boxed{}"), math_extract("<answer>7</answer> and no box")
    ('7', '<answer>7</answer> and no box')
    """
    boxed = last_boxed_only_string(generation)
    prediction = None if boxed is None else remove_boxed(boxed)
    if not prediction:
        match = _FIRST_ANSWER.search(generation)
        if match:
            prediction = match.group(1).strip()
    return prediction


def math_correct(generation: str, gold: str) -> bool:
    """d1's MATH500 verdict: :func:`is_equiv` of :func:`math_extract` and the dataset's ``answer``.

    >>> math_correct("<answer>\\\\boxed{\\\\dfrac{14}{3}}</answer>", "\\\\frac{14}{3}")
    True
    """
    prediction = math_extract(generation)
    return prediction is not None and is_equiv(prediction, gold)


# -------------------------------------------------------------------------------------------------- Countdown


def countdown_from_question(question: str) -> tuple[list[int], int | None]:
    """d1's fallback gold when the record has none: ``Numbers: [a, b, c]`` and ``Target: t`` in the question.

    >>> countdown_from_question("Numbers: [30, 100, 93]\\nTarget: 23")
    ([30, 100, 93], 23)
    """
    numbers: list[int] = []
    target = None
    match = _CD_Q_NUMBERS.search(question)
    if match:
        numbers = [int(n.strip()) for n in match.group(1).split(",")]  # ValueError on "1,,2", as in d1
    match = _CD_Q_TARGET.search(question)
    if match:
        target = int(match.group(1))
    return numbers, target


def countdown_eval_extract(generation: str) -> str:
    """d1's Countdown equation (``parse_countdown_answers``).

    ``remove_boxed(last_boxed_only_string(text))``, so the last box, or the *whole text* when there is none;
    only an unterminated box falls back to the first ``<answer>`` block (else the whole text). Then
    ``\\div`` -> ``/``, ``\\times`` and ``\\cdot`` -> ``*``, and the first ``([0-9+\\-*/() ]+)=[0-9. ]+`` match
    keeps its left side.

    >>> countdown_eval_extract("<answer>\\\\boxed{3 \\\\times 9 - 7 = 20}</answer>")
    '3 * 9 - 7'
    >>> countdown_eval_extract("<answer>3*9-7</answer>")  # no box: the whole text
    '<answer>3*9-7</answer>'
    >>> countdown_eval_extract("<answer>3*9-7</answer> \\\\boxed{3*9")  # unterminated box: the answer block
    '3*9-7'
    """
    boxed = last_boxed_only_string(generation)
    if boxed is None:
        match = _FIRST_ANSWER.search(generation)
        equation = match.group(1).strip() if match else generation
    else:
        equation = remove_boxed(boxed)
    equation = equation.replace("\\div", "/").replace("\\times", "*").replace("\\cdot", "*")
    match = _CD_EQUATION.search(equation)
    if match:
        equation = match.group(1).strip()
    return equation


def _countdown_value(equation: str) -> float | complex:
    """d1's ``evaluate_equation``: the value, or ``inf`` for bad characters or anything that fails."""
    if not _CD_ALLOWED.match(equation):
        return float("inf")
    try:
        return evaluate_arithmetic(equation)
    except (ValueError, ArithmeticError, TypeError):
        return float("inf")


def countdown_eval_correct(generation: str, numbers: Sequence[int], target: float | None) -> bool:
    """d1's verdict: the integers in the equation are exactly ``numbers`` (each once) and it is within 1e-5
    of ``target``.

    >>> countdown_eval_correct("\\\\boxed{(100 - 93) + 30 - 14}", [30, 100, 93], 23)  # an extra number
    False
    >>> countdown_eval_correct("\\\\boxed{100 - 93 + 30}", [30, 100, 93], 37)
    True
    """
    equation = countdown_eval_extract(generation)
    used = sorted(int(n) for n in _CD_INTEGERS.findall(equation))
    if used != sorted(numbers) or target is None:
        return False
    return abs(_countdown_value(equation) - target) < 1e-5


# ----------------------------------------------------------------------------------------------------- Sudoku


def sudoku_puzzle_from_question(question: str) -> str:
    """d1's puzzle: the first 16 characters if they are all digits, else the 16 digits after
    ``Sudoku puzzle: ``; raises ``ValueError`` when neither exists (d1 asserts).

    >>> sudoku_puzzle_from_question("Solve the following Sudoku puzzle: 3102200002100320\\n")
    '3102200002100320'
    """
    if len(question) >= SUDOKU_CELLS and all(c.isdigit() for c in question[:SUDOKU_CELLS]):
        return question[:SUDOKU_CELLS]
    match = _SUDOKU_Q.search(question)
    if not match:
        raise ValueError("no 16-digit puzzle in the question (expected 'Sudoku puzzle: <16 digits>')")
    return match.group(1)


def sudoku_eval_extract(generation: str) -> str:
    """d1's Sudoku solution string: the cascade's first non-blank capture, whitespace removed, then padded with
    ``0`` / cut to 16 characters; ``""`` when no pattern captures anything.

    >>> sudoku_eval_extract("<answer>\\n3142 2431\\n4213 1324\\n</answer>")
    '3142243142131324'
    >>> sudoku_eval_extract("<answer>\\n</answer>")
    ''
    """
    found = ""
    for pattern in _SUDOKU_PATTERNS:
        match = pattern.search(generation)
        if match and match.group(1).strip():
            found = match.group(1).strip()
            break
    found = re.sub(r"\s", "", found)
    if not found:
        return ""
    return (found + "0" * SUDOKU_CELLS)[:SUDOKU_CELLS]


def sudoku_eval_cells(generation: str, puzzle: str, solution: str) -> tuple[int, int]:
    """(empty cells filled correctly, empty cells) of one puzzle; d1 pools both over the test set.

    >>> sudoku_eval_cells("<answer>3142243142131324</answer>", "3102200002100320", "3142243142131324")
    (8, 8)
    """
    empty = [i for i in range(SUDOKU_CELLS) if puzzle[i] == "0"]
    guess = sudoku_eval_extract(generation)
    if not guess:
        return 0, len(empty)
    return sum(guess[i] == solution[i] for i in empty), len(empty)
