"""IGPO's entropy filter on hint positions (ddmrl.objectives.weights.hint_entropy_filter), by hand."""

from __future__ import annotations

import math

import torch

from ddmrl.objectives.weights import hint_entropy_filter


def entropy_of(probs: list[list[float]]) -> torch.Tensor:
    """H = -sum p log p of each distribution, by hand."""
    return torch.tensor([-sum(p * math.log(p) for p in dist if p > 0) for dist in probs])


def test_only_the_top_tau_hint_positions_by_entropy_keep_their_weight():
    """One view, one row of L = 8: hints at 1, 2, 4, 5, 6 (n = 5); tau = 0.4 keeps int(0.4 * 5) = 2 of them, the two
    of highest entropy (positions 5 and 2, from the distributions below); every other position keeps its weight."""
    probs = [
        [0.25, 0.25, 0.25, 0.25],  # 0 not a hint, highest entropy of all: kept as a normal token
        [0.97, 0.01, 0.01, 0.01],  # 1 hint
        [0.4, 0.3, 0.2, 0.1],  # 2 hint, second highest among hints
        [0.5, 0.5, 0.0, 0.0],  # 3 not a hint
        [0.7, 0.1, 0.1, 0.1],  # 4 hint
        [0.3, 0.3, 0.2, 0.2],  # 5 hint, highest among hints
        [1.0, 0.0, 0.0, 0.0],  # 6 hint, zero entropy
        [0.6, 0.4, 0.0, 0.0],  # 7 not a hint
    ]
    entropy = entropy_of(probs)[None, None]  # [1, 1, 8]
    hints = torch.tensor([[0, 1, 1, 0, 1, 1, 1, 0]], dtype=torch.bool)
    weights = torch.arange(1.0, 9.0)[None, None]  # distinct weights: the kept ones keep their own value
    targets = torch.ones(1, 1, 8, dtype=torch.bool)
    out = hint_entropy_filter(weights, targets, entropy, hints, 0.4)
    assert out.tolist() == [[[1.0, 0.0, 3.0, 4.0, 0.0, 6.0, 0.0, 8.0]]]


def test_at_least_one_hint_per_view_and_only_the_views_targets_count():
    """Two views: view 0 targets every position, view 1 only positions 0-3. Hints at 2, 3, 4, 5; tau 0.2: view 0
    keeps max(1, int(0.8)) = 1 hint (the highest entropy, 4), view 1 ranks only its target hints 2 and 3 and keeps
    one (3); view 1's non-target hints 4 and 5 are not candidates, their weights (0 there) stay."""
    entropy = torch.tensor([[[0.0, 0.0, 0.5, 0.1, 0.9, 0.3]], [[0.0, 0.0, 0.2, 0.7, 0.9, 0.8]]])  # [2, 1, 6]
    hints = torch.tensor([[0, 0, 1, 1, 1, 1]], dtype=torch.bool)
    targets = torch.tensor([[[1, 1, 1, 1, 1, 1]], [[1, 1, 1, 1, 0, 0]]], dtype=torch.bool)
    weights = targets.float()
    out = hint_entropy_filter(weights, targets, entropy, hints, 0.2)
    assert out.tolist() == [[[1.0, 1.0, 0.0, 0.0, 1.0, 0.0]], [[1.0, 1.0, 0.0, 1.0, 0.0, 0.0]]]


def test_rows_without_hints_are_untouched_and_tau_one_keeps_everything():
    g = torch.Generator().manual_seed(0)
    weights, entropy = torch.rand(3, 4, 10, generator=g), torch.rand(3, 4, 10, generator=g)
    targets = torch.rand(3, 4, 10, generator=g) < 0.7
    hints = torch.rand(4, 10, generator=g) < 0.5
    hints[0] = False
    out = hint_entropy_filter(weights, targets, entropy, hints, 0.2)
    assert torch.equal(out[:, 0], weights[:, 0])
    assert torch.equal(out[~(targets & hints[None])], weights[~(targets & hints[None])])  # non-candidates untouched
    kept = ((out != 0) & targets & hints[None]).sum(-1)  # [3, 4]
    n = (targets & hints[None]).sum(-1)
    want = torch.where(n > 0, torch.clamp((n * 0.2).floor(), min=1), 0)
    assert torch.equal(kept, want.long())
    assert torch.equal(hint_entropy_filter(weights, targets, entropy, hints, 1.0), weights)
