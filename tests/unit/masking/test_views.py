"""Training views (ddmrl.masking.views): schedules, couplings, seeding and the forward-process statistics.

References: RebRL Eq. 10 (couplings, t_j = j / mu), MaskGRPO's ``grpo/mask_grpo_trainer.py`` (truncated ratios,
AR-like fading), MMaDA Algorithm 1 (UniGRPO ratios).
"""

from __future__ import annotations

import pytest
import torch

from ddmrl.masking.views import (
    MAX_RATIO,
    Views,
    apply_view,
    build_views,
    fading_keep_prob,
    linear_ratios,
    mask_frequency,
    trajectory_masks,
    unigrpo_ratios,
)
from ddmrl.seeding import generator

PAD, MASK = 1, 0


def views(remasking: str, n: int = 4, length: int = 8, mu: int = 4, seed: int = 0, valid=None, **kw) -> Views:
    """Views of ``n`` rollouts with a 3-token prompt (no padding) and ``length`` completion positions."""
    cm = torch.ones(n, length, dtype=torch.bool) if valid is None else valid
    prompt = torch.full((n, 3), 7, dtype=torch.long)
    return build_views(remasking, mu=mu, seed=seed, completion_mask=cm, prompt_ids=prompt, pad_id=PAD, **kw)


# ------------------------------------------------------------------------------------------- full_completion


def test_full_completion_masks_every_completion_position_and_only_real_prompt_tokens():
    """d1: every completion position masked in every view; prompt pads never masked; t = 1."""
    prompt = torch.tensor([[PAD, PAD, 5, 6, 7, 8], [5, 6, 7, 8, 9, 9]])
    cm = torch.tensor([[True, True, False], [True, True, True]])
    v = build_views(
        "full_completion", mu=6, seed=3, completion_mask=cm, prompt_ids=prompt, pad_id=PAD, p_mask_prompt=0.5
    )
    assert v.masks.shape == (6, 2, 3) and bool(v.masks.all())
    assert v.prompt_masks.shape == (6, 2, 6)
    assert not bool(v.prompt_masks[:, 0, :2].any()), "a PAD prompt position was masked"
    assert bool(v.prompt_masks.any()), "p_mask_prompt = 0.5 masked nothing"
    assert torch.equal(v.t, torch.ones(6, 2))


def test_full_completion_prompt_mask_rate_is_p_mask_prompt():
    """Each real prompt token is masked with probability p = 0.15, independently per view.

    200 rows x 20 real tokens x 4 views = 16000 Bernoulli(0.15) draws: SE = sqrt(0.15 * 0.85 / 16000) = 0.0028;
    tolerance 0.015 (> 5 SE). Pads (5 per row) must never be masked.
    """
    prompt = torch.cat([torch.full((200, 5), PAD), torch.full((200, 20), 6)], 1)
    cm = torch.ones(200, 4, dtype=torch.bool)
    v = build_views(
        "full_completion", mu=4, seed=11, completion_mask=cm, prompt_ids=prompt, pad_id=PAD, p_mask_prompt=0.15
    )
    assert not bool(v.prompt_masks[..., :5].any())
    rate = v.prompt_masks[..., 5:].float().mean().item()
    assert abs(rate - 0.15) < 0.015, rate
    for j in range(4):  # each view on its own is also at the rate (a view reusing another's draw would not fail this,
        assert abs(v.prompt_masks[j, :, 5:].float().mean().item() - 0.15) < 0.03  # but the next test catches that)


def test_full_completion_prompt_masks_are_fresh_per_view():
    """View j's prompt mask comes from its own seed: the views differ, and their overlap is that of independent draws
    (P(both masked) = p^2 = 0.09 at p = 0.3; 4000 draws per pair, SE 0.0045, tolerance 0.03)."""
    prompt = torch.full((200, 20), 6)
    cm = torch.ones(200, 2, dtype=torch.bool)
    v = build_views(
        "full_completion", mu=3, seed=0, completion_mask=cm, prompt_ids=prompt, pad_id=PAD, p_mask_prompt=0.3
    )
    pm = v.prompt_masks
    for a in range(3):
        for b in range(a + 1, 3):
            assert not torch.equal(pm[a], pm[b])
            both = (pm[a] & pm[b]).float().mean().item()
            assert abs(both - 0.09) < 0.03, (a, b, both)


# ------------------------------------------------------------------------------------------- ratio schedules


