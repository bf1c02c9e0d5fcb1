"""Plain arithmetic evaluated safely: an ``ast`` walker over numbers, ``+ - * / // **``, unary signs and parentheses,
never ``eval``. d1's Countdown rules (its training reward, :mod:`ddmrl.tasks.d1_scoring`, and its evaluation parser,
:mod:`ddmrl.tasks.d1_eval`) both evaluate the model's equations with it."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

__all__ = ["evaluate_arithmetic"]

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_MAX_POWER_BITS = 100_000


class _NotArithmetic(Exception):
    """A syntax node outside plain arithmetic (names, calls, attributes, ...)."""


def evaluate_arithmetic(expression: str) -> float:
    """Value of a plain arithmetic expression; raises ``ValueError`` on anything else.

    Accepts what d1's ``eval(expr, {"__builtins__": None}, {})`` accepts after its character check:
    numbers, ``+ - * / // **``, unary signs and parentheses. Powers whose result would exceed about
    100k bits raise instead of hanging.

    >>> evaluate_arithmetic("(9 - 3) / 2 * 4")
    12.0
    >>> evaluate_arithmetic("2**3")
    8
    >>> evaluate_arithmetic("__import__('os')")
    Traceback (most recent call last):
    ...
    ValueError: not plain arithmetic: "__import__('os')"
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError) as err:
        raise ValueError(f"not plain arithmetic: {expression!r}") from err
    try:
        return _evaluate_node(tree.body)
    except _NotArithmetic:
        raise ValueError(f"not plain arithmetic: {expression!r}") from None
    except (ArithmeticError, TypeError, RecursionError) as err:
        raise ValueError(f"cannot evaluate {expression!r}: {err}") from None


def _evaluate_node(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate_node(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate_node(node.left), _evaluate_node(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(left, int) and isinstance(right, int):
            if abs(right) * max(abs(left).bit_length(), 1) > _MAX_POWER_BITS:
                raise OverflowError("power too large")
        return _BINARY[type(node.op)](left, right)
    raise _NotArithmetic(type(node).__name__)
