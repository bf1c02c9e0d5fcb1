"""Fast-dLLM's parallel-decoding rules (ddmrl.samplers.parallel), against their definitions by enumeration."""

from __future__ import annotations

import doctest
import itertools

import pytest
import torch

import ddmrl.samplers.parallel as parallel
from ddmrl.samplers.parallel import parallel_commits


def test_doctests():
    assert doctest.testmod(parallel, verbose=False).failed == 0


def factor_by_definition(row: list[float], factor: float) -> set[int]:
    """The largest n such that the n most confident (finite) tokens all satisfy c_(k) >= 1 - factor / (k + 1)."""
    finite = sorted((c, -i) for i, c in enumerate(row) if c != float("-inf"))[::-1]  # ties: lower index first
    best = set()
    for n in range(1, len(finite) + 1):
        if all(finite[k - 1][0] >= 1 - factor / (k + 1) for k in range(1, n + 1)):
            best = {-i for _, i in finite[:n]}
    return best


@pytest.mark.parametrize("factor", [0.5, 1.0, 2.0])
def test_factor_rule_matches_its_definition_on_every_small_case(factor):
    """Every row of confidences from a grid of 6 values (with -inf for unmasked positions), 4 positions."""
    grid = [float("-inf"), 0.2, 0.55, 0.7, 0.8, 0.95]
    rows = [list(r) for r in itertools.product(grid, repeat=4)]
    got = parallel_commits(torch.tensor(rows, dtype=torch.float64), "factor", 0.9, factor)
    for row, commits in zip(rows, got, strict=True):
        assert {i for i in range(4) if commits[i]} == factor_by_definition(row, factor), row


def test_threshold_rule_and_none_and_unknown():
    conf = torch.tensor([[0.9, 0.899, float("-inf"), 1.0]], dtype=torch.float64)
    assert parallel_commits(conf, "threshold", 0.9, 1.0).tolist() == [[True, False, False, True]]
    assert not parallel_commits(conf, "none", 0.9, 1.0).any()
    with pytest.raises(ValueError, match="unknown parallel rule"):
        parallel_commits(conf, "eager", 0.9, 1.0)