def test_unigrpo_ratios_start_random_end_at_one_evenly_spaced():
    """MMaDA Alg. 1: t_n = r + (1 - r)(n - 1)/(mu - 1): starts at r in (0, 1), ends at exactly 1, constant step."""
    mu, n = 5, 64
    t = unigrpo_ratios(mu, n, generator(0, "start"))
    assert t.shape == (mu, n)
    assert bool(((t[0] > 0) & (t[0] < 1)).all())
    assert bool((t[-1] == 1.0).all()), "the last UniGRPO view must be fully masked (t = 1 exactly)"
    steps = t.diff(dim=0)  # [mu - 1, n]
    assert torch.allclose(steps, ((1 - t[0]) / (mu - 1)).expand_as(steps), atol=1e-6)
    assert t[0].unique().numel() == n, "per-rollout starts should differ"


def test_unigrpo_views_carry_their_ratios_and_differ_per_sample():
    v = views("unigrpo", n=8, mu=3, seed=5)
    assert bool((v.t[-1] == 1.0).all()) and v.t[0].unique().numel() == 8
    assert torch.equal(v.t, views("unigrpo", n=8, mu=3, seed=5).t)
    assert not torch.equal(v.t, views("unigrpo", n=8, mu=3, seed=6).t)
    assert bool(v.masks[-1].all()), "t = 1 masks every position"


@pytest.mark.parametrize("mu", [1, 4, 8])
def test_rebrl_linear_ratios_are_j_over_mu_with_the_last_capped(mu):
    """RebRL: t_j = j / mu, j = 1..mu, the last one capped at 0.999 (MaskGRPO's cap)."""
    t = views("rebrl_linear", n=3, mu=mu).t
    want = torch.tensor([j / mu for j in range(1, mu + 1)])
    want[-1] = MAX_RATIO
    assert torch.allclose(t, want[:, None].expand(mu, 3), atol=1e-7), t[:, 0]
    assert t[-1, 0].item() == pytest.approx(0.999)


@pytest.mark.parametrize(("gamma", "mu"), [(0.6, 4), (0.8, 12), (0.5, 3)])
def test_maskgrpo_ratios_are_truncated_linear(gamma, mu):
    """MaskGRPO: t_j = gamma + (1 - gamma) j / mu, j = 1..mu, capped at 0.999 (MaskGRPO's code: gamma 0.6,
    mu 12 gives 0.633 ... 0.967, 0.999)."""
    t = views("maskgrpo_fading", n=2, mu=mu, gamma=gamma).t
    want = torch.tensor([min(gamma + (1 - gamma) * j / mu, 0.999) for j in range(1, mu + 1)])
    assert torch.allclose(t[:, 0], want, atol=1e-6)
    assert torch.equal(t, linear_ratios(mu, 2, gamma))


def test_maskgrpo_ratios_match_the_published_schedule():
    t = linear_ratios(12, 1, 0.6)[:, 0]
    assert t[0].item() == pytest.approx(0.6 + 0.4 / 12) and t[0].item() == pytest.approx(0.6333, abs=1e-4)
    assert t[-2].item() == pytest.approx(0.9667, abs=1e-4) and t[-1].item() == pytest.approx(0.999)


# ------------------------------------------------------------------------------------------- AR-like fading


@pytest.mark.parametrize("length", [2, 5, 8, 17])
@pytest.mark.parametrize("t", [0.5, 0.6, 0.75, 0.9, 0.999])
def test_fading_expected_kept_fraction_is_one_minus_t(length, t):
    """keep_k = min(1, 2 (1 - t) d_k), d = linspace(1, 0, L). For t >= 0.5, 2 (1 - t) d_k <= 1 (no clamp) and
    mean_k d_k = 1/2 exactly (linspace is symmetric), so mean_k keep_k = 1 - t; we allow 1/L for the grid."""
    keep = fading_keep_prob(torch.tensor([[t]]), length)[0, 0]  # [L]
    d = torch.linspace(1, 0, length)
    assert torch.allclose(keep, 2 * (1 - t) * d)
    assert abs(keep.mean().item() - (1 - t)) <= 1 / length
    assert abs(keep.mean().item() - (1 - t)) < 1e-5  # in fact exact up to float rounding
    assert keep[-1].item() == 0.0, "the last position must always be masked"
    assert bool((keep.diff() <= 0).all()), "keep probability must not increase along the sequence"


def test_fading_saturates_below_half():
    """For t < 0.5 the clamp at 1 bites and the kept fraction falls short of 1 - t (why gamma >= 0.5 is required)."""
    keep = fading_keep_prob(torch.tensor([[0.2]]), 10)[0, 0]
    assert keep.max().item() == 1.0
    assert keep.mean().item() < 0.8 - 0.05


