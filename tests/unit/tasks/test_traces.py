"""Ground-truth reasoning traces of training examples (``Task.reasoning_trace``, ``Task.trace_tokens``): what IGPO
inpaints. The chain task and the math tasks have them; the others say so."""

from __future__ import annotations

import re
from pathlib import Path

from ddmrl.models.tokenizer import build_tokenizer, encode
from ddmrl.tasks import make_task

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "benchmarks"


def test_chain_trace_is_the_lookup_lines_before_the_answer():
    """The trace sits right after ``<reasoning>\\n`` (2 tokens), holds the lookups (c=b ... a=7) and not the
    ``<answer>`` block; its tokens are the reference completion's own tokens at those positions."""
    task = make_task("chain", hops=3)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    for ex in task.generate(20, seed=0):
        trace = task.reasoning_trace(ex)
        assert trace == "\n".join(ex.gold["reasoning"]) and len(trace.split("\n")) == 3
        assert "<answer>" not in trace and ex.answer.startswith("<reasoning>\n" + trace + "\n</reasoning>")
        offset, ids = task.trace_tokens(tok, ex)
        assert offset == 2 and len(ids) == 11  # three lines of 3 characters and two newlines
        assert encode(tok, ex.answer)[offset : offset + len(ids)] == ids
        assert offset + len(ids) < task.completion_length
    assert task.reasoning_traces


def test_tasks_without_traces_say_so():
    for name in ("sudoku4", "countdown3"):
        task = make_task(name)
        ex = task.generate(1, seed=0)[0]
        assert not task.reasoning_traces and task.reasoning_trace(ex) is None and task.trace_tokens(None, ex) is None


def test_gsm8k_trace_is_the_worked_solution_without_its_final_answer():
    task = make_task("gsm8k", train=str(FIXTURES / "gsm8k_test.jsonl"), eval=str(FIXTURES / "gsm8k_test.jsonl"))
    ex = task.generate(1, seed=0)[0]
    trace = task.reasoning_trace(ex)
    assert task.reasoning_traces and trace and "####" not in trace and "<<" not in trace
    assert "\\boxed" not in trace and "</reasoning>" not in trace
    worked = re.sub(r"<<[^>]*>>", "", ex.gold["solution"].split("####")[0]).strip()
    assert trace == worked  # the solution before its final answer, calculator annotations removed
