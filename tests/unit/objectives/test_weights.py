"""Token weights omega and normalisers Z (ddmrl.objectives.weights) against RebRL's Eq. 10-11.

The checks (a)-(c) below need no model: masks are built by hand or by the view builder on [N, L] tensors.
Notation: delta_j(k) = 1[k masked and valid in view j], t_j = realised ratio |M_j| / L_i, F(k) = sum_j delta_j(k),
credit C(k) = sum_j omega_j(k).
"""

from __future__ import annotations

import pytest
import torch

from ddmrl.masking.views import Views, build_views
from ddmrl.objectives.policy_loss import aggregate
from ddmrl.objectives.weights import realised_ratio, token_weights

MODES = ("none", "t1", "t2", "token", "token_t2")


def hand_views(masks: torch.Tensor) -> Views:
    mu, n, _ = masks.shape
    return Views(masks.bool(), torch.zeros(mu, n, 0, dtype=torch.bool), torch.ones(mu, n), 0)


def nested_linear(mu: int, c: int, perm: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Nested masks on L = mu * c valid positions whose realised ratio is exactly j / mu.

    u_p = (p + 1/2) / L; p is masked at t_j = j / mu iff u_p < j / mu iff p < c j. View j masks c j positions, and
    position p is first masked (revealed, in the reverse picture) at j_p = floor(p / c) + 1.
    Returns masks [mu, L] and j_p [L] (optionally with positions permuted by ``perm``).
    """
    length = mu * c
    p = torch.arange(length)
    masks = torch.stack([p < c * j for j in range(1, mu + 1)])  # [mu, L]
    first = p // c + 1
    if perm is not None:
        masks, first = masks[:, perm], first[perm]
    return masks, first


def nested_batch(mu: int = 4, c: int = 2):
    """Three rollouts: two fully valid (one permuted), one with half its positions after EOS (masked there too:
    post-EOS positions must get weight 0)."""
    length = mu * c
    m0, f0 = nested_linear(mu, c)
    perm = (
        torch.tensor([5, 2, 7, 0, 3, 6, 1, 4][:length])
        if length == 8
        else torch.randperm(length, generator=torch.Generator().manual_seed(0))
    )
    m1, f1 = nested_linear(mu, c, perm)
    half = length // 2
    m2h, f2h = nested_linear(mu, half // mu) if half % mu == 0 else (None, None)
    m2 = torch.cat([m2h, torch.ones(mu, length - half, dtype=torch.bool)], 1)
    f2 = torch.cat([f2h, torch.zeros(length - half, dtype=torch.long)])
    masks = torch.stack([m0, m1, m2], 1)  # [mu, 3, L]
    valid = torch.ones(3, length, dtype=torch.bool)
    valid[2, half:] = False
    return hand_views(masks), valid, torch.stack([f0, f1, f2])


def credit(w: torch.Tensor) -> torch.Tensor:
    return w.sum(0)  # [N, L]


def test_hand_nested_masks_have_realised_ratio_j_over_mu():
    views, valid, _ = nested_batch(mu=4, c=4)
    t = realised_ratio(views, valid)
    assert torch.equal(t, torch.tensor([[0.25, 0.25, 0.25], [0.5, 0.5, 0.5], [0.75, 0.75, 0.75], [1.0, 1.0, 1.0]]))


@pytest.mark.parametrize(("mu", "c"), [(4, 2), (4, 4), (8, 2)])
def test_a3_a_none_mode_credit_is_harmonic_eq10(mu, c):
    """(a): nested masks, t_j = j/mu realised exactly, mode none (lambda = 1, no 1/F):
    C(k) = sum_{j >= j_k} 1/t_j = mu sum_{j' >= j_k} 1/j' (RebRL Eq. 10); post-EOS tokens get 0."""
    views, valid, first = nested_batch(mu, c)
    w, z = token_weights("rebrl", views, valid, "none")
    harmonic = {j: mu * sum(1 / jj for jj in range(j, mu + 1)) for j in range(1, mu + 1)}
    want = torch.tensor([[harmonic[j] if j else 0.0 for j in row] for row in first.tolist()])
    assert torch.allclose(credit(w), want, rtol=1e-6, atol=1e-6)
    assert bool((w[:, ~valid] == 0).all())
    # later-revealed tokens (small j_k) collect more credit: the imbalance RebRL fixes
    assert harmonic[1] > harmonic[2] > harmonic[mu] == pytest.approx(1.0)


def test_a3_table_t1_t2_token_token_t2_credits_under_nested_masks():
    """Eq. 10-11, nested masks, t = j/mu: t1 gives mu - j_k + 1; t2 gives sum_{j >= j_k} j/mu; token gives 1;
    token_t2 gives the mean of t_j over the F = mu - j_k + 1 views masking k."""
    mu, c = 4, 2
    views, valid, first = nested_batch(mu, c)
    fk = first.float()
    on = valid.float()
    tables = {
        "t1": (mu - fk + 1) * on,
        "t2": torch.tensor(
            [[sum(j / mu for j in range(jk, mu + 1)) if jk else 0.0 for jk in r] for r in first.tolist()]
        ),
        "token": on,
        "token_t2": torch.tensor(
            [
                [sum(j / mu for j in range(jk, mu + 1)) / (mu - jk + 1) if jk else 0.0 for jk in r]
                for r in first.tolist()
            ]
        ),
    }
    for mode, want in tables.items():
        w, _ = token_weights("rebrl", views, valid, mode)
        assert torch.allclose(credit(w), want, atol=1e-6), mode


@pytest.mark.parametrize("mode", MODES)
def test_z_is_the_mu_average_of_per_view_weight_sums(mode):
    """Z_i = (1/mu) sum_j sum_k omega_ij(k)."""
    views, valid, _ = nested_batch(4, 2)
    w, z = token_weights("rebrl", views, valid, mode)
    assert z.shape == (3,)
    assert torch.allclose(z, w.sum((0, 2)) / 4)
    assert bool((z > 0).all())


def rollouts_for(coupling: str, remasking: str, seed: int):
    """Real views of 6 rollouts of L = 10 with valid lengths 1..10, mu = 4."""
    n, length, mu = 6, 10, 4
    lengths = torch.tensor([1, 2, 4, 7, 9, 10])
    valid = torch.arange(length)[None] < lengths[:, None]
    reveal = torch.stack([torch.randperm(length, generator=torch.Generator().manual_seed(i)) for i in range(n)])
    kw = {"gamma": 0.5} if remasking == "maskgrpo_fading" else {}
    v = build_views(
        remasking,
        mu=mu,
        seed=seed,
        completion_mask=valid,
        prompt_ids=torch.full((n, 2), 5),
        pad_id=1,
        reveal_step=reveal,
        coupling=coupling,
        **kw,
    )
    return v, valid


@pytest.mark.parametrize(
    ("coupling", "remasking"),
    [
        ("independent", "rebrl_linear"),
        ("nested", "rebrl_linear"),
        ("trajectory", "rebrl_linear"),
        ("independent", "unigrpo"),
        ("trajectory", "unigrpo"),
        ("nested", "maskgrpo_fading"),
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a3_b_token_mode_gives_every_token_credit_one(coupling, remasking, seed):
    """(b): lambda = t and 1/F: C(k) = (1/F(k)) sum_{j: delta_j(k)} t_j / t_j = 1 for every valid k with
    F(k) > 0, whatever the coupling; 0 for tokens never masked and for post-EOS tokens."""
    views, valid = rollouts_for(coupling, remasking, seed)
    w, _ = token_weights("rebrl", views, valid, "token")
    f = (views.masks & valid[None]).sum(0)
    c = credit(w)
    assert torch.allclose(c[f > 0], torch.ones(int((f > 0).sum())), atol=1e-6)
    assert bool((c[f == 0] == 0).all())
    assert bool((w[:, ~valid] == 0).all())
    assert bool((f[valid] > 0).any())


@pytest.mark.parametrize("coupling", ["independent", "nested", "trajectory"])
def test_token_t2_credit_is_mean_ratio_over_masking_views(coupling):
    """token_t2: C(k) = (1/F(k)) sum_{j: delta_j(k)} t_j, each t_j the realised ratio."""
    views, valid = rollouts_for(coupling, "rebrl_linear", 0)
    w, _ = token_weights("rebrl", views, valid, "token_t2")
    delta = (views.masks & valid[None]).float()
    t = realised_ratio(views, valid)  # [mu, N]
    f = delta.sum(0)
    want = torch.where(f > 0, (delta * t[..., None]).sum(0) / f.clamp_min(1), 0.0)
    assert torch.allclose(credit(w), want, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_a3_c_full_completion_views_reduce_every_mode_to_a_constant(mode):
    """(c): d1's views mask the whole completion: F = mu on every valid token and t_j = 1, so every mode's
    weight is one constant (1, or 1/mu with the token factor) on valid tokens, 0 elsewhere."""
    mu = 3
    valid = torch.tensor([[True, True, True, False], [True, False, False, False]])
    v = build_views(
        "full_completion", mu=mu, seed=0, completion_mask=valid, prompt_ids=torch.full((2, 3), 5), pad_id=1
    )
    assert bool(((v.masks & valid[None]).sum(0)[valid] == mu).all())
    w, z = token_weights("rebrl", v, valid, mode)
    const = 1 / mu if mode in ("token", "token_t2") else 1.0
    assert torch.allclose(w, const * valid[None].float().expand(mu, 2, 4))
    assert torch.allclose(z, const * valid.sum(1).float())


def test_none_mode_with_z_is_unigrpo_mean_over_masked_tokens():
    """Mode none: omega_j(k) = delta_j(k) L_i / |M_ij|, so sum_k omega_j(k) = L_i in every view and Z_i = L_i.
    Hence aggregate(x, omega_j, z) = mean_i (1/Z_i) sum_k omega_j(k) x_ik = mean_i mean_{k in M_ij} x_ik:
    UniGRPO's per-sequence mean over masked tokens.

    Hand example, view j = 0: row 0 (L_0 = 4) masks {0, 2}: mean(1, 3) = 2; row 1 (L_1 = 2, positions 2-3 after
    EOS) masks {1} (position 3 masked but invalid): mean(20) = 20; batch value (2 + 20) / 2 = 11.
    """
    masks = torch.tensor(
        [[[1, 0, 1, 0], [0, 1, 0, 1]], [[1, 1, 1, 1], [1, 1, 0, 0]]], dtype=torch.bool
    )  # [mu = 2, N = 2, L = 4]
    valid = torch.tensor([[True, True, True, True], [True, True, False, False]])
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]])
    w, z = token_weights("rebrl", hand_views(masks), valid, "none")
    assert torch.allclose(z, torch.tensor([4.0, 2.0]))
    assert aggregate(x, w[0], z=z).item() == pytest.approx(11.0)
    assert aggregate(x, w[1], z=z).item() == pytest.approx((2.5 + 15.0) / 2)
    # and it equals masked_mean weighting aggregated per sequence
    mm, none_z = token_weights("masked_mean", hand_views(masks), valid)
    assert none_z is None
    for j in range(2):
        assert aggregate(x, w[j], z=z).item() == pytest.approx(aggregate(x, mm[j], "seq_mean").item())


def test_masked_mean_and_completion_mean_weights():
    masks = torch.tensor([[[1, 0, 1]], [[0, 1, 1]]], dtype=torch.bool)
    valid = torch.tensor([[True, True, False]])
    mm, z = token_weights("masked_mean", hand_views(masks), valid)
    assert z is None and mm.tolist() == [[[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]]]
    cm, z = token_weights("completion_mean", hand_views(masks), valid)
    assert z is None and cm.tolist() == [[[1.0, 1.0, 0.0]], [[1.0, 1.0, 0.0]]]


@pytest.mark.parametrize("weighting", ["completion_mean", "masked_mean", "rebrl"])
def test_tokens_after_the_first_eos_get_zero_weight(weighting):
    views, valid = rollouts_for("independent", "rebrl_linear", 3)
    w, _ = token_weights(weighting, views, valid)
    assert bool((w[:, ~valid] == 0).all())
    assert bool((w[:, valid] >= 0).all())


def test_unknown_weighting_or_mode_is_refused():
    views, valid, _ = nested_batch()
    with pytest.raises(ValueError, match="unknown weighting"):
        token_weights("bogus", views, valid)
    with pytest.raises(ValueError, match="unknown rebrl_mode"):
        token_weights("rebrl", views, valid, "t3")
