"""chain: the trace follows the query back to its digit through the prompt's assignments (checked by resolving them
independently), budgets hold every example, and reward and score are d1's GSM8K rules."""

import re

import pytest

from ddmrl.models.tokenizer import build_tokenizer, encode
from ddmrl.tasks import make_task
from ddmrl.tasks.chain import Chain


def resolve(assignments: dict[str, str], name: str) -> tuple[list[str], str]:
    """Follow ``name`` through ``assignments`` to a digit: (the lines visited, the digit)."""
    lines = []
    while True:
        value = assignments[name]
        lines.append(f"{name}={value}")
        if value.isdigit():
            return lines, value
        name = value


@pytest.mark.parametrize(("hops", "distractors"), [(3, 3), (1, 0), (4, 4), (2, 6)])
def test_trace_resolves_the_query(hops, distractors):
    task = Chain(hops=hops, distractors=distractors)
    tok = build_tokenizer([task.alphabet], task.special_tokens)
    n = 50 if hops + distractors == 1 else 300  # one assignment: 10 names x 10 digits
    examples = task.generate(n, seed=0)
    assert len({e.id for e in examples}) == n
    for ex in examples:
        m = re.fullmatch(r"<chain>([a-z=0-9,]+)\?([a-z])", ex.prompt)
        statements = m.group(1).split(",")
        assert len(statements) == hops + distractors
        assignments = dict(s.split("=") for s in statements)
        assert len(assignments) == len(statements)  # every name assigned once
        lines, value = resolve(assignments, m.group(2))
        assert lines == ex.gold["reasoning"] and len(lines) == hops and value == ex.gold["answer"]
        trace = "\n".join(lines)
        assert ex.answer == f"<reasoning>\n{trace}\n</reasoning>\n<answer>\n{value}\n</answer>\n"
        assert len(encode(tok, ex.prompt)) == task.prompt_length
        assert len(encode(tok, ex.answer)) == task.completion_length - 1  # room for EOS


def test_reward_and_score_follow_d1_gsm8k():
    task = make_task("chain")
    ex = task.generate(1, seed=3)[0]
    answer = ex.gold["answer"]
    assert task.reward(ex.answer, ex) == 4.0 and task.score(ex.answer, ex)["correct"]
    wrong = ex.answer.replace(f"<answer>\n{answer}\n", f"<answer>\n{(int(answer) + 1) % 10}\n")
    assert task.reward(wrong, ex) == 2.0 and not task.score(wrong, ex)["correct"]
    assert task.score(f"<answer>{answer}</answer>", ex)["correct"]
    assert task.reward("", ex) == 0.0 and not task.score("", ex)["correct"]


def test_held_out_items_are_never_drawn_for_training():
    task = make_task("chain")
    held = task.held_out(512, seed=1)
    train = task.generate(5000, seed=2, exclude={e.id for e in held})
    assert not {e.id for e in held} & {e.id for e in train}


@pytest.mark.parametrize("params", [{"hops": 0}, {"distractors": -1}, {"hops": 8, "distractors": 4}])
def test_bad_parameters_are_refused(params):
    with pytest.raises(ValueError, match="chain"):
        Chain(**params)
