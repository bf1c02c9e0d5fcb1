"""d1 scoring rules (d1's ``eval/parse_and_get_acc.py``, ``reward_func.py``) on hand-made completions."""

import doctest

import pytest

from ddmrl.tasks import arithmetic, d1_scoring
from ddmrl.tasks.arithmetic import evaluate_arithmetic
from ddmrl.tasks.d1_scoring import (
    countdown_correct,
    countdown_extract,
    countdown_reward,
    gsm8k_reward,
    last_answer_block,
    math_reward,
    sudoku_cells,
    sudoku_extract,
    sudoku_reward,
)

PUZZLE, SOLUTION = "3102200002100320", "3142243142131324"  # first row of d1's 4x4 test set; 8 empty cells
WRONG = SOLUTION.translate(str.maketrans("1234", "2341"))  # every cell relabelled, so every cell wrong


def test_docstring_examples():
    results = [doctest.testmod(d1_scoring), doctest.testmod(arithmetic)]
    assert sum(r.attempted for r in results) > 10 and not any(r.failed for r in results)


# ------------------------------------------------------------------------------------------ sudoku training


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (f"<answer>{SOLUTION}</answer>", 1.0),
        (f"<answer>\n{SOLUTION[:4]} {SOLUTION[4:8]}\n{SOLUTION[8:12]}\n{SOLUTION[12:]}\n</answer>", 1.0),
        (f"<answer>{WRONG}</answer>", 0.0),
        (f"<answer>{SOLUTION[:8]}</answer>", 0.5),  # padded with 0: empty cells 2,5,6,7 right, 9,10,12,15 wrong
        (f"<answer>{SOLUTION}99</answer>", 1.0),  # truncated to 16
        (f"<answer>{SOLUTION[:8]}</answer><answer>{SOLUTION}</answer>", 1.0),  # the last block counts
        (f"<answer>{SOLUTION}</answer><answer>{SOLUTION[:8]}</answer>", 0.5),
        (f"<answer>```{SOLUTION}```</answer>", 1.0),
        (SOLUTION, 0.0),  # no answer block
        (f"<answer>{SOLUTION}", 0.0),  # unterminated: no block
        (f"{SOLUTION}</answer>", 0.0),
        ("<answer></answer>", 0.0),
    ],
)
def test_sudoku_reward(completion, expected):
    assert sudoku_reward(completion, PUZZLE, SOLUTION) == pytest.approx(expected)


def test_sudoku_reward_counts_only_empty_cells():
    # the given cells are wrong here, the 8 empty cells right: the reward ignores the givens
    guess = "".join(s if p == "0" else "9" for p, s in zip(PUZZLE, SOLUTION, strict=True))
    assert sudoku_reward(f"<answer>{guess}</answer>", PUZZLE, SOLUTION) == 1.0
    # one empty cell wrong -> 7/8
    near = SOLUTION[:2] + "9" + SOLUTION[3:]
    assert sudoku_reward(f"<answer>{near}</answer>", PUZZLE, SOLUTION) == pytest.approx(7 / 8)


# ----------------------------------------------------------------------------------------------- sudoku eval


@pytest.mark.parametrize(
    ("completion", "extracted"),
    [
        # 1. fenced digits after <answer>, whitespace removed
        (f"<answer>\n```\n{SOLUTION[:4]}\n{SOLUTION[4:8]}\n{SOLUTION[8:]}\n```\n</answer>", SOLUTION),
        # 2. <answer> ... </answer>, and <answer> ... end-of-text markers
        (f"<answer> {SOLUTION} </answer>", SOLUTION),
        (f"<answer>{SOLUTION}<|eot_id|>", SOLUTION),
        (f"<answer>{SOLUTION}<|endoftext|>", SOLUTION),
        (f"<answer>{SOLUTION[:8]}</answer>", SOLUTION[:8] + "00000000"),
        (f"<answer>{SOLUTION}12</answer>", SOLUTION),
        ("<answer>12 ab</answer>", "12ab000000000000"),  # not restricted to digits
        # 3. text after </answer> (to an end marker or the end)
        (f"reasoning</answer>\n{SOLUTION}", SOLUTION),
        (f"</answer> {SOLUTION[:8]}<|eot_id|> junk", SOLUTION[:8] + "00000000"),
        # 4. 16 digits right before </answer> (3. captured nothing)
        (f"I think {SOLUTION}\n</answer>", SOLUTION),
        # 5. bare 16 digits anywhere
        (f"The solution is {SOLUTION}.", SOLUTION),
        (f"digits {SOLUTION}7 are 17 long", "0" * 16),  # \b(\d{16})\b needs exactly 16
        ("nothing", "0" * 16),
        # the cascade order: the fenced block wins over a plain block
        (f"<answer>{WRONG}```{SOLUTION}```</answer>", SOLUTION),
        # a blank capture moves on to the next rule
        (f"<answer>  </answer>{SOLUTION}", SOLUTION),
    ],
)
def test_sudoku_extract(completion, extracted):
    assert sudoku_extract(completion) == extracted


