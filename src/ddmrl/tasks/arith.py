"""``arith``: short multi-step arithmetic with a reasoning trace, in d1's GSM8K format, scored and rewarded by d1.

Prompt ``<arith>3+4*2-5``; reference answer (d1's ``<reasoning>``/``<answer>`` layout, one trace step per line)::

    <reasoning>
    04*02=08
    03+08=11
    11-05=06
    </reasoning>
    <answer>
    06
    </answer>

The expression has ``num_operands`` numbers in ``[1, max_number]`` joined by operators from ``ops`` (``+ - *``),
evaluated with the usual precedence; the trace applies one operator per line in that order (products first, then
left to right), so every example carries the ground-truth reasoning chunks a method such as IGPO inpaints.
Every intermediate and final value lies in ``[0, max_value]``. Numbers in the trace and the answer are written
zero-padded to the width of ``max_value``, so every completion has the same layout: a masked diffusion model decodes
positions in parallel, and fixed widths spare it guessing where a number ends (measured on the tiny model: with
unpadded numbers the SFT model got 4 % of first trace steps right and 5.5 % of answers).

Reward: d1's GSM8K training reward (:func:`~ddmrl.tasks.d1_scoring.gsm8k_reward`: XML count, soft and strict
format, integer answer, 2.0 for the right answer; at most 4.0). Score: d1's GSM8K evaluation parser
(:func:`~ddmrl.tasks.d1_eval.gsm8k_correct`: the first usable box, else the first ``<answer>`` block's number).

Why it replaces three-number Countdown in the embedded default: Countdown asks for a search (which two numbers to
combine first) with no trace to learn from, and the tiny model stayed at chance (0-2 %) before and after RL in
every row; this task keeps d1's reasoning format and rewards and has a learnable, verifiable chain of steps.
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import Field, model_validator

from ddmrl.config._base import Int, Section, Str, refuse, section
from ddmrl.tasks.base import Example, Task
from ddmrl.tasks.d1_eval import gsm8k_correct, gsm8k_extract
from ddmrl.tasks.d1_scoring import gsm8k_reward

__all__ = ["Arith", "trace_steps"]

OPS = "+-*"
_APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def trace_steps(numbers: list[int], ops: list[str]) -> list[tuple[int, str, int, int]]:
    """The evaluation of ``numbers[0] ops[0] numbers[1] ...`` one operator at a time: every ``*`` from left to
    right, then ``+``/``-`` from left to right. Returns (left, op, right, value) per step.

    >>> trace_steps([3, 4, 2, 5], ["+", "*", "-"])
    [(4, '*', 2, 8), (3, '+', 8, 11), (11, '-', 5, 6)]
    """
    values, pending, steps = list(numbers), list(ops), []
    for level in ("*", "+-"):
        i = 0
        while i < len(pending):
            if pending[i] in level:
                a, op, b = values[i], pending[i], values[i + 1]
                value = _APPLY[op](a, b)
                steps.append((a, op, b, value))
                values[i : i + 2], pending[i : i + 1] = [value], []
            else:
                i += 1
    return steps


@section
class Params(Section):
    """Multi-step arithmetic with a reasoning trace in d1's GSM8K format (``ddmrl.tasks.arith``)."""

    num_operands: Int = Field(3, ge=2, description="Numbers in the expression (num_operands - 1 trace steps).")
    max_number: Int = Field(9, ge=1, description="The numbers are drawn from [1, max_number].")
    ops: Str = Field("+-*", pattern=r"^[+*-]+$", description="Operators to draw from (a subset of + - *).")
    max_value: Int = Field(99, ge=1, description="Every intermediate and final value lies in [0, max_value].")

    @model_validator(mode="after")
    def _check(self) -> Params:
        if self.max_number > self.max_value:
            raise refuse("max_number", self.max_number, f"must be <= max_value = {self.max_value}")
        return self


class Arith(Task):
    """``num_operands`` numbers in ``[1, max_number]``, operators from ``ops``, values kept in ``[0, max_value]``."""

    params = Params  # its section, task_params.<name> (ddmrl.config validates it)

    name = "arith"
    special_tokens = ("<arith>", "<reasoning>", "</reasoning>", "<answer>", "</answer>")
    alphabet = "0123456789+-*=\n"

    def __init__(self, num_operands: int = 3, max_number: int = 9, ops: str = OPS, max_value: int = 99) -> None:
        if num_operands < 2:
            raise ValueError(f"arith: num_operands must be >= 2, got {num_operands}")
        if not 1 <= max_number <= max_value:
            raise ValueError(f"arith: need 1 <= max_number <= max_value, got {max_number}, {max_value}")
        if not ops or set(ops) - set(OPS):
            raise ValueError(f"arith: ops must be a non-empty subset of {OPS!r}, got {ops!r}")
        self.num_operands, self.max_number, self.ops, self.max_value = num_operands, max_number, ops, max_value
        n, d, v = num_operands, len(str(max_number)), len(str(max_value))
        self.prompt_length = 1 + n * d + (n - 1)  # <arith> a op b op c
        # <reasoning>\n, one line per step ("v op v=v\n"), </reasoning>\n<answer>\n v \n</answer>\n, EOS
        self.completion_length = 2 + (n - 1) * (3 * v + 3) + 2 + 2 + v + 1 + 2 + 1

    def sample(self, rng: random.Random) -> Example:
        for _ in range(100_000):
            numbers = [rng.randint(1, self.max_number) for _ in range(self.num_operands)]
            ops = [rng.choice(self.ops) for _ in range(self.num_operands - 1)]
            steps = trace_steps(numbers, ops)
            if all(0 <= value <= self.max_value for *_, value in steps):
                expression = "".join(f"{x}{op}" for x, op in zip(numbers, ops, strict=False)) + str(numbers[-1])
                return self.example(expression, steps)
        raise RuntimeError(f"arith: no expression with values in [0, {self.max_value}] found")

    def example(self, expression: str, steps: list[tuple[int, str, int, int]]) -> Example:
        w = len(str(self.max_value))
        lines = [f"{a:0{w}d}{op}{b:0{w}d}={value:0{w}d}" for a, op, b, value in steps]
        answer = f"{steps[-1][3]:0{w}d}"
        return Example(
            id=expression,
            prompt="<arith>" + expression,
            answer="<reasoning>\n" + "\n".join(lines) + "\n</reasoning>\n<answer>\n" + answer + "\n</answer>\n",
            gold={"expression": expression, "reasoning": lines, "answer": answer},
        )

    def reward(self, completion: str, example: Example) -> float:
        """d1's GSM8K training reward (at most 4.0; 2.0 of it for the right answer)."""
        return gsm8k_reward(completion, example.gold["answer"])

    def score(self, completion: str, example: Example) -> dict[str, Any]:
        """d1's GSM8K evaluation verdict, and the parsed prediction."""
        return {
            "correct": gsm8k_correct(completion, float(example.gold["answer"])),
            "prediction": gsm8k_extract(completion),
        }
