"""arith: the trace is the expression's evaluation (checked against Python's precedence), values stay in range,
budgets hold every example, and the reward and score are d1's GSM8K rules on the reference and on broken answers."""

import ast
import doctest
import re

import pytest

from ddmrl.models.tokenizer import build_tokenizer, encode
from ddmrl.tasks import arith as arith_module
from ddmrl.tasks import make_task
from ddmrl.tasks.arith import Arith

LINE = re.compile(r"(\d+)([+\-*])(\d+)=(\d+)")


def test_doctests():
    assert doctest.testmod(arith_module).failed == 0


@pytest.mark.parametrize(
    ("params", "n"), [({}, 400), ({"num_operands": 4, "ops": "+-"}, 200), ({"num_operands": 2}, 50)]
)
def test_trace_evaluates_the_expression_step_by_step(params, n):
    task = Arith(**params)
    tok = build_tokenizer([task.alphabet], task.special_tokens)
    examples = task.generate(n, seed=0)
    assert len({e.id for e in examples}) == n
    for ex in examples:
        expression = ex.gold["expression"]
        assert ex.prompt == "<arith>" + expression
        value = eval(compile(ast.parse(expression, mode="eval"), "<expr>", "eval"))  # digits and + - * only
        lines = ex.gold["reasoning"]
        assert len(lines) == task.num_operands - 1
        for line in lines:
            a, op, b, v = LINE.fullmatch(line).groups()
            assert {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op] == int(v)
            assert 0 <= int(v) <= task.max_value
        assert int(ex.gold["answer"]) == value == int(LINE.fullmatch(lines[-1]).group(4))
        width = len(str(task.max_value))
        assert all(len(x) == width for line in lines for x in LINE.fullmatch(line).groups()[::2] + (line[-width:],))
        trace = "\n".join(lines)
        assert ex.answer == f"<reasoning>\n{trace}\n</reasoning>\n<answer>\n{value:0{width}d}\n</answer>\n"
        assert len(encode(tok, ex.prompt)) <= task.prompt_length
        assert len(encode(tok, ex.answer)) == task.completion_length - 1  # one layout, and room for EOS


def test_products_come_first_then_left_to_right():
    steps = arith_module.trace_steps([2, 3, 4, 5], ["-", "*", "+"])
    assert steps == [(3, "*", 4, 12), (2, "-", 12, -10), (-10, "+", 5, -5)]
    assert arith_module.trace_steps([9, 2, 3], ["-", "-"]) == [(9, "-", 2, 7), (7, "-", 3, 4)]


def test_reward_and_score_follow_d1_gsm8k():
    task = make_task("arith")
    ex = task.generate(1, seed=3)[0]
    answer = ex.gold["answer"]
    assert task.reward(ex.answer, ex) == 4.0 and task.score(ex.answer, ex)["correct"]
    wrong = ex.answer.replace(f"<answer>\n{answer}\n", f"<answer>\n{int(answer) + 1:02d}\n")
    assert task.reward(wrong, ex) == 2.0 and not task.score(wrong, ex)["correct"]  # format and integer only
    bare = f"<answer>{int(answer)}</answer>"  # unpadded: d1's parser compares numbers, its reward strings
    assert task.score(bare, ex)["correct"] and task.reward(bare, ex) == (2.5 if answer == str(int(answer)) else 0.5)
    assert task.reward("", ex) == 0.0 and not task.score("", ex)["correct"]


def test_held_out_items_are_never_drawn_for_training():
    task = make_task("arith")
    held = task.held_out(200, seed=1)
    train = task.generate(2000, seed=2, exclude={e.id for e in held})
    assert not {e.id for e in held} & {e.id for e in train}


@pytest.mark.parametrize(
    "params", [{"num_operands": 1}, {"max_number": 0}, {"ops": "/"}, {"max_number": 50, "max_value": 9}]
)
def test_bad_parameters_are_refused(params):
    with pytest.raises(ValueError, match="arith"):
        Arith(**params)
