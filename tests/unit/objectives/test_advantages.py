"""Group-relative advantages (GRPO; TRL's scale_rewards): A_i = (r_i - mean_g r) / (std_g r + eps)."""

from __future__ import annotations

import pytest
import torch

from ddmrl.objectives.advantages import group_advantages


def rewards() -> torch.Tensor:
    """Three groups of G = 4: varied, constant, and two-valued."""
    return torch.tensor([0.0, 1.0, 3.0, 4.0, 2.0, 2.0, 2.0, 2.0, 0.0, 0.0, 1.0, 1.0])


def test_group_scaled_advantages_have_zero_mean_and_unit_unbiased_std():
    """Per group, mean(A) = 0 and the Bessel std of A is std / (std + eps) = 1 - eps / (std + eps) ~ 1."""
    adv, zero = group_advantages(rewards(), 4, "group", eps=1e-4)
    a = adv.view(3, 4)
    assert torch.allclose(a.mean(1), torch.zeros(3), atol=1e-6)
    for g in (0, 2):
        assert a[g].std().item() == pytest.approx(1.0, abs=1e-3)
    # hand value for group 0: mean 2, unbiased std sqrt((4 + 1 + 1 + 4) / 3) = sqrt(10 / 3)
    s = (10 / 3) ** 0.5
    assert torch.allclose(a[0], torch.tensor([-2.0, -1.0, 1.0, 2.0]) / (s + 1e-4), atol=1e-6)
    assert zero.tolist() == [False, True, False]


def test_equal_rewards_give_exactly_zero_advantages_and_are_flagged():
    adv, zero = group_advantages(rewards(), 4, "group")
    assert bool((adv.view(3, 4)[1] == 0).all())
    assert bool(zero[1]) and zero.dtype == torch.bool and zero.shape == (3,)


def test_scale_none_is_mean_centring_only():
    """d1's code: A = r - mean_g r."""
    r = rewards()
    adv, zero = group_advantages(r, 4, "none")
    want = (r.view(3, 4) - r.view(3, 4).mean(1, keepdim=True)).flatten()
    assert torch.equal(adv, want)
    assert adv.view(3, 4)[0].tolist() == [-2.0, -1.0, 1.0, 2.0]
    assert zero.tolist() == [False, True, False]


def test_groups_are_consecutive():
    """Rewards [a, a, b, b] with G = 2 form groups {a, a}, {b, b}: all zero; with G = 4 they do not."""
    r = torch.tensor([1.0, 1.0, 5.0, 5.0])
    assert bool((group_advantages(r, 2)[0] == 0).all())
    assert not bool((group_advantages(r, 4)[0] == 0).all())


def test_unknown_scale_rewards_is_refused():
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(rewards(), 4, "batch")
