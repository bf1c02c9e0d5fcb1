"""The method-specific view kinds of ddmrl.masking.views: tracerl, gdpo_quadrature (and gauss_legendre),
block_random and maskgrpo_random, plus the ``Views`` properties ``targets``, ``target_masks``, ``schedule``
and ``steps``.

References: the papers of TraceRL (F = 1, trace steps), GDPO (Gauss-Legendre time grid), SPG (block_random
masks) and MaskGRPO (truncated ratios).
"""

from __future__ import annotations

import math

import pytest
import torch

from ddmrl.masking.views import MAX_RATIO, Views, build_views, gauss_legendre, mask_frequency
from ddmrl.objectives.weights import token_weights

PAD, MASK = 1, 0

# Two rollouts of L = 7. Row 0 reveals one token per sampler step, left to right (steps 0..6); row 1 reveals
# out of order, with repeated steps and a gap (no token at step 3), and its last two positions are after EOS.
REVEAL = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [5, 4, 4, 1, 0, 2, 6]])
VALID = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])


def tracerl(shrink: int, reveal: torch.Tensor = REVEAL, valid: torch.Tensor = VALID) -> Views:
    n = reveal.shape[0]
    return build_views(
        "tracerl",
        mu=3,
        seed=0,
        completion_mask=valid,
        prompt_ids=torch.full((n, 2), 7),
        pad_id=PAD,
        reveal_step=reveal,
        shrink=shrink,
    )


# ------------------------------------------------------------------------------------------------ tracerl


@pytest.mark.parametrize("shrink", [1, 2, 3, 4, 7, 10])
def test_tracerl_view_count_is_ceil_of_steps_over_shrink(shrink):
    """Trace step tau = step // s; steps run 0..6 (max 6), so the trace steps are 0..6 // s and there are
    6 // s + 1 = ceil(7 / s) views, whatever ``mu`` says; they are spread over mu = 3 optimiser steps (equal
    budgets): contiguous chunks using every view once, or (fewer views than steps) one view per step, cycling."""
    v = tracerl(shrink)
    want = math.ceil((int(REVEAL.max()) + 1) / shrink)
    assert v.masks.shape == (want, 2, 7)
    assert v.targets is not None and v.targets.shape == v.masks.shape
    assert v.prompt_masks.shape == (want, 2, 2) and not bool(v.prompt_masks.any())
    assert len(v.steps) == 3
    if want >= 3:
        assert [j for step in v.steps for j in step] == list(range(want))
        assert max(map(len, v.steps)) - min(map(len, v.steps)) <= 1
    else:
        assert v.steps == tuple((s % want,) for s in range(3))


@pytest.mark.parametrize("shrink", [1, 2, 3])
def test_tracerl_view_tau_masks_later_trace_steps_and_targets_its_own(shrink):
    """View tau masks exactly the tokens with step // s >= tau and targets exactly those with step // s == tau
    (checked position by position against a plain Python loop)."""
    v = tracerl(shrink)
    for tau in range(v.masks.shape[0]):
        for i in range(2):
            for k in range(7):
                trace = int(REVEAL[i, k]) // shrink
                assert bool(v.masks[tau, i, k]) == (trace >= tau), (tau, i, k)
                assert bool(v.targets[tau, i, k]) == (trace == tau), (tau, i, k)
    assert torch.equal(v.target_masks, v.targets)
    assert bool((v.targets <= v.masks).all()), "a target is not masked in its own view"
    assert torch.allclose(v.t, v.masks.float().mean(-1))


def test_tracerl_hand_example_shrink_two():
    """shrink = 2, row 1: steps [5, 4, 4, 1, 0, 2, 6] -> trace [2, 2, 2, 0, 0, 1, 3]; 4 views.
    View 1 masks trace >= 1: positions 0, 1, 2, 5, 6; targets trace == 1: position 5 only."""
    v = tracerl(2)
    assert v.masks.shape[0] == 4
    assert v.masks[1, 1].tolist() == [True, True, True, False, False, True, True]
    assert v.targets[1, 1].tolist() == [False, False, False, False, False, True, False]
    assert v.targets[0, 1].tolist() == [False, False, False, True, True, False, False]
    assert v.masks[0, 1].all()  # view 0 masks everything (every trace step is >= 0)