def test_sudoku_cells():
    assert sudoku_cells(f"<answer>{SOLUTION}</answer>", PUZZLE, SOLUTION) == (8, 8)
    assert sudoku_cells(f"<answer>{WRONG}</answer>", PUZZLE, SOLUTION) == (0, 8)
    assert sudoku_cells(f"answer: {SOLUTION}", PUZZLE, SOLUTION) == (8, 8)  # eval is lenient, reward is not
    assert sudoku_reward(f"answer: {SOLUTION}", PUZZLE, SOLUTION) == 0.0
    assert sudoku_cells(f"<answer>{SOLUTION[:8]}</answer>", PUZZLE, SOLUTION) == (4, 8)


# --------------------------------------------------------------------------------------- countdown training

NUMS, TARGET = [3, 7, 9], 20


@pytest.mark.parametrize(
    ("completion", "numbers", "target", "expected"),
    [
        ("<answer>3*9-7</answer>", NUMS, TARGET, 1.0),
        ("<answer>\n 9*3 - 7\n</answer>", NUMS, TARGET, 1.0),  # spaces and newlines
        ("<answer>(9-7)*3</answer>", NUMS, TARGET, 0.1),  # valid but wrong value
        ("<answer>7+7+3+3</answer>", NUMS, TARGET, 0.1),  # right value, numbers reused
        ("<answer>3*9-7+0</answer>", NUMS, TARGET, 0.1),  # right value, an extra number
        ("<answer>4*5</answer>", NUMS, TARGET, 0.1),  # right value, wrong numbers
        ("<answer>3*9</answer>", NUMS, TARGET, 0.1),  # a number missing
        ("<answer>(9-3)/2</answer>", [9, 3, 2], 3, 1.0),  # exact division
        ("<answer>9/2+3</answer>", [9, 3, 2], 7, 0.1),  # 7.5
        ("<answer>9/2+3</answer>", [9, 3, 2], 7.5, 1.0),
        ("<answer>9/(3-3)</answer>", [9, 3, 3], 3, 0.1),  # division by zero
        ("<answer>3x9-7</answer>", NUMS, TARGET, 0.1),  # disallowed character
        ("<answer>3 \\times 9 - 7</answer>", NUMS, TARGET, 0.1),  # LaTeX is not mapped in training
        ("<answer>3*9-7=20</answer>", NUMS, TARGET, 0.1),  # '=' and 20 counts as a number
        ("<answer>3 9 7</answer>", NUMS, TARGET, 0.1),  # does not parse
        ("<answer></answer>", NUMS, TARGET, 0.1),  # empty block: wrong numbers
        ("3*9-7", NUMS, TARGET, 0.0),  # no answer block
        ("<answer>3*9-7", NUMS, TARGET, 0.0),  # unterminated
        ("<answer>1</answer><answer>3*9-7</answer>", NUMS, TARGET, 1.0),  # the last block counts
        ("<answer>3*9-7</answer><answer>1</answer>", NUMS, TARGET, 0.1),
    ],
)
def test_countdown_reward(completion, numbers, target, expected):
    assert countdown_reward(completion, numbers, target) == expected


# ------------------------------------------------------------------------------------------- countdown eval


@pytest.mark.parametrize(
    ("completion", "equation"),
    [
        ("\\boxed{3*9-7}", "3*9-7"),
        ("\\boxed{1} then \\boxed{3*9-7}", "3*9-7"),  # the last box
        ("<answer>\\boxed{3*9-7}</answer>", "3*9-7"),
        ("<answer>9*3-7</answer> \\boxed{3*9-7}", "3*9-7"),  # a box wins over <answer>
        ("\\boxed{3*{9}-7}", "3*{9}-7"),  # balanced braces
        ("\\boxed{3*9-7", "\\boxed{3*9-7"),  # unterminated box, no <answer>: whole text
        ("<answer>9*3-7</answer> \\boxed{3*9", "9*3-7"),  # unterminated box: <answer> fallback
        ("<answer>1</answer><answer>9*3-7</answer>", "9*3-7"),  # the last block
        ("<answer>9*3-7", "9*3-7"),  # unterminated <answer> runs to the end
        ("3*9-7", "3*9-7"),  # whole text
        ("\\boxed{3 \\times 9 - 7}", "3 * 9 - 7"),
        ("\\boxed{3 \\cdot 9 - 7}", "3 * 9 - 7"),
        ("\\boxed{(9-3) \\div 2}", "(9-3) / 2"),
        ("\\boxed{3*9-7 = 20}", "3*9-7"),  # expr = number keeps the left side
        ("so 3*9-7=20.", "3*9-7"),
        ("<answer>3*9-7=20.0</answer>", "3*9-7"),
    ],
)
def test_countdown_extract(completion, equation):
    assert countdown_extract(completion) == equation


