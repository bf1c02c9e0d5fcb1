"""d1's evaluation parsers, rule by rule (Zhao et al. 2025).

Every expected value below was worked out by hand from d1's rules as written in d1's
``eval/parse_and_get_acc.py``; the comment next to a case says which rule decides it.
"""

import doctest

import pytest

from ddmrl.tasks import d1_eval
from ddmrl.tasks.d1_eval import (
    countdown_eval_correct,
    countdown_eval_extract,
    countdown_from_question,
    gsm8k_correct,
    gsm8k_extract,
    gsm8k_gold,
    is_equiv,
    last_boxed_only_string,
    math_correct,
    math_extract,
    sudoku_eval_cells,
    sudoku_eval_extract,
    sudoku_puzzle_from_question,
)
from ddmrl.tasks.d1_scoring import countdown_correct

PUZZLE, SOLUTION = "3102200002100320", "3142243142131324"  # d1's first test puzzle; empty cells 2,5,6,7,8,11,12,15
WRONG = SOLUTION.translate(str.maketrans("1234", "2341"))  # every cell relabelled, so every cell wrong


def test_docstring_examples():
    result = doctest.testmod(d1_eval)
    assert result.attempted > 25 and result.failed == 0


# ---------------------------------------------------------------------------------------------------- GSM8K


@pytest.mark.parametrize(
    ("solution", "expected"),
    [
        ("She pays 16 - 3 - 4 = 9\n#### 18", 18.0),
        ("#### $1,200.50", 1200.5),  # optional $, commas removed
        ("####18", 18.0),  # no space needed
        ("#### 5 and later #### 6", 5.0),  # the first marker
        ("#### -10", None),  # no minus sign in the regex: the two negative test answers
        ("no marker at all", None),
    ],
)
def test_gsm8k_gold(solution, expected):
    assert gsm8k_gold(solution) == expected


@pytest.mark.parametrize(
    ("generation", "expected"),
    [
        ("<reasoning>...</reasoning>\n<answer>\n\\boxed{18}\n</answer><|eot_id|>", 18.0),
        ("first \\boxed{12} then \\boxed{13}", 12.0),  # the FIRST usable box wins
        ("\\boxed{} \\boxed{...} \\boxed{....} \\boxed{ 7 }", 7.0),  # empty and dots-only boxes are skipped
        ("\\boxed{1,200}", 1.0),  # float() fails, first number is "1"
        ("\\boxed{\\frac{1}{2}}", 1.0),  # non-greedy: content "\frac{1", first number 1
        ("\\boxed{\\$18}", 18.0),  # float() fails, first number 18
        ("\\boxed{3 apples or 4}", 3.0),  # first number inside a box
        ("\\boxed{x} \\boxed{7}", 7.0),  # a box without numbers is skipped
        ("\\boxed{-3}", -3.0),
        ("\\boxed{2.50}", 2.5),
        ("\\boxed{1e3}", 1000.0),  # Python's float() accepts exponents
        ("\\boxed{\n42\n} <answer>41</answer>", 41.0),  # no DOTALL: a multi-line box is not seen
        ("<answer>It is 3 or 4</answer>", 4.0),  # fallback: the LAST number of the answer block
        ("<answer>5</answer> <answer>6</answer>", 5.0),  # fallback: the FIRST answer block
        ("<answer>costs 3.5.</answer>", 3.5),
        ("\\boxed{x} <answer>9</answer>", 9.0),  # no usable box, so the fallback runs
        ("<answer>   </answer>", None),
        ("<answer>9", None),  # unterminated answer block
        ("The answer is 42.", None),  # d1 never reads bare text
    ],
)
def test_gsm8k_extract(generation, expected):
    assert gsm8k_extract(generation) == expected


@pytest.mark.parametrize(
    ("generation", "gold", "correct"),
    [
        ("\\boxed{18}", 18.0, True),
        ("\\boxed{18.0}", 18.0, True),
        ("\\boxed{18.5}", 18.0, False),  # exact float equality
        ("\\boxed{1,200}", 1200.0, False),  # the comma quirk costs the item
        ("\\boxed{-10}", gsm8k_gold("#### -10"), False),  # gold None: never correct
        ("nothing", None, False),  # None == None does not count
    ],
)
def test_gsm8k_correct(generation, gold, correct):
    assert gsm8k_correct(generation, gold) is correct


# -------------------------------------------------------------------------------------------------- MATH500


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{3} and \\boxed{4}", "\\boxed{4}"),  # the last box
        ("\\boxed{\\frac{\\sqrt{3}}{2}}.", "\\boxed{\\frac{\\sqrt{3}}{2}}"),  # brace matching
        ("so $\\boxed 5$.", "\\boxed 5"),  # "\boxed " runs to the next $
        ("$\\boxed 5$ then \\boxed{6}", "\\boxed 5"),  # ... and wins over any braced box
        ("\\fbox{5}", "\\fbox{5}"),  # \fbox when there is no \boxed
        ("\\boxed{5", None),  # unterminated
        ("no box here", "no box here"),  # d1 returns the whole text
    ],
)
def test_last_boxed_only_string(text, expected):
    assert last_boxed_only_string(text) == expected