def test_fading_views_mask_fraction_matches_t_statistically():
    """Masked iff u > keep_k, so E[masked fraction] = 1 - mean keep = t_j. 2000 rows x 10 positions per view:
    SE <= 0.5 / sqrt(20000) = 0.0035; tolerance 0.02. The last position is masked in every view."""
    v = views("maskgrpo_fading", n=2000, length=10, mu=4, seed=1, gamma=0.5)
    for j in range(4):
        frac = v.masks[j].float().mean().item()
        assert abs(frac - v.t[j, 0].item()) < 0.02, (j, frac, v.t[j, 0].item())
    assert bool(v.masks[:, :, -1].all())
    # the per-position rate follows the curve: position 0 (d = 1) masked with prob 1 - 2 (1 - t) = 2t - 1
    first = v.masks[0, :, 0].float().mean().item()
    assert abs(first - (2 * v.t[0, 0].item() - 1)) < 0.04


# ------------------------------------------------------------------------------------------- couplings


@pytest.mark.parametrize("remasking", ["rebrl_linear", "unigrpo", "maskgrpo_fading"])
def test_nested_coupling_gives_monotone_masks(remasking):
    """nested: one u per rollout shared by the views; masked at t_j implies masked at every larger t_j'.
    Long completions (L = 64); only rollouts whose first view has >= 2 masked tokens are checked, so that the
    one-token guarantee for empty views never intervened (that case is tested below)."""
    v = views(remasking, n=16, length=64, mu=6, seed=2, coupling="nested")
    assert bool((v.t.diff(dim=0) >= 0).all())
    ok = v.masks[0].sum(-1) >= 2  # [N]
    assert ok.sum() >= 12
    m = v.masks[:, ok]
    assert bool((m[:-1] <= m[1:]).all()), "a token masked at t_j is visible at a larger t"


def test_nested_coupling_stays_monotone_when_a_view_is_empty():
    """Short completions: with L = 3 valid tokens and t_1 = 1/4, view 1 is often empty and gets one forced token.
    Nestedness requires that token to be masked at every larger ratio too; for nested masks, F(k) must
    equal #{j : t_j > u_k} with a well-defined reveal index j_k."""
    violations = 0
    for seed in range(20):
        v = views("rebrl_linear", n=4, length=3, mu=4, seed=seed, coupling="nested")
        violations += int(not bool((v.masks[:-1] <= v.masks[1:]).all()))
    assert violations == 0, f"{violations}/20 seeds gave non-nested masks"


def test_independent_coupling_is_not_nested_and_draws_views_independently():
    """independent: fresh u per view, so P(masked at j and j') = t_j t_j' (not min(t_j, t_j') as when nested).
    rebrl_linear mu = 4: t_1 t_3 = 0.25 * 0.75 = 0.1875 vs 0.25 nested; 4000 positions, SE 0.006, tol 0.03."""
    ind = views("rebrl_linear", n=100, length=40, mu=4, seed=0, coupling="independent")
    nest = views("rebrl_linear", n=100, length=40, mu=4, seed=0, coupling="nested")
    assert not bool((ind.masks[:-1] <= ind.masks[1:]).all())
    p_ind = (ind.masks[0] & ind.masks[2]).float().mean().item()
    p_nest = (nest.masks[0] & nest.masks[2]).float().mean().item()
    assert abs(p_ind - 0.1875) < 0.03, p_ind
    assert abs(p_nest - 0.25) < 0.03, p_nest
    for j, t in enumerate([0.25, 0.5, 0.75]):
        assert abs(ind.masks[j].float().mean().item() - t) < 0.03


def test_trajectory_masks_latest_revealed_positions_by_hand():
    """Reveal steps [3,0,2,1,3,0,1,2]; order from last revealed (ties: later position first):
    4, 0, 7, 2, 6, 3, 5, 1. t_j = j/4 on L = 8 masks round(8 t_j) = 2, 4, 6, 8 positions."""
    reveal = torch.tensor([[3, 0, 2, 1, 3, 0, 1, 2]])
    v = views("rebrl_linear", n=1, length=8, mu=4, coupling="trajectory", reveal_step=reveal)
    order = [4, 0, 7, 2, 6, 3, 5, 1]
    for j, count in enumerate([2, 4, 6, 8]):
        want = torch.zeros(8, dtype=torch.bool)
        want[order[:count]] = True
        assert torch.equal(v.masks[j, 0], want), (j, v.masks[j, 0])


