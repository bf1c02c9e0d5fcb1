"""Clipped token loss with k3 KL, and aggregation (ddmrl.objectives.policy_loss).

psi = min(rho A, clip(rho, 1 - eps, 1 + eps) A), rho = exp(logp - logp_old); loss = -(psi - beta k3);
k3 = exp(d) - d - 1 with d = logp_ref - logp (Schulman's estimator of KL(pi || pi_ref)).
"""

from __future__ import annotations

import math

import pytest
import torch

from ddmrl.objectives.policy_loss import aggregate, clipped_token_loss, k3_kl


def test_ratio_is_exactly_one_and_kl_exactly_zero_when_nothing_moved():
    g = torch.Generator().manual_seed(0)
    logps = -torch.rand(3, 5, generator=g) * 4
    adv = torch.tensor([1.5, -0.5, 0.0])
    tl = clipped_token_loss(logps, logps.clone(), logps.clone(), adv, 0.2, 0.04)
    assert torch.equal(tl.ratio, torch.ones(3, 5))
    assert torch.equal(tl.kl, torch.zeros(3, 5))
    assert torch.equal(tl.clipped, torch.zeros(3, 5))
    assert torch.equal(tl.loss, -adv[:, None].expand(3, 5))
    assert bool((k3_kl(logps, logps) == 0).all())


def test_k3_is_nonnegative_and_zero_only_at_equality():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(1000, generator=g) * 3, torch.randn(1000, generator=g) * 3
    kl = k3_kl(a, b)
    assert bool((kl >= 0).all())
    assert bool((kl[a != b] > 0).all())
    # hand value: d = ref - theta = 1: e - 2
    assert k3_kl(torch.tensor([0.0]), torch.tensor([1.0])).item() == pytest.approx(math.e - 2)


def test_k3_is_unbiased_for_kl_statistically():
    """E_{x ~ pi}[k3] = KL(pi || ref). pi = softmax([0, 1, 2]), ref = uniform over 3; 20000 draws;
    KL = sum pi log(3 pi) = 0.2395; k3 here is bounded (< 2), SE < 0.01; tolerance 0.03."""
    pi = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
    x = torch.multinomial(pi, 20000, replacement=True, generator=torch.Generator().manual_seed(0))
    est = k3_kl(pi.log()[x], torch.full((20000,), -math.log(3))).mean().item()
    kl = (pi * (pi * 3).log()).sum().item()
    assert abs(est - kl) < 0.03, (est, kl)


def test_clipping_by_hand():
    """eps = 0.2, beta = 0. Ratios 1.5 and 0.5 (logp - old = log 1.5, log 0.5):
      A = +2: rho 1.5: min(3.0, 1.2*2 = 2.4) = 2.4, clipped;   rho 0.5: min(1.0, 0.8*2 = 1.6) = 1.0, not clipped
      A = -2: rho 1.5: min(-3.0, -2.4) = -3.0, not clipped;    rho 0.5: min(-1.0, -1.6) = -1.6, clipped
    loss = -psi."""
    old = torch.zeros(2, 2)
    logps = torch.tensor([[math.log(1.5), math.log(0.5)]] * 2)
    tl = clipped_token_loss(logps, old, None, torch.tensor([2.0, -2.0]), 0.2, 0.0)
    assert torch.allclose(tl.ratio, torch.tensor([[1.5, 0.5], [1.5, 0.5]]))
    assert torch.allclose(tl.loss, torch.tensor([[-2.4, -1.0], [3.0, 1.6]]))
    assert tl.clipped.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert torch.equal(tl.kl, torch.zeros(2, 2))


def test_clipped_tokens_have_no_policy_gradient():
    """Where the clipped term is active the surrogate is constant in theta: d loss / d logp = 0."""
    logps = torch.tensor([[math.log(1.5), math.log(0.5)]] * 2, requires_grad=True)
    tl = clipped_token_loss(logps, torch.zeros(2, 2), None, torch.tensor([2.0, -2.0]), 0.2, 0.0)
    tl.loss.sum().backward()
    # active unclipped tokens: d(-rho A)/d logp = -rho A
    assert torch.allclose(logps.grad, torch.tensor([[0.0, -0.5 * 2.0], [1.5 * 2.0, 0.0]]))


def test_kl_term_enters_the_loss_with_beta():
    """ratio 1 (logp = old), A = 0: loss = beta k3 = beta (e^d - d - 1); d = ref - logp = -1 -> beta (1/e)."""
    logps = torch.zeros(1, 1)
    tl = clipped_token_loss(logps, logps, torch.full((1, 1), -1.0), torch.zeros(1), 0.2, 0.5)
    assert tl.loss.item() == pytest.approx(0.5 * math.exp(-1))
    assert tl.kl.item() == pytest.approx(math.exp(-1))
    off = clipped_token_loss(logps, logps, torch.full((1, 1), -1.0), torch.zeros(1), 0.2, 0.0)
    assert off.loss.item() == 0.0 and off.kl.item() == 0.0


def test_gradient_at_ratio_one_is_minus_advantage_times_weight_over_normaliser():
    """At logp = old = ref, d rho / d logp = 1 and d k3 / d logp = 1 - e^0 = 0, so for token_mean
    d L / d logp_ik = -A_i w_ik / sum w."""
    g = torch.Generator().manual_seed(2)
    base = -torch.rand(3, 4, generator=g)
    logps = base.clone().requires_grad_(True)
    adv = torch.tensor([1.0, -2.0, 0.5])
    w = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.float32) * 0.5
    tl = clipped_token_loss(logps, base, base, adv, 0.2, 0.04)
    aggregate(tl.loss, w, "token_mean").backward()
    assert torch.allclose(logps.grad, -adv[:, None] * w / w.sum())
    # seq_mean: -A_i w_ik / (N sum_k w_ik)
    logps.grad = None
    tl = clipped_token_loss(logps, base, base, adv, 0.2, 0.04)
    aggregate(tl.loss, w, "seq_mean").backward()
    assert torch.allclose(logps.grad, -adv[:, None] * w / (3 * w.sum(1, keepdim=True)))


def test_aggregate_modes_by_hand():
    """x = [[1, 2, 3], [4, 5, 6]], w = [[1, 1, 0], [0, 0, 2]]:
    token_mean = (1 + 2 + 12) / 4 = 3.75; seq_mean = ((1 + 2)/2 + 12/2) / 2 = 3.75 too, so a second w:
    w' = [[1, 0, 0], [1, 1, 1]]: token_mean = (1 + 15) / 4 = 4, seq_mean = (1 + 5) / 2 = 3;
    z = [2, 5]: mean(sum w'x / z) = (1/2 + 15/5) / 2 = 1.75."""
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    w = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    assert aggregate(x, w, "token_mean").item() == pytest.approx(3.75)
    assert aggregate(x, w, "seq_mean").item() == pytest.approx(3.75)
    w2 = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert aggregate(x, w2, "token_mean").item() == pytest.approx(4.0)
    assert aggregate(x, w2, "seq_mean").item() == pytest.approx(3.0)
    z = torch.tensor([2.0, 5.0])
    assert aggregate(x, w2, "seq_mean", z=z).item() == pytest.approx(1.75)
    assert aggregate(x, w2, "token_mean", z=z).item() == pytest.approx(1.75)  # z overrides loss_type
    assert aggregate(x, torch.zeros(2, 3), "token_mean").item() == 0.0  # no targets: 0, not NaN
    with pytest.raises(ValueError, match="loss_type"):
        aggregate(x, w, "sum")