@pytest.mark.parametrize(
    ("generation", "expected"),
    [
        ("<answer>\\boxed{\\frac{\\pi}{2}}</answer>", "\\frac{\\pi}{2}"),
        ("\\fbox{5}", "\\fbox{5}"),  # remove_boxed only unwraps \boxed: the wrapper stays
        ("<answer>5</answer>", "<answer>5</answer>"),  # no box: the whole text, the fallback never runs
        ("<answer> 5 </answer> \\boxed{}", "5"),  # empty box: the first answer block, stripped
        ("<answer>5</answer><answer>6</answer> \\boxed{5", "5"),  # unterminated box: the FIRST answer block
        ("\\boxed{5", None),  # unterminated and no answer block
    ],
)
def test_math_extract(generation, expected):
    assert math_extract(generation) == expected


@pytest.mark.parametrize(
    ("generation", "gold", "correct"),
    [
        ("<answer>\\boxed{\\dfrac{1}{4}}</answer>", "\\frac{1}{4}", True),
        ("\\boxed{3} ... \\boxed{4}", "4", True),
        ("\\boxed{3} ... \\boxed{4}", "3", False),
        ("$\\boxed 5$ then \\boxed{6}", "6", False),  # the spaced box wins
        ("\\fbox{5}", "5", False),
        ("<answer>5</answer>", "5", False),  # no box: whole text compared, wrong
        ("<answer>5</answer> \\boxed{}", "5", True),
        ("\\boxed{5", "5", False),
    ],
)
def test_math_correct(generation, gold, correct):
    assert math_correct(generation, gold) is correct


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", True),  # \left \right and spaces dropped
        ("\\tfrac{1}{2}", "0.5", True),  # tfrac -> frac; "0.5" -> \frac{1}{2}
        ("90^\\circ", "90", True),
        ("90^{\\circ}", "90", True),
        ("\\$18", "18", True),
        ("10 \\text{ cm}", "10", True),  # a unit after "\text{ " is dropped
        ("10\\text{cm}", "10", False),  # ... only with the space
        ("2 \\text{ cm} 3 \\text{ cm}", "2", False),  # two units: normaliser raises, raw strings differ
        ("50\\%", "50", True),
        ("50%", "50", False),  # a bare % stays
        (".5", "\\frac{1}{2}", True),  # leading dot gets a 0, then 0.5 -> \frac{1}{2}
        ("{.5}", "{0.5}", True),
        ("k = 3", "3", True),  # left side of at most 2 characters ("k ") is dropped
        ("abc = 3", "3", False),
        ("\\sqrt3", "\\sqrt{3}", True),
        ("\\frac12", "\\frac{1}{2}", True),
        ("\\frac1{72}", "\\frac{1}{72}", True),
        ("-\\frac12", "-\\frac{1}{2}", True),
        ("3/4", "\\frac{3}{4}", True),  # integer a/b -> \frac{a}{b}
        ("x/2", "\\frac{x}{2}", False),  # int("x") raises: raw comparison
        ("x/2", "x/2", True),
        ("3\\sqrt", "3\\sqrt", True),  # trailing \sqrt raises: raw comparison, equal
        ("3\\sqrt", "3 \\sqrt", False),  # raw comparison, unequal
        ("1,000", "1000", False),  # commas are kept
        ("\\!5", "5", True),
        ("a\nb", "ab", True),
        (0.5, "0.5", True),  # a float on either side: numeric comparison
        (0.5, "1/2", False),  # float("1/2") fails
        (None, "5", False),
    ],
)
def test_is_equiv(prediction, gold, expected):
    assert is_equiv(prediction, gold) is expected


# ------------------------------------------------------------------------------------------------ Countdown


@pytest.mark.parametrize(
    ("generation", "expected"),
    [
        ("<answer>\\boxed{3 \\times 9 - 7}</answer>", "3 * 9 - 7"),
        ("\\boxed{(9-7) \\cdot 3}", "(9-7) * 3"),
        ("\\boxed{12 \\div 6}", "12 / 6"),
        ("\\boxed{3*9-7 = 20}", "3*9-7"),  # "= number" cut
        ("\\boxed{3*9-7 = twenty}", "3*9-7"),  # right side may start with a space
        ("\\boxed{3*9-7=x}", "3*9-7=x"),  # not cut
        ("\\boxed{0.5*4 = 2}", "5*4"),  # no dot in the left class: the match starts after the dot
        ("<answer>3*9-7</answer>", "<answer>3*9-7</answer>"),  # no box: the whole text
        ("<answer>3*9-7</answer> \\boxed{3*9", "3*9-7"),  # unterminated box: the first answer block
        ("\\boxed{3*9", "\\boxed{3*9"),  # unterminated, no answer block: the whole text
        ("\\boxed{1+2} then \\boxed{3*9-7}", "3*9-7"),  # the last box
    ],
)
def test_countdown_eval_extract(generation, expected):
    assert countdown_eval_extract(generation) == expected


