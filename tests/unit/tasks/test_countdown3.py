"""countdown3: generator validity, token budgets, d1 reward/score on reference and scrambled answers."""

import ast
import doctest
import operator
import re
from fractions import Fraction

import pytest

import ddmrl.tasks
from ddmrl.tasks import countdown3 as countdown3_module
from ddmrl.tasks.arithmetic import evaluate_arithmetic
from ddmrl.tasks.countdown3 import Countdown3, Node, render

SPECIAL = re.compile("|".join(re.escape(t) for t in Countdown3.special_tokens))
PROMPT = re.compile(r"<countdown>(\d+),(\d+),(\d+)->(\d+)")
ANSWER = re.compile(r"<answer>([\d+\-*/()]+)</answer>")


def n_tokens(text: str) -> int:
    """Length under the character-level tokenizer, a special token counting as one."""
    return len(SPECIAL.sub("#", text))


def exact_value(expression: str) -> Fraction:
    """Exact value of a generated expression (integers, + - * /, parentheses); every division must be exact."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return Fraction(node.value)
        assert isinstance(node, ast.BinOp) and type(node.op) in ops, ast.dump(node)
        value = ops[type(node.op)](walk(node.left), walk(node.right))
        assert not isinstance(node.op, ast.Div) or value.denominator == 1, f"inexact division in {expression}"
        return value

    return walk(ast.parse(expression, mode="eval").body)


@pytest.fixture(scope="module")
def task():
    return Countdown3()


@pytest.fixture(scope="module")
def examples(task):
    return task.generate(500, seed=0)


def test_budgets_default(task):
    assert task.prompt_length == 14  # <countdown> + "20,20,20" + "->" + "100"
    assert task.completion_length == 13  # <answer> + "(20+20)*20" + </answer> + end token


def test_generated_examples_are_valid(task, examples):
    assert len(examples) == 500 == len({e.id for e in examples})
    for ex in examples:
        m = PROMPT.fullmatch(ex.prompt)
        assert m, ex.prompt
        numbers, target = [int(g) for g in m.groups()[:3]], int(m.group(4))
        assert ex.gold == {"numbers": numbers, "target": target}
        assert ex.id == f"{numbers[0]},{numbers[1]},{numbers[2]}->{target}"
        assert all(1 <= n <= task.max_number for n in numbers) and 1 <= target <= task.max_target
        a = ANSWER.fullmatch(ex.answer)
        assert a, ex.answer
        expr = a.group(1)
        assert sorted(int(n) for n in re.findall(r"\d+", expr)) == sorted(numbers)
        assert exact_value(expr) == target
        assert n_tokens(ex.prompt) <= task.prompt_length
        assert n_tokens(ex.answer) < task.completion_length  # room for the end token
        assert set(SPECIAL.sub("", ex.prompt + ex.answer)) <= set(task.alphabet)


def test_generator_covers_all_operators_and_parentheses(examples):
    answers = "".join(e.answer for e in examples)
    assert all(op in answers for op in "+-*/()")
    assert len({e.gold["target"] for e in examples}) > 50


def test_token_budgets_hold_for_other_sizes():
    task = Countdown3(max_number=100, max_target=1000)
    assert task.prompt_length == 1 + 9 + 2 + 2 + 4 and task.completion_length == 1 + 13 + 1 + 1
    for ex in task.generate(200, seed=3):
        assert n_tokens(ex.prompt) <= task.prompt_length
        assert n_tokens(ex.answer) < task.completion_length
        assert 1 <= ex.gold["target"] <= 1000


def test_generate_deterministic_and_disjoint(task, examples):
    assert task.generate(500, seed=0) == examples
    test_ids = {e.id for e in examples}
    train = task.generate(500, seed=1, exclude=test_ids)
    assert len(train) == 500 and not test_ids & {e.id for e in train}


def test_reference_answer_scores_full_marks(task, examples):
    for ex in examples:
        assert task.reward(ex.answer, ex) == 1.0
        assert task.score(ex.answer, ex) == {"correct": True}


def test_scrambled_answer_fails(task, examples):
    for ex in examples:
        expr = ANSWER.fullmatch(ex.answer).group(1)
        first_op = next(i for i, c in enumerate(expr) if c in "+-*/")
        for op in "+-*/":  # another operator in the first operator's place, with a different value
            scrambled = expr[:first_op] + op + expr[first_op + 1 :]
            try:
                if abs(evaluate_arithmetic(scrambled) - ex.gold["target"]) > 1e-3:
                    break
            except ValueError:
                continue
        else:
            pytest.fail(f"no scramble for {expr}")
        completion = f"<answer>{scrambled}</answer>"
        assert task.reward(completion, ex) == 0.1
        assert task.score(completion, ex)["correct"] is False
        # reusing a number: the value may even be right, but the multiset is wrong
        reused = f"<answer>{expr}+{ex.gold['numbers'][0]}-{ex.gold['numbers'][0]}</answer>"
        assert task.reward(reused, ex) == 0.1
        assert task.score(reused, ex)["correct"] is False
        assert task.reward(expr, ex) == 0.0  # no answer block
        assert task.score(expr, ex)["correct"] is True  # eval's whole-text fallback


def test_accuracy(task):
    assert task.accuracy([{"correct": True}, {"correct": False}, {"correct": False}, {"correct": True}]) == 50.0


@pytest.mark.parametrize(
    ("tree", "text"),
    [
        (Node("-", Node("*", 3, 9), 7), "3*9-7"),
        (Node("*", Node("+", 2, 3), 4), "(2+3)*4"),
        (Node("*", 4, Node("+", 2, 3)), "4*(2+3)"),
        (Node("-", 9, Node("-", 5, 2)), "9-(5-2)"),
        (Node("-", 9, Node("+", 5, 2)), "9-(5+2)"),
        (Node("+", 9, Node("-", 5, 2)), "9+5-2"),
        (Node("-", Node("-", 9, 5), 2), "9-5-2"),
        (Node("/", 12, Node("*", 2, 3)), "12/(2*3)"),
        (Node("/", 12, Node("/", 6, 3)), "12/(6/3)"),
        (Node("*", 12, Node("/", 6, 3)), "12*6/3"),
        (Node("/", Node("*", 12, 6), 3), "12*6/3"),
        (Node("+", 1, Node("*", 2, 3)), "1+2*3"),
        (Node("/", Node("-", 9, 3), 2), "(9-3)/2"),
    ],
)
def test_render_minimal_parentheses(tree, text):
    assert render(tree) == text


def test_docstring_examples():
    for module in (countdown3_module, ddmrl.tasks):
        assert doctest.testmod(module).failed == 0