@pytest.mark.parametrize("shrink", [1, 2, 3, 5])
def test_a3_d_tracerl_every_token_is_a_target_exactly_once(shrink):
    """TraceRL views train each token once, so F(k) = 1 for every valid token (and 0 after
    EOS: ``mask_frequency`` only counts valid targets)."""
    v = tracerl(shrink)
    assert torch.equal(v.targets.sum(0), torch.ones(2, 7, dtype=torch.long))
    f = mask_frequency(v, VALID)
    assert torch.equal(f, VALID.long())


def test_tracerl_random_reveal_steps_f_is_one():
    """The same on random reveal steps (16 rows, L = 12, steps in 0..9, shrink 3)."""
    g = torch.Generator().manual_seed(0)
    reveal = torch.randint(0, 10, (16, 12), generator=g)
    valid = torch.ones(16, 12, dtype=torch.bool)
    v = tracerl(3, reveal, valid)
    assert v.masks.shape[0] == int(reveal.max()) // 3 + 1
    assert torch.equal(mask_frequency(v, valid), torch.ones(16, 12, dtype=torch.long))


@pytest.mark.parametrize("shrink", [1, 2, 3])
def test_rebrl_token_weighting_on_tracerl_views_is_masked_mean(shrink):
    """RebRL token mode: omega = delta * lambda(t)/t * 1/F = delta * 1 * 1 (lambda = t, F = 1): exactly the
    masked_mean weights (the valid targets of each view)."""
    v = tracerl(shrink)
    w_rebrl, z = token_weights("rebrl", v, VALID, "token")
    w_mm, _ = token_weights("masked_mean", v, VALID)
    assert torch.allclose(w_rebrl, w_mm, atol=1e-6)
    assert torch.equal(w_mm, (v.targets & VALID[None]).float())
    # Z = (1/K) sum_tau sum_k omega = (number of valid tokens) / K
    assert torch.allclose(z, VALID.sum(1).float() / v.masks.shape[0])


def test_tracerl_needs_reveal_steps():
    with pytest.raises(ValueError, match="reveal_step"):
        build_views("tracerl", mu=2, seed=0, completion_mask=VALID, prompt_ids=torch.full((2, 2), 7), pad_id=PAD)


# -------------------------------------------------------------------------------------- gauss_legendre


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_gauss_legendre_nodes_weights_and_exactness(n):
    """n nodes strictly inside (0, 1), increasing; weights > 0 summing to 1; sum_i q_i t_i^d = int_0^1 t^d dt =
    1 / (d + 1) for every d <= 2n - 1 (Gauss-Legendre exactness), and not for d = 2n: the bound is sharp, the
    error of t^{2n} on [0, 1] being (n!)^4 / ((2n + 1) ((2n)!)^2) (checked where it exceeds float32 noise)."""
    t, q = gauss_legendre(n)
    assert t.shape == (n,) and q.shape == (n,)
    assert bool(((t > 0) & (t < 1)).all())
    assert bool((t[1:] > t[:-1]).all())
    assert bool((q > 0).all())
    assert q.sum().item() == pytest.approx(1.0, abs=1e-6)
    td, qd = t.double(), q.double()
    for d in range(2 * n):
        assert (qd * td**d).sum().item() == pytest.approx(1 / (d + 1), abs=2e-6), d
    if n <= 3:  # 1/12, 1/180, 1/2800
        deficit = 1 / (2 * n + 1) - (qd * td ** (2 * n)).sum().item()
        want = math.factorial(n) ** 4 / ((2 * n + 1) * math.factorial(2 * n) ** 2)
        assert deficit == pytest.approx(want, rel=1e-3)