@pytest.mark.parametrize(
    ("generation", "numbers", "target", "correct"),
    [
        ("\\boxed{3*9-7}", [3, 7, 9], 20, True),
        ("<answer>\\boxed{3 \\times 9 - 7}</answer>", [3, 7, 9], 20, True),
        ("\\boxed{(9-7) \\cdot 3}", [3, 7, 9], 6, True),
        ("\\boxed{(3 + 9) \\div 6}", [3, 9, 6], 2, True),
        ("\\boxed{3*9-7 = 20}", [3, 7, 9], 20, True),
        ("3*9-7", [3, 7, 9], 20, True),  # no box, no tags: the whole text is the expression
        ("<answer>3*9-7</answer>", [3, 7, 9], 20, False),  # no box: tags make the whole text invalid
        ("<answer>3*9-7</answer> \\boxed{3*9", [3, 7, 9], 20, True),
        ("\\boxed{3*9-7} then \\boxed{1+2}", [3, 7, 9], 20, False),  # the last box counts
        ("\\boxed{7+7+3+3}", [3, 7, 9], 20, False),  # numbers reused
        ("\\boxed{27-7}", [3, 7, 9], 20, False),  # numbers missing
        ("\\boxed{3*9-7+0}", [3, 7, 9], 20, False),  # an extra number
        ("\\boxed{5/(2-2)}", [2, 2, 5], 5, False),  # division by zero -> inf
        ("\\boxed{(3)(9)}", [3, 9], 27, False),  # "int is not callable" -> inf
        ("\\boxed{3**2}", [3, 2], 9, True),  # powers pass d1's character check
        ("\\boxed{1/3}", [1, 3], 0.333333, True),  # |0.3333333 - 0.333333| < 1e-5
        ("\\boxed{1/3}", [1, 3], 0.3333, False),  # 3.3e-5 is not
        ("\\boxed{0.5*4 = 2}", [5, 4], 20, True),  # the equation cut leaves "5*4"
        ("\\boxed{3*9-7}", [3, 7, 9], None, False),  # no target
    ],
)
def test_countdown_eval_correct(generation, numbers, target, correct):
    assert countdown_eval_correct(generation, numbers, target) is correct


def test_countdown_eval_differs_from_embedded_rule_on_answer_tags():
    # d1's eval never reads <answer> when there is no box; the embedded tasks' rule does (d1_scoring)
    assert not countdown_eval_correct("<answer>3*9-7</answer>", [3, 7, 9], 20)
    assert countdown_correct("<answer>3*9-7</answer>", [3, 7, 9], 20)


def test_countdown_from_question():
    assert countdown_from_question("Numbers: [30, 100, 93]\nTarget: 23") == ([30, 100, 93], 23)
    assert countdown_from_question("numbers: [1,2]\ntarget: 3") == ([1, 2], 3)  # case-insensitive
    assert countdown_from_question("nothing") == ([], None)


# --------------------------------------------------------------------------------------------------- Sudoku


@pytest.mark.parametrize(
    ("generation", "cells"),
    [
        ("<answer>\n```\n3142\n2431\n4213\n1324\n```\n</answer>", (8, 8)),  # 1: fenced digits
        ("<answer>1111111111111111 ```3142243142131324```</answer>", (8, 8)),  # 1 beats 2
        ("<answer>3142243142131324<|eot_id|>", (8, 8)),  # 2: up to an end token
        ("<answer>31422431<|endoftext|>42131324</answer>", (4, 8)),  # 2: the first terminator; padded with 0
        ("<answer>\n</answer>\n3142 2431 4213 1324<|eot_id|>", (8, 8)),  # 2 blank -> 3: after </answer>
        ("The grid is 3142243142131324</answer>", (8, 8)),  # 3 captures nothing -> 4
        ("Final: 3142243142131324.", (8, 8)),  # 5: standalone 16 digits
        ("x3142243142131324", (0, 8)),  # 5 needs word boundaries: nothing found
        ("<answer>I think 3142</answer>", (3, 8)),  # 2 keeps letters: "Ithink3142000000", cells 6,7,8 right
        ("<answer>3142243142131324999</answer>", (8, 8)),  # cut to 16
        ("<answer>1111111111111111</answer> <answer>3142243142131324</answer>", (2, 8)),  # the FIRST block
        (f"<answer>{WRONG}</answer>", (0, 8)),
        ("I give up", (0, 8)),
    ],
)
def test_sudoku_eval_cells(generation, cells):
    assert sudoku_eval_cells(generation, PUZZLE, SOLUTION) == cells


def test_sudoku_eval_extract_empty_and_padding():
    assert sudoku_eval_extract("I give up") == ""
    assert sudoku_eval_extract("<answer>12</answer>") == "1200000000000000"


def test_sudoku_puzzle_from_question():
    assert sudoku_puzzle_from_question(f"Solve the following Sudoku puzzle: {PUZZLE}\n") == PUZZLE
    assert sudoku_puzzle_from_question(PUZZLE + " is the grid") == PUZZLE  # first 16 characters, all digits
    with pytest.raises(ValueError, match="Sudoku puzzle"):
        sudoku_puzzle_from_question("Sudoku puzzle: 123")
