"""The head's Gaussian diffusion (ddmrl.mar.diffusion): the cosine schedule and its respacing, the DDPM step's mean,
its noise scale and the exact Gaussian transition log-probability and KL, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from ddmrl.mar.diffusion import (
    Schedule,
    cosine_alphas_cumprod,
    gaussian_kl,
    gaussian_log_prob,
    posterior_mean,
    q_sample,
    sampling_schedule,
    step_std,
    training_schedule,
)

# a two-step schedule by hand: abar = (0.9, 0.5); step 1: beta = 1 - 0.5 / 0.9 = 4/9, alpha = 5/9
HAND = Schedule.from_alphas_cumprod(torch.tensor([0.9, 0.5]), torch.tensor([10, 20]))


def test_cosine_schedule_is_nichol_and_dhariwal_eq_17():
    abar = cosine_alphas_cumprod(1000)
    f = lambda t: math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2  # noqa: E731
    for t in (0, 1, 250, 500, 900):  # abar_t = f(t + 1) / f(0) while no beta is clipped
        assert abar[t].item() == pytest.approx(f((t + 1) / 1000) / f(0), rel=1e-9)
    assert abar[-1].item() == pytest.approx(abar[-2].item() * 0.001, rel=1e-9)  # the last beta clipped at 0.999


def test_respacing_keeps_improved_ddpm_space_timesteps_and_their_abar():
    s = sampling_schedule(1000, 10)
    assert s.timesteps.tolist() == [0, 111, 222, 333, 444, 555, 666, 777, 888, 999]
    assert torch.allclose(s.alphas_cumprod, cosine_alphas_cumprod(1000)[s.timesteps].float())
    assert torch.equal(training_schedule(50).timesteps, torch.arange(50))
    with pytest.raises(ValueError, match="sampling_steps"):
        sampling_schedule(10, 11)


def test_step_mean_std_and_log_prob_by_hand():
    # k = 1: x0 = (x - sqrt(0.5) eps) / sqrt(0.5), mean = beta sqrt(0.9) / 0.5 * x0 + 0.1 sqrt(alpha) / 0.5 * x
    x, eps = torch.tensor([[0.3]]), torch.tensor([[0.1]])
    x0 = (0.3 - math.sqrt(0.5) * 0.1) / math.sqrt(0.5)  # 0.324264
    mean = 4 / 9 * math.sqrt(0.9) / 0.5 * x0 + 0.1 * math.sqrt(5 / 9) / 0.5 * 0.3  # 0.318165
    k = torch.tensor([1])
    assert posterior_mean(HAND, x, k, eps).item() == pytest.approx(mean, abs=1e-6)
    assert mean == pytest.approx(0.318165, abs=1e-6)
    large = step_std(HAND, k).item()
    assert large == pytest.approx(2 / 3, abs=1e-6)  # sqrt(beta) = sqrt(4/9)
    small = step_std(Schedule.from_alphas_cumprod(HAND.alphas_cumprod, HAND.timesteps, "small"), k).item()
    assert small == pytest.approx(math.sqrt(4 / 9 * 0.1 / 0.5), abs=1e-6)  # beta~ = beta (1 - 0.9) / (1 - 0.5)
    assert step_std(HAND, k, temperature=0.5).item() == pytest.approx(1 / 3, abs=1e-6)
    assert step_std(HAND, torch.tensor([0])).item() == 0.0  # the last step is the mean
    # log N(0.5; mean, (2/3)^2) = -(0.5 - mean)^2 / (2 * 4/9) - log(2/3) - log(2 pi) / 2
    hand = -((0.5 - mean) ** 2) / (8 / 9) - math.log(2 / 3) - 0.5 * math.log(2 * math.pi)
    got = gaussian_log_prob(torch.tensor([[0.5]]), torch.tensor([[mean]]), torch.tensor([2 / 3]))
    assert got.item() == pytest.approx(hand, abs=1e-6)


def test_log_prob_sums_channels_and_agrees_with_torch_normal():
    g = torch.Generator().manual_seed(0)
    x, mean, std = torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g), torch.rand(6, generator=g) + 0.1
    want = torch.distributions.Normal(mean, std[:, None]).log_prob(x).sum(-1)
    assert torch.allclose(gaussian_log_prob(x, mean, std), want, atol=1e-5)


def test_kl_of_two_transitions_is_exact():
    g = torch.Generator().manual_seed(1)
    a, b, std = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g), torch.rand(5, generator=g) + 0.2
    p, q = torch.distributions.Normal(a, std[:, None]), torch.distributions.Normal(b, std[:, None])
    assert torch.allclose(gaussian_kl(a, b, std), torch.distributions.kl_divergence(p, q).sum(-1), atol=1e-5)
    assert gaussian_kl(a, a, std).abs().max() == 0


def test_predicted_x0_is_clipped_to_the_canvas_range():
    """At the noisiest respaced step abar = 2.4e-9: an eps off by 1e-3 would put x0 near 20, far off the canvas."""
    s = sampling_schedule(1000, 10)
    k = torch.tensor([9])
    x = torch.tensor([[0.2, -0.4, 0.9]])
    exact = x / (1 - s.alphas_cumprod[9]).sqrt()  # the eps for which x0 = 0
    off = posterior_mean(s, x, k, exact + 1e-3)
    mean_at = lambda x0: s.posterior_mean_coef1[9] * x0 + s.posterior_mean_coef2[9] * x  # noqa: E731
    assert torch.allclose(off, mean_at(torch.full((1, 3), -1.0)), atol=1e-6)  # x0 clipped at -1


def test_q_sample_matches_its_definition():
    s = training_schedule(100)
    x0, noise, k = torch.ones(2, 3), torch.full((2, 3), 2.0), torch.tensor([0, 99])
    abar = s.alphas_cumprod[k][:, None]
    assert torch.allclose(q_sample(s, x0, k, noise), abar.sqrt() + 2 * (1 - abar).sqrt())