def test_gauss_legendre_two_point_nodes_by_hand():
    """n = 2: nodes (1 -/+ 1/sqrt 3) / 2, weights 1/2 each."""
    t, q = gauss_legendre(2)
    s = 1 / math.sqrt(3)
    assert t.tolist() == pytest.approx([(1 - s) / 2, (1 + s) / 2], abs=1e-7)
    assert q.tolist() == pytest.approx([0.5, 0.5], abs=1e-7)


# -------------------------------------------------------------------------------------- gdpo_quadrature


def gdpo(n: int, length: int, mu: int, nodes: int, seed: int = 0, valid=None) -> Views:
    cm = torch.ones(n, length, dtype=torch.bool) if valid is None else valid
    return build_views(
        "gdpo_quadrature",
        mu=mu,
        seed=seed,
        completion_mask=cm,
        prompt_ids=torch.full((n, 2), 7),
        pad_id=PAD,
        views_per_step=nodes,
    )


@pytest.mark.parametrize(("mu", "nodes"), [(1, 2), (4, 3), (3, 1)])
def test_gdpo_schedule_repeats_every_node_at_every_step(mu, nodes):
    """GDPO evaluates the whole quadrature at every optimiser step: V = nodes views, schedule = mu copies of
    (0, ..., nodes - 1); t holds the nodes; no prompt masking; targets = the masks."""
    v = gdpo(3, 6, mu, nodes)
    assert v.masks.shape == (nodes, 3, 6)
    assert v.schedule == (tuple(range(nodes)),) * mu
    assert v.steps == v.schedule
    t, _ = gauss_legendre(nodes)
    assert torch.equal(v.t, t[:, None].expand(nodes, 3))
    assert not bool(v.prompt_masks.any()) and v.prompt_masks.shape == (nodes, 3, 2)
    assert v.targets is None and v.target_masks is v.masks


def test_gdpo_masks_are_drawn_at_the_node_ratios():
    """Each position is masked independently with probability t_n at node n: 400 x 25 = 10000 draws per node,
    SE <= sqrt(0.25 / 10000) = 0.005; tolerance 0.025 (5 SE). Nodes (3-point): 0.113, 0.5, 0.887."""
    v = gdpo(400, 25, 2, 3, seed=5)
    t, _ = gauss_legendre(3)
    for j in range(3):
        rate = v.masks[j].float().mean().item()
        assert abs(rate - t[j].item()) < 0.025, (j, rate, t[j].item())
    # the nodes use different uniforms: the overlap of nodes 0 and 2 is ~ t_0 t_2 = 0.1, not min(t_0, t_2) = 0.113
    both = (v.masks[0] & v.masks[2]).float().mean().item()
    assert abs(both - (t[0] * t[2]).item()) < 0.009  # 3 SE (SE 0.003); min(t_0, t_2) is 0.0127 away


def test_gdpo_views_regenerate_from_the_seed_and_may_be_empty():
    """Same seed, same masks; another seed, other masks. GDPO forces no token into an empty view (an empty view
    contributes 0 to an unbiased ELBO): with L = 2 and node t_0 = 0.211, P(empty) = 0.789^2 = 0.62, so among 200
    rows many are empty at node 0."""
    a, b, c = gdpo(200, 2, 2, 2, seed=1), gdpo(200, 2, 2, 2, seed=1), gdpo(200, 2, 2, 2, seed=2)
    assert torch.equal(a.masks, b.masks) and not torch.equal(a.masks, c.masks)
    empty = (~a.masks[0].any(-1)).float().mean().item()
    assert 0.5 < empty < 0.75


# ---------------------------------------------------------------------------------------- block_random


def test_block_random_shape_and_schedule():
    """SPG: mu * views_per_step views; the schedule groups ``views_per_step`` consecutive views per step."""
    cm = torch.ones(5, 12, dtype=torch.bool)
    v = build_views(
        "block_random",
        mu=3,
        seed=0,
        completion_mask=cm,
        prompt_ids=torch.full((5, 4), 7),
        pad_id=PAD,
        views_per_step=2,
        block_length=4,
    )
    assert v.masks.shape == (6, 5, 12)
    assert v.schedule == ((0, 1), (2, 3), (4, 5)) and v.steps == v.schedule
    assert torch.allclose(v.t, v.masks.float().mean(-1))