def test_trajectory_masks_count_is_round_t_l_per_sample():
    """unigrpo ratios (random per sample) with trajectory coupling: exactly round(t L) masked per view, and the
    masked set is a prefix of the reverse reveal order (no masked token revealed before a visible one)."""
    n, length = 6, 10
    reveal = torch.stack([torch.randperm(length, generator=generator(i)) // 2 for i in range(n)])
    t = unigrpo_ratios(4, n, generator(1))
    m = trajectory_masks(t, reveal)
    assert torch.equal(m.sum(-1), torch.round(t * length).long())
    for j in range(4):
        for i in range(n):
            if 0 < m[j, i].sum() < length:
                assert reveal[i][m[j, i]].min() >= reveal[i][~m[j, i]].max()
    # tie-break: one position of two revealed at the same last step: the later position goes first
    assert torch.equal(
        trajectory_masks(torch.tensor([[0.25]]), torch.tensor([[3, 0, 1, 3]]))[0, 0],
        torch.tensor([False, False, False, True]),
    )


def test_trajectory_coupling_needs_reveal_step_and_fading_refuses_it():
    with pytest.raises(ValueError, match="reveal_step"):
        views("rebrl_linear", coupling="trajectory")
    with pytest.raises(ValueError, match="maskgrpo_fading"):
        views("maskgrpo_fading", coupling="trajectory", reveal_step=torch.zeros(4, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="unknown remasking"):
        views("bogus")


# ------------------------------------------------------------------------------------------- seeding, apply_view


@pytest.mark.parametrize("remasking", ["full_completion", "unigrpo", "maskgrpo_fading", "rebrl_linear"])
def test_views_are_a_deterministic_function_of_the_seed(remasking):
    a = views(remasking, n=6, length=12, mu=3, seed=42, p_mask_prompt=0.5)
    b = views(remasking, n=6, length=12, mu=3, seed=42, p_mask_prompt=0.5)
    c = views(remasking, n=6, length=12, mu=3, seed=43, p_mask_prompt=0.5)
    assert torch.equal(a.masks, b.masks) and torch.equal(a.prompt_masks, b.prompt_masks) and torch.equal(a.t, b.t)
    assert a.seed == 42
    if remasking == "full_completion":
        assert not torch.equal(a.prompt_masks, c.prompt_masks)
    else:
        assert not torch.equal(a.masks, c.masks)


def test_building_views_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    views("rebrl_linear", n=4, mu=3)
    views("full_completion", n=4, mu=3)
    assert torch.equal(torch.rand(3), expected)


def test_apply_view_puts_mask_ids_exactly_where_the_masks_say():
    prompt = torch.tensor([[PAD, 5, 6], [5, 6, 7]])
    completion = torch.tensor([[6, 7, 8, 3], [9, 8, 7, 6]])
    cm = torch.ones(2, 4, dtype=torch.bool)
    v = build_views(
        "full_completion", mu=2, seed=0, completion_mask=cm, prompt_ids=prompt, pad_id=PAD, p_mask_prompt=0.5
    )
    v = v._replace(masks=torch.tensor([[[1, 0, 1, 0], [0, 0, 0, 1]], [[1, 1, 1, 1], [0, 1, 0, 0]]], dtype=torch.bool))
    for j in range(2):
        x = apply_view(prompt, completion, v, j, MASK)
        masked = torch.cat([v.prompt_masks[j], v.masks[j]], 1)
        clean = torch.cat([prompt, completion], 1)
        assert torch.equal(x == MASK, masked)
        assert torch.equal(x[~masked], clean[~masked])
    assert torch.equal(prompt, torch.tensor([[PAD, 5, 6], [5, 6, 7]])), "apply_view must not modify its inputs"


# ------------------------------------------------------------------------------------------- at least one target


@pytest.mark.parametrize("remasking", ["unigrpo", "rebrl_linear", "maskgrpo_fading"])
@pytest.mark.parametrize("coupling", ["independent", "nested"])
def test_every_view_has_a_masked_valid_token(remasking, coupling):
    """Even with t_1 = 1/50 and 1 or 2 valid tokens (the rest post-EOS), each (view, sample) has a target."""
    valid = torch.zeros(8, 6, dtype=torch.bool)
    valid[:4, 0] = True
    valid[4:, :2] = True
    kw = {"gamma": 0.5} if remasking == "maskgrpo_fading" else {}
    v = views(remasking, n=8, length=6, mu=50, seed=0, valid=valid, coupling=coupling, **kw)
    assert bool((v.masks & valid).any(-1).all())


def test_every_trajectory_view_has_a_masked_valid_token():
    """Trajectory views whose latest-revealed tokens are all post-EOS still get one valid target."""
    valid = torch.tensor([[True, True, False, False, False, False]])
    reveal = torch.tensor([[0, 1, 2, 3, 4, 5]])  # the two valid tokens were revealed first
    v = views("rebrl_linear", n=1, length=6, mu=4, valid=valid, coupling="trajectory", reveal_step=reveal)
    assert bool((v.masks & valid).any(-1).all())


def test_mask_frequency_counts_valid_targets_over_views():
    masks = torch.tensor([[[1, 0, 1]], [[1, 1, 1]], [[0, 0, 1]]], dtype=torch.bool)
    v = Views(masks, torch.zeros(3, 1, 0, dtype=torch.bool), torch.ones(3, 1), 0)
    valid = torch.tensor([[True, True, False]])
    assert mask_frequency(v, valid).tolist() == [[2, 1, 0]]
