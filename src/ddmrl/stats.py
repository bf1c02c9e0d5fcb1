"""Confidence intervals for the comparison tables: percentile bootstrap over held-out items, and over seeds.

Every model is evaluated on the same fixed held-out set, so an accuracy is a statistic of per-item scores, and the
gain of a method over the model it starts from is a statistic of both models' scores *on the same items* (a paired
comparison; Efron & Tibshirani 1993, *An Introduction to the Bootstrap*, sections 13.3 and 16.2). A bootstrap
replicate redraws the items with replacement (within each stratum when the metric is a mean of strata, as GenEval's
Overall is a mean of its six tags) and, when a row has several training seeds, redraws the seeds too (a two-stage
bootstrap, Davison & Hinkley 1997, section 3.8), so the interval covers the run-to-run spread as well as the finite
test set. Both sides of a paired gain see the same item draws; their seeds are drawn independently (different runs).

Scores are given as a numerator per (seed, item) and a denominator per item, so pooled ratios such as d1's Sudoku
cell accuracy (correct empty cells / empty cells) are reproduced exactly: the statistic of one seed is
``sum(numer) / sum(denom)`` within each stratum, averaged over strata, then over seeds. With unit denominators this
is the plain mean.

Imports numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

N_BOOT = 4000


@dataclass(frozen=True)
class Interval:
    """A point estimate with its percentile bootstrap interval (all in the scores' units, e.g. percent)."""

    estimate: float
    low: float
    high: float
    se: float  # bootstrap standard error (the replicates' standard deviation)
    n_items: int
    n_seeds: int  # seeds of the row (for a paired gain: of the first side)

    def excludes_zero(self) -> bool:
        """True when the interval lies entirely above or below 0 (a gain "beyond its interval")."""
        return self.low > 0 or self.high < 0

    def fmt(self, digits: int = 1) -> str:
        """``59.3 [56.1, 62.4]``."""
        return f"{self.estimate:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


class _Scores:
    """Per-(seed, item) numerators [S, N] and per-item denominators [S, N] of one model, grouped by stratum."""

    def __init__(self, numer: np.ndarray, denom: np.ndarray | None, strata: list[np.ndarray]) -> None:
        numer = np.atleast_2d(np.asarray(numer, dtype=np.float64))  # [S, N]
        denom = np.ones_like(numer) if denom is None else np.broadcast_to(np.asarray(denom, np.float64), numer.shape)
        if not np.all(np.isfinite(numer)) or not np.all(np.isfinite(denom)):
            raise ValueError("scores must be finite")
        self.numer, self.denom, self.strata = numer, denom, strata

    @property
    def n_seeds(self) -> int:
        return self.numer.shape[0]

    def statistic(self, seeds: np.ndarray, items: list[np.ndarray]) -> np.ndarray:
        """The metric for each replicate: ``seeds`` [R, S] seed indices, ``items`` one [R, n_s] index array per
        stratum -> [R]."""
        per_stratum = []
        for idx in items:
            num = self.numer[seeds[:, :, None], idx[:, None, :]].sum(-1)  # [R, S]
            den = self.denom[seeds[:, :, None], idx[:, None, :]].sum(-1)  # [R, S]
            per_stratum.append(num / np.where(den == 0, 1.0, den))
        return np.mean(per_stratum, axis=0).mean(-1)  # mean over strata, then over seeds -> [R]

    def estimate(self) -> float:
        seeds = np.arange(self.n_seeds)[None]  # [1, S]
        return float(self.statistic(seeds, [s[None] for s in self.strata])[0])

    def draw_seeds(self, rng: np.random.Generator, n_boot: int) -> np.ndarray:
        """[R, S] seed indices: redrawn with replacement when there are several seeds, else the one seed."""
        if self.n_seeds == 1:
            return np.zeros((n_boot, 1), dtype=np.int64)
        return rng.integers(0, self.n_seeds, size=(n_boot, self.n_seeds))


def _strata(n: int, strata: Sequence[object] | None) -> list[np.ndarray]:
    """Item indices of each stratum, in order of first appearance (one stratum of all items by default)."""
    if strata is None:
        return [np.arange(n)]
    if len(strata) != n:
        raise ValueError(f"strata has {len(strata)} labels for {n} items")
    labels = list(dict.fromkeys(strata))
    return [np.array([i for i, s in enumerate(strata) if s == label]) for label in labels]


def _draw_items(rng: np.random.Generator, strata: list[np.ndarray], n_boot: int) -> list[np.ndarray]:
    """Per stratum, [R, n_s] item indices drawn with replacement from that stratum."""
    return [s[rng.integers(0, len(s), size=(n_boot, len(s)))] for s in strata]


def _interval(estimate: float, replicates: np.ndarray, level: float, n_items: int, n_seeds: int) -> Interval:
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return Interval(estimate, float(low), float(high), float(replicates.std(ddof=1)), n_items, n_seeds)


def interval(
    numer: np.ndarray,
    denom: np.ndarray | None = None,
    strata: Sequence[object] | None = None,
    *,
    level: float = 0.95,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> Interval:
    """The metric of one row and its ``level`` percentile interval.

    numer: [S, N] (or [N] for one seed) per-item numerators, e.g. 100 * correct; denom: [N] or [S, N] per-item
    denominators (None: ones, the plain mean); strata: N labels when the metric is a mean over strata (GenEval tags).
    """
    scores = _Scores(numer, denom, _strata(np.atleast_2d(numer).shape[1], strata))
    rng = np.random.default_rng(seed)
    reps = scores.statistic(scores.draw_seeds(rng, n_boot), _draw_items(rng, scores.strata, n_boot))
    return _interval(scores.estimate(), reps, level, scores.numer.shape[1], scores.n_seeds)


def paired_gain(
    numer: np.ndarray,
    base_numer: np.ndarray,
    denom: np.ndarray | None = None,
    strata: Sequence[object] | None = None,
    *,
    level: float = 0.95,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> Interval:
    """The metric of ``numer`` minus that of ``base_numer`` on the same items (each [S, N] or [N]; the seed counts
    may differ), with a paired bootstrap interval: every replicate uses one item draw for both sides."""
    n = np.atleast_2d(numer).shape[1]
    if np.atleast_2d(base_numer).shape[1] != n:
        raise ValueError(f"paired scores need the same items: {n} against {np.atleast_2d(base_numer).shape[1]}")
    strata_idx = _strata(n, strata)
    a, b = _Scores(numer, denom, strata_idx), _Scores(base_numer, denom, strata_idx)
    rng = np.random.default_rng(seed)
    items = _draw_items(rng, strata_idx, n_boot)
    reps = a.statistic(a.draw_seeds(rng, n_boot), items) - b.statistic(b.draw_seeds(rng, n_boot), items)
    return _interval(a.estimate() - b.estimate(), reps, level, n, a.n_seeds)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021, "Evaluating
    Large Language Models Trained on Code", Eq. 1 and its numerically stable form, Figure 3):
    ``1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)``; 1 when fewer than k samples are wrong.

    >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 2), pass_at_k(4, 0, 4), pass_at_k(4, 3, 2)
    (0.25, 0.5, 0.0, 1.0)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n = {n}, c = {c}, k = {k})")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))