def test_block_random_masks_follow_the_semi_ar_block_structure():
    """Each mask is: blocks after some b fully masked, block b partially masked with 1..block_length positions,
    blocks before b fully visible. Checked on 40 rows x 8 views (L = 12, block 4: 3 blocks)."""
    cm = torch.ones(40, 12, dtype=torch.bool)
    v = build_views(
        "block_random",
        mu=4,
        seed=3,
        completion_mask=cm,
        prompt_ids=torch.full((40, 4), 7),
        pad_id=PAD,
        views_per_step=2,
        block_length=4,
        p_mask_prompt=0.0,
    )
    seen_b = set()
    for m in v.masks.reshape(-1, 12):
        blocks = m.view(3, 4).sum(1).tolist()  # masked count per block
        b = next(i for i, c in enumerate(blocks) if c > 0)  # first block with any masked token
        seen_b.add(b)
        assert 1 <= blocks[b] <= 4
        assert all(c == 4 for c in blocks[b + 1 :]), blocks
    assert seen_b == {0, 1, 2}
    assert not bool(v.prompt_masks.any())  # p_mask_prompt = 0


def test_block_random_prompt_masks_respect_padding_and_rate():
    """Prompt tokens masked with p = 0.15 (never pads): 300 rows x 10 real tokens x 4 views = 12000 draws,
    SE 0.0033, tolerance 0.02."""
    prompt = torch.cat([torch.full((300, 3), PAD), torch.full((300, 10), 7)], 1)
    v = build_views(
        "block_random",
        mu=2,
        seed=0,
        completion_mask=torch.ones(300, 8, dtype=torch.bool),
        prompt_ids=prompt,
        pad_id=PAD,
        views_per_step=2,
        block_length=4,
        p_mask_prompt=0.15,
    )
    assert not bool(v.prompt_masks[..., :3].any())
    assert abs(v.prompt_masks[..., 3:].float().mean().item() - 0.15) < 0.02


# ------------------------------------------------------------------------------------- maskgrpo_random


def test_maskgrpo_random_uses_truncated_ratios_and_uniform_masks():
    """MaskGRPO image views: t_j = gamma + (1 - gamma) j / mu (capped at 0.999), uniform masks at t_j.
    gamma = 0.5, mu = 4: t = 0.625, 0.75, 0.875, 0.999. 300 x 20 = 6000 draws per view, SE <= 0.0063,
    tolerance 0.03; unlike AR-like fading, the first and second halves of the completion are masked alike."""
    cm = torch.ones(300, 20, dtype=torch.bool)
    v = build_views(
        "maskgrpo_random", mu=4, seed=0, completion_mask=cm, prompt_ids=torch.full((300, 2), 7), pad_id=PAD, gamma=0.5
    )
    want = torch.tensor([0.625, 0.75, 0.875, MAX_RATIO])
    assert torch.allclose(v.t, want[:, None].expand(4, 300))
    for j in range(4):
        rate = v.masks[j].float().mean().item()
        assert abs(rate - want[j].item()) < 0.03, (j, rate)
        first, second = v.masks[j, :, :10].float().mean().item(), v.masks[j, :, 10:].float().mean().item()
        assert abs(first - second) < 0.04, (j, first, second)
    assert v.targets is None and v.schedule is None


# ------------------------------------------------------------------------------------------ Views API


def test_views_steps_and_target_masks_defaults():
    masks = torch.zeros(3, 1, 2, dtype=torch.bool)
    v = Views(masks, torch.zeros(3, 1, 0, dtype=torch.bool), torch.ones(3, 1), 0)
    assert v.steps == ((0,), (1,), (2,)) and v.target_masks is masks
    targets = torch.ones(3, 1, 2, dtype=torch.bool)
    w = v._replace(targets=targets, schedule=((0, 2), (1,)))
    assert w.target_masks is targets and w.steps == ((0, 2), (1,))