@pytest.mark.parametrize(
    ("completion", "numbers", "target", "expected"),
    [
        ("<answer>3*9-7</answer>", NUMS, TARGET, True),
        ("\\boxed{3 \\times 9 - 7}", NUMS, TARGET, True),
        ("<answer>3 \\times 9 - 7</answer>", NUMS, TARGET, True),  # mapped in eval, unlike the reward
        ("<answer>3*9-7=20</answer>", NUMS, TARGET, True),  # expr = value
        ("The answer: 3*9-7 = 20", NUMS, TARGET, True),  # whole-text fallback + expr = value
        ("3*9-7", NUMS, TARGET, True),
        ("\\boxed{(9-3)\\div 2}", [9, 3, 2], 3, True),
        ("<answer>(9-3)/2</answer>", [2, 9, 3], 3, True),  # order of numbers irrelevant
        ("<answer>9*3-7</answer> \\boxed{9*3}", NUMS, TARGET, False),  # the box wins, and is wrong
        ("<answer>7+7+3+3</answer>", NUMS, TARGET, False),  # number reused
        ("<answer>4*5</answer>", NUMS, TARGET, False),  # wrong numbers
        ("<answer>(9-7)*3</answer>", NUMS, TARGET, False),  # wrong value
        ("<answer>3x9-7</answer>", NUMS, TARGET, False),  # disallowed character
        ("<answer>9/(3-3)</answer>", [9, 3, 3], 3, False),  # division by zero
        ("<answer>20</answer>", NUMS, TARGET, False),
        ("", NUMS, TARGET, False),
    ],
)
def test_countdown_correct(completion, numbers, target, expected):
    assert countdown_correct(completion, numbers, target) is expected


# ------------------------------------------------------------------------------------------------- helpers


def test_last_answer_block():
    assert last_answer_block("<answer>a</answer><answer>b</answer>") == "b"
    assert last_answer_block("<answer>a\nb</answer>") == "a\nb"
    assert last_answer_block("no tags") is None


@pytest.mark.parametrize(
    ("expression", "value"),
    [("3*9-7", 20), ("(9-3)/2", 3.0), ("-3+9", 6), ("7//2", 3), ("2**10", 1024), (" 1.5*2 ", 3.0), ("((4))", 4)],
)
def test_evaluate_arithmetic(expression, value):
    assert evaluate_arithmetic(expression) == value


@pytest.mark.parametrize(
    "expression",
    ["__import__('os').system('true')", "x+1", "(3)(4)", "3 9", "1/0", "()", "[1]", "9**9**9**9", "", "03"],
)
def test_evaluate_arithmetic_rejects(expression):
    with pytest.raises(ValueError):
        evaluate_arithmetic(expression)


# ------------------------------------------------------------------------------------------ GSM8K and MATH training

GSM_STRICT = "<reasoning>\nHalf of 10 is 5.\n</reasoning>\n<answer>\n5\n</answer>\n"


@pytest.mark.parametrize(
    ("completion", "answer", "expected", "legacy"),
    [
        # xmlcount 0.5 + soft 0.5 + strict 0.5 + int 0.5 + correct 2.0
        # the released soft-format regex has no DOTALL: the newline after <reasoning> already fails it
        (GSM_STRICT, "5", 4.0, 3.5),
        (GSM_STRICT, "6", 2.0, 1.5),  # wrong answer: format and int only
        # multi-line reasoning: the released regexes (no DOTALL) fail both format checks
        ("<reasoning>\na\nb\n</reasoning>\n<answer>\n5\n</answer>\n", "5", 4.0, 3.0),
        # three characters after the answer tags: -0.003 and -0.003 in the two tail terms, and no strict format
        (GSM_STRICT + "xyz", "5", 3.494, 2.994),
        ("The answer is 5", "5", 0.0, 0.0),  # no tags: the extraction is the whole text
        ("5", "5", 2.5, 2.5),  # no tags, but the whole text is the answer (int + correct)
        # string match (commas count), not all digits; d1's tail term gives +0.001 for nothing after </answer>
        ("<answer>\n1,200\n</answer>", "1200", 0.126, 0.126),
    ],
)
def test_gsm8k_reward(completion, answer, expected, legacy):
    assert gsm8k_reward(completion, answer) == pytest.approx(expected)
    assert gsm8k_reward(completion, answer, legacy_reward_quirks=True) == pytest.approx(legacy)


@pytest.mark.parametrize(
    ("completion", "answer", "expected", "legacy"),
    [
        ("<answer>\n\\boxed{\\frac{1}{2}}\n</answer>", "\\dfrac12", 3.0, 2.75),  # is_equiv normalises
        ("<answer>\n\\boxed{3}\n</answer>", "4", 1.0, 0.75),
        ("\\boxed{4} then \\boxed{3}", "3", 2.5, 2.25),  # the last box counts; no answer tags
        ("3", "3", 0.25, 0.25),  # no box: d1's extraction would return the whole text, but nothing is boxed
        ("\\boxed{3", "3", 0.5, 0.25),  # an unterminated box is no answer
    ],
)
def test_math_reward(completion, answer, expected, legacy):
    assert math_reward(completion, answer) == pytest.approx(expected)
    assert math_reward(completion, answer, legacy_reward_quirks=True) == pytest.approx(legacy)
