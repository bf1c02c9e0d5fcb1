"""The tables' intervals: exact point estimates, bootstrap standard errors against the binomial formula, coverage
on simulated data with a known truth, pairing, strata and seeds."""

import itertools
import math

import numpy as np
import pytest

from ddmrl.stats import interval, paired_gain, pass_at_k


def test_estimate_is_the_pooled_ratio_and_the_plain_mean():
    numer = np.array([[3, 0, 8, 5], [1, 2, 8, 5]], dtype=float)  # 2 seeds x 4 items: correct cells
    denom = np.array([8, 8, 8, 8])
    got = interval(numer, denom)
    assert got.estimate == pytest.approx(np.mean([16 / 32, 16 / 32]))
    assert (got.n_items, got.n_seeds) == (4, 2)
    assert interval(np.array([1.0, 0.0, 1.0, 1.0])).estimate == 0.75
    # uneven denominators: the ratio of sums, not the mean of ratios (d1's pooled Sudoku cell accuracy)
    assert interval(np.array([1.0, 4.0]), np.array([1.0, 4.0])).estimate == 1.0
    assert interval(np.array([0.0, 4.0]), np.array([1.0, 4.0])).estimate == 0.8


def test_bootstrap_se_matches_the_binomial_standard_error():
    rng = np.random.default_rng(1)
    x = 100.0 * (rng.random(512) < 0.4)  # [N] percent
    got = interval(x, seed=3)
    p = x.mean() / 100
    assert got.se == pytest.approx(100 * math.sqrt(p * (1 - p) / 512), rel=0.08)
    assert got.low < got.estimate < got.high
    assert got.high - got.low == pytest.approx(2 * 1.96 * got.se, rel=0.1)


def test_coverage_of_the_true_accuracy_is_about_95_percent():
    rng = np.random.default_rng(0)
    hits = 0
    trials = 300
    for t in range(trials):
        x = (rng.random(200) < 0.3).astype(float)
        ci = interval(x, n_boot=800, seed=t)
        hits += ci.low <= 0.3 <= ci.high
    assert 0.91 <= hits / trials <= 0.985


def test_paired_gain_of_a_model_with_itself_is_exactly_zero():
    x = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    g = paired_gain(x, x)
    assert (g.estimate, g.low, g.high) == (0.0, 0.0, 0.0)
    assert not g.excludes_zero()


def test_pairing_narrows_the_interval_of_correlated_scores():
    """Two models that agree on most items: the paired interval is much narrower than the two intervals suggest."""
    rng = np.random.default_rng(2)
    base = (rng.random(400) < 0.5).astype(float)
    better = base.copy()
    flip = np.flatnonzero(base == 0)[:30]
    better[flip] = 1.0  # 30 items fixed, nothing broken: +7.5 points
    g = paired_gain(100 * better, 100 * base)
    assert g.estimate == pytest.approx(7.5)
    assert g.excludes_zero() and g.low > 4
    separate = interval(100 * better).se ** 2 + interval(100 * base).se ** 2
    assert g.se < 0.6 * math.sqrt(separate)


def test_strata_average_their_own_means_and_resample_within_themselves():
    x = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    tags = ["a", "a", "a", "b", "b", "c"]
    got = interval(x, strata=tags)
    assert got.estimate == pytest.approx((1.0 + 0.0 + 1.0) / 3)
    # every stratum is constant: no replicate can differ from the estimate
    assert got.low == got.high == pytest.approx(got.estimate)


def test_seeds_widen_the_interval_by_their_spread():
    rng = np.random.default_rng(4)
    items = (rng.random(300) < 0.5).astype(float)
    same = np.stack([items, items, items])
    assert interval(same, seed=5).se == pytest.approx(interval(items, seed=5).se, rel=0.1)
    spread = np.stack([100 * items - 20, 100 * items, 100 * items + 20])  # seeds disagree by 20 points
    one = interval(100 * items, seed=5)
    got = interval(spread, seed=5)
    assert got.estimate == pytest.approx(one.estimate)
    assert got.se > 2 * one.se  # sd over 3 redrawn seed means (~9.4) on top of the items' (~2.9)


def test_mismatched_items_are_refused():
    with pytest.raises(ValueError, match="same items"):
        paired_gain(np.ones(4), np.ones(5))
    with pytest.raises(ValueError, match="strata"):
        interval(np.ones(4), strata=["a"])
    with pytest.raises(ValueError, match="finite"):
        interval(np.array([1.0, np.nan]))


@pytest.mark.parametrize("n", [1, 2, 5, 7])
def test_pass_at_k_equals_the_share_of_k_subsets_holding_a_correct_sample(n):
    """Chen et al.'s estimator against exact enumeration: for every count of correct samples c and every k, the
    share of the C(n, k) subsets of k samples that hold a correct one."""
    for c in range(n + 1):
        samples = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(samples, k))
            exact = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k)[0] == pytest.approx(exact, abs=1e-12)


def test_pass_at_1_is_the_share_of_correct_samples_and_bad_arguments_are_refused():
    counts = np.array([0, 3, 8])
    assert np.allclose(pass_at_k(8, counts, 1), counts / 8)
    assert np.all(np.diff(np.stack([pass_at_k(8, counts, k) for k in (1, 2, 4, 8)]), axis=0) >= 0), "rises with k"
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(4, counts[:1], 5)
    with pytest.raises(ValueError, match=r"\[0, 4\]"):
        pass_at_k(4, np.array([5]), 1)
