"""MBPP: prompt, code extraction and pass@1 in the sandbox (Austin et al. 2021).

d1's public code has no MBPP evaluation, so the protocol is pinned here, following MaskGRPO's
``eval/test_code_reward.py`` where it has one and our own choices elsewhere:

* prompt: one user turn, ``"You are an expert Python programmer, and here is your task: " + prompt +
  " Your code should pass these tests:\\n\\n" + "\\n".join(test_list)`` (MaskGRPO), zero-shot;
* code: the first ```` ```python\\n...``` ```` block (MaskGRPO); our additions when there is none: the first
  fenced block of any language, else the whole completion;
* program: the test imports (sanitized MBPP) or setup code (full MBPP), the code, then every assert, run once as
  ``__main__`` in a fresh sandboxed interpreter (:func:`ddmrl.sandbox.run_python`);
* pass@1 = 1 only if the program runs to its end (all asserts hold), one greedy sample per task.
  :func:`assert_fraction` gives the secondary metric, the share of asserts that hold when each runs alone.

Splits are fixed by ``task_id`` (the sanitized subset inherits them): 1-10 prompt, 11-510 test, 511-600
validation, 601-974 train.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ddmrl.sandbox import SandboxLimits, SandboxResult, run_python

__all__ = [
    "MBPP_SPLITS",
    "MbppTests",
    "extract_code",
    "mbpp_prompt",
    "mbpp_split_of",
    "pass_at_1",
    "program",
    "assert_fraction",
]

#: task_id ranges (inclusive) of the official MBPP splits
MBPP_SPLITS: dict[str, tuple[int, int]] = {
    "prompt": (1, 10),
    "test": (11, 510),
    "validation": (511, 600),
    "train": (601, 974),
}
_PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
_ANY_BLOCK = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class MbppTests:
    """What a solution is run against: asserts, plus imports (sanitized) or setup code (full MBPP)."""

    test_list: tuple[str, ...]
    test_imports: tuple[str, ...] = ()
    test_setup_code: str = ""

    @classmethod
    def from_record(cls, record: dict) -> MbppTests:
        """From an MBPP row or a ground-truth object with ``test_list`` (and optionally ``test_imports`` /
        ``test_setup_code``); raises ``ValueError`` naming the bad key."""
        tests = record.get("test_list")
        if not isinstance(tests, list | tuple) or not tests or not all(isinstance(t, str) for t in tests):
            raise ValueError("'test_list' must be a non-empty list of assert strings")
        imports = record.get("test_imports") or ()
        if not isinstance(imports, list | tuple) or not all(isinstance(t, str) for t in imports):
            raise ValueError("'test_imports' must be a list of strings")
        setup = record.get("test_setup_code") or ""
        if not isinstance(setup, str):
            raise ValueError("'test_setup_code' must be a string")
        return cls(tuple(tests), tuple(imports), setup)

    def to_record(self) -> dict:
        return {
            "test_list": list(self.test_list),
            "test_imports": list(self.test_imports),
            "test_setup_code": self.test_setup_code,
        }


def mbpp_split_of(task_id: int) -> str:
    """The official split a task id belongs to.

    >>> mbpp_split_of(2), mbpp_split_of(11), mbpp_split_of(510), mbpp_split_of(974)
    ('prompt', 'test', 'test', 'train')
    """
    for name, (lo, hi) in MBPP_SPLITS.items():
        if lo <= task_id <= hi:
            return name
    raise ValueError(f"MBPP task_id {task_id} is outside 1-974")


def mbpp_prompt(description: str, test_list: Sequence[str]) -> str:
    """MaskGRPO's MBPP user message.

    >>> mbpp_prompt("Add two numbers.", ["assert add(1, 2) == 3"])
    'You are an expert Python programmer, and here is your task: Add two numbers. Your code should pass these \
tests:\\n\\nassert add(1, 2) == 3'
    """
    return (
        "You are an expert Python programmer, and here is your task: "
        + description
        + " Your code should pass these tests:\n\n"
        + "\n".join(test_list)
    )


def extract_code(completion: str) -> str:
    """The code to test: the first ```` ```python ```` block, else the first fenced block, else everything.

    >>> extract_code("Here:\\n```python\\ndef f():\\n    return 1\\n```\\n```python\\nx = 2\\n```")
    'def f():\\n    return 1\\n'
    >>> extract_code("```\\ny = 3\\n```"), extract_code("z = 4")
    ('y = 3\\n', 'z = 4')
    """
    for pattern in (_PYTHON_BLOCK, _ANY_BLOCK):
        match = pattern.search(completion)
        if match:
            return match.group(1)
    return completion


def program(code: str, tests: MbppTests, asserts: Sequence[str] | None = None) -> str:
    """The program run in the sandbox: imports, setup code, the solution, then the asserts (all by default).

    >>> print(program("def f():\\n    return 1", MbppTests(("assert f() == 1",), ("import math",))))
    import math
    <BLANKLINE>
    def f():
        return 1
    assert f() == 1
    """
    parts = ["\n".join(tests.test_imports), tests.test_setup_code, code]
    parts += list(tests.test_list if asserts is None else asserts)
    return "\n".join(parts)


def pass_at_1(completion: str, tests: MbppTests, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run the extracted code with every assert in one sandboxed process; ``.passed`` is pass@1 of this sample."""
    return run_python(program(extract_code(completion), tests), limits)


def assert_fraction(completion: str, tests: MbppTests, limits: SandboxLimits | None = None) -> float:
    """Share of asserts that hold when each runs alone with the code (one sandboxed process per assert)."""
    code = extract_code(completion)
    results = [run_python(program(code, tests, [a]), limits).passed for a in tests.test_list]
    return sum(results) / len(results)
