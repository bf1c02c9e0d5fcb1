"""``countdown3``: reach a target with three numbers, each used once, and ``+ - * /`` (d1's Countdown, 3 numbers).

Prompt ``<countdown>3,7,9->20``, reference answer ``<answer>3*9-7</answer>``. Every example is built backwards
from a random expression, so it has at least one solution. Reward and score follow d1
(:mod:`ddmrl.tasks.d1_scoring`): 1.0 / 0.1 / 0 training reward, percent correct for evaluation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from pydantic import Field

from ddmrl.config._base import Int, Section, section
from ddmrl.tasks.base import Example, Task
from ddmrl.tasks.d1_scoring import countdown_correct, countdown_reward

__all__ = ["Countdown3", "Node", "render"]

_OPS = "+-*/"
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


@dataclass(frozen=True)
class Node:
    """A binary expression tree node; leaves are ``int``."""

    op: str
    left: Node | int
    right: Node | int


def _value(tree: Node | int) -> Fraction | None:
    """Exact value, or ``None`` if a division is by zero or leaves a non-integer intermediate result."""
    if isinstance(tree, int):
        return Fraction(tree)
    left, right = _value(tree.left), _value(tree.right)
    if left is None or right is None:
        return None
    if tree.op == "+":
        return left + right
    if tree.op == "-":
        return left - right
    if tree.op == "*":
        return left * right
    if right == 0 or (left / right).denominator != 1:
        return None
    return left / right


def render(tree: Node | int) -> str:
    """The expression with only the parentheses normal precedence needs.

    >>> render(Node("-", Node("*", 3, 9), 7)), render(Node("*", Node("+", 2, 3), 4))
    ('3*9-7', '(2+3)*4')
    >>> render(Node("-", 9, Node("-", 5, 2))), render(Node("+", 9, Node("-", 5, 2)))
    ('9-(5-2)', '9+5-2')
    """
    if isinstance(tree, int):
        return str(tree)
    prec = _PRECEDENCE[tree.op]
    left, right = render(tree.left), render(tree.right)
    if isinstance(tree.left, Node) and _PRECEDENCE[tree.left.op] < prec:
        left = f"({left})"
    if isinstance(tree.right, Node):
        right_prec = _PRECEDENCE[tree.right.op]
        # a-(b-c), a/(b*c) need them; a+(b-c) == a+b-c and a*(b/c) == a*b/c do not
        if right_prec < prec or (right_prec == prec and tree.op in "-/"):
            right = f"({right})"
    return f"{left}{tree.op}{right}"


@section
class Params(Section):
    """Three-number Countdown in d1's format (``ddmrl.tasks.countdown3``)."""

    max_number: Int = Field(20, ge=1, description="The three numbers are drawn from [1, max_number].")
    max_target: Int = Field(100, ge=1, description="Targets are positive integers up to max_target.")


class Countdown3(Task):
    """Three numbers in ``[1, max_number]`` and a positive integer target ``<= max_target``."""

    params = Params  # its section, task_params.<name> (ddmrl.config validates it)

    name = "countdown3"
    special_tokens = ("<countdown>", "<answer>", "</answer>")
    alphabet = "0123456789+-*/(),>"

    def __init__(self, max_number: int = 20, max_target: int = 100) -> None:
        if max_number < 1 or max_target < 1:
            raise ValueError(f"countdown3: max_number and max_target must be >= 1, got {max_number}, {max_target}")
        self.max_number, self.max_target = max_number, max_target
        digits = len(str(max_number))
        # <countdown> a,b,c -> target
        self.prompt_length = 1 + 3 * digits + 2 + 2 + len(str(max_target))
        # <answer> (a op b) op c </answer> + an end token
        self.completion_length = 1 + (3 * digits + 4) + 1 + 1

    def _random_tree(self, rng: random.Random, a: int, b: int, c: int) -> Node:
        op1, op2 = rng.choice(_OPS), rng.choice(_OPS)
        shape = rng.randrange(3)
        if shape == 0:  # a op1 b op2 c, grouped by normal precedence
            shape = 2 if _PRECEDENCE[op2] > _PRECEDENCE[op1] else 1
        if shape == 1:  # (a op1 b) op2 c
            return Node(op2, Node(op1, a, b), c)
        return Node(op1, a, Node(op2, b, c))  # a op1 (b op2 c)

    def sample(self, rng: random.Random) -> Example:
        for _ in range(100_000):
            numbers = [rng.randint(1, self.max_number) for _ in range(3)]
            tree = self._random_tree(rng, *rng.sample(numbers, 3))
            value = _value(tree)
            if value is None or value.denominator != 1 or not 1 <= value <= self.max_target:
                continue
            target = int(value)
            task_id = ",".join(map(str, numbers)) + f"->{target}"
            return Example(
                id=task_id,
                prompt="<countdown>" + task_id,
                answer="<answer>" + render(tree) + "</answer>",
                gold={"numbers": numbers, "target": target},
            )
        raise RuntimeError(f"countdown3: no valid expression found (max_target={self.max_target})")

    def reward(self, completion: str, example: Example) -> float:
        """d1's training reward on the last ``<answer>`` block: 1.0 correct, 0.1 well-formed but wrong, 0."""
        return countdown_reward(completion, example.gold["numbers"], example.gold["target"])

    def score(self, completion: str, example: Example) -> dict[str, Any]:
        """d1's eval verdict, with our ``<answer>`` fallback (see ``d1_scoring.countdown_extract``)."""
        return {"correct": countdown_correct(completion, example.gold["numbers"], example.gold["target"])}
