"""Clip-higher (``epsilon_high``; DAPO, IGPO) in the token objective, by hand on a few ratios and advantages."""

from __future__ import annotations

import math

import pytest
import torch

from ddmrl.objectives.policy_loss import clipped_token_loss

RATIOS = [0.5, 0.9, 1.1, 1.25, 1.4]


def by_hand(rho: float, a: float, low: float, high: float) -> float:
    """-min(rho A, clip(rho, 1 - low, 1 + high) A)."""
    return -min(rho * a, min(max(rho, 1 - low), 1 + high) * a)


@pytest.mark.parametrize("a", [1.0, -2.0])
def test_asymmetric_clip_matches_the_formula(a):
    """epsilon 0.2, epsilon_high 0.28: a positive advantage is clipped at 1.28 (not 1.2), a negative at 0.8."""
    logps = torch.log(torch.tensor([RATIOS]))  # old = 0: rho = exp(logp)
    out = clipped_token_loss(logps, torch.zeros(1, 5), None, torch.tensor([a]), 0.2, 0.0, epsilon_high=0.28)
    want = [by_hand(r, a, 0.2, 0.28) for r in RATIOS]
    assert out.loss[0].tolist() == pytest.approx(want, rel=1e-6)
    if a > 0:  # rho = 1.25 lies between 1.2 and 1.28: unclipped with clip-higher, clipped without
        assert want[3] == pytest.approx(-1.25) and out.clipped[0].tolist() == [0, 0, 0, 0, 1]
        assert out.loss[0, 4].item() == pytest.approx(-1.28)
    else:
        assert out.clipped[0].tolist() == [1, 0, 0, 0, 0]
        assert out.loss[0, 0].item() == pytest.approx(-0.8 * a)


def test_zero_epsilon_high_is_the_symmetric_clip():
    logps = torch.log(torch.tensor([RATIOS]))
    sym = clipped_token_loss(logps, torch.zeros(1, 5), None, torch.tensor([1.0]), 0.2, 0.0)
    assert sym.loss[0].tolist() == pytest.approx([by_hand(r, 1.0, 0.2, 0.2) for r in RATIOS])
    assert math.isclose(sym.loss[0, 3].item(), -1.2, rel_tol=1e-6)
