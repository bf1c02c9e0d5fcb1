"""GRPO's terms over MAR's transitions and MAR-GRPO's stabilisers (ddmrl.mar.objective): MTE averaging, the top-k %
uncertainty selection, consistency-aware selection, on hand-built cases; and the MTE term's zero expected gradient."""

from __future__ import annotations

import math

import pytest
import torch

from ddmrl.mar.diffusion import posterior_mean, sampling_schedule
from ddmrl.mar.grpo import StepTerms, step_loss
from ddmrl.mar.model import DiffusionHead
from ddmrl.mar.objective import (
    clipped_surrogate,
    consistency_mask,
    mte_surrogate,
    top_percent,
    transition_log_probs,
    uncertainty,
)
from ddmrl.mar.sampler import sample_head
from ddmrl.objectives.policy_loss import clipped_token_loss


def test_mte_surrogate_is_the_mean_of_the_per_trajectory_terms_on_selected_tokens():
    # I = 1 diffusion step, B = 1 image, N = 3 tokens, M = 3 trajectories
    psi = torch.tensor([[[1.0, 2.0, 3.0]]])
    psi_mte = torch.tensor([[[[3.0, 0.0, 6.0]]], [[[6.0, 0.0, 0.0]]], [[[0.0, 0.0, 3.0]]]])
    selected = torch.tensor([[True, False, True]])
    out = mte_surrogate(psi, psi_mte, selected)
    assert out.tolist() == [[[3.0, 2.0, 3.0]]]  # (3 + 6 + 0) / 3, own 2.0, (6 + 0 + 3) / 3


def test_expectation_over_k_trajectories_equals_the_mean_of_per_trajectory_terms_in_the_loss():
    """step_loss with MTE = -sum_w (mean_m psi_m on selected, psi elsewhere) / sum_w, assembled by hand."""
    g = torch.Generator().manual_seed(0)
    i, b, n, m = 2, 2, 3, 4
    logp, old = torch.randn(i, b, n, generator=g), torch.randn(i, b, n, generator=g)
    logp_m, old_m = torch.randn(m, i, b, n, generator=g), torch.randn(m, i, b, n, generator=g)
    adv = torch.tensor([1.0, -0.5])
    weights = torch.tensor([[True, True, False], [True, False, True]])
    selected = torch.tensor([[False, True, True], [True, False, False]])
    loss, _ = step_loss(StepTerms(logp, None, logp_m), StepTerms(old, None, old_m), None, adv, weights, selected,
                        torch.ones(i), 0.2, 0.0)  # fmt: skip

    def psi(lp, lo, a):
        r = math.exp(lp - lo)
        return min(r * a, min(max(r, 0.8), 1.2) * a)

    total, count = 0.0, 0
    for bb in range(b):
        for nn in range(n):
            if not weights[bb, nn]:
                continue
            for ii in range(i):
                if selected[bb, nn]:
                    terms = [psi(logp_m[mm, ii, bb, nn].item(), old_m[mm, ii, bb, nn].item(), adv[bb].item())
                             for mm in range(m)]  # fmt: skip
                    total += sum(terms) / m
                else:
                    total += psi(logp[ii, bb, nn].item(), old[ii, bb, nn].item(), adv[bb].item())
                count += 1
    assert loss.item() == pytest.approx(-total / count, rel=1e-5)


def test_clipped_surrogate_is_the_librarys_token_surrogate():
    g = torch.Generator().manual_seed(1)
    logp, old, adv = torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g), torch.randn(4, generator=g)
    psi, clipped = clipped_surrogate(logp, old, adv, 0.2)
    ref = clipped_token_loss(logp, old, None, adv, 0.2, 0.0)
    assert torch.allclose(psi, -ref.loss)
    assert torch.equal(clipped.float(), ref.clipped)


def test_uncertainty_is_the_spread_over_trajectories_averaged_over_channels():
    samples = torch.tensor([[[[0.0, 1.0], [2.0, 2.0]]], [[[2.0, 1.0], [2.0, 6.0]]]])  # [M=2, B=1, N=2, C=2]
    # token 0: std (1/M) per channel = (1, 0) -> 0.5; token 1: (0, 2) -> 1.0
    assert uncertainty(samples).tolist() == [[0.5, 1.0]]


def test_top_percent_enumerated():
    score = torch.tensor([[0.1, 0.5, 0.3, 0.9], [0.4, 0.2, 0.8, 0.6]])
    assert top_percent(score, 0.5).tolist() == [[False, True, False, True], [False, False, True, True]]
    assert top_percent(score, 0.3).tolist() == [[False, False, False, True], [False, False, True, False]]  # int(1.2)
    assert top_percent(score, 0.1).sum(-1).tolist() == [1, 1]  # at least one token
    assert top_percent(score, 1.0).all()


def test_consistency_mask_on_a_tiny_case():
    final = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]]])  # [B=1, N=4, C=2]
    previous = torch.tensor([[[0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]])
    draft = torch.tensor([[[1.0, 1.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
    unknown = torch.tensor([[True, True, True, False]])  # token 3 is revealed by this step
    revealed = torch.tensor([[False, False, False, True]])
    # cosine gains: token 0: 0.707 - 0 > 0 kept; token 1: 0 - 1 dropped; token 2: 0.707 - 0.707 = 0 dropped (not >)
    assert consistency_mask(draft, previous, final, unknown, revealed).tolist() == [[True, False, False, True]]
    assert consistency_mask(draft, previous, final, unknown, revealed, threshold=-1.5).tolist() == [[True] * 4]
    assert consistency_mask(draft, previous, final, unknown, revealed, threshold=0.8).tolist() == [
        [False, False, False, True]
    ]


def _head(seed: int) -> DiffusionHead:
    torch.manual_seed(seed)
    head = DiffusionHead(3, 8, 16, 2)
    for p in head.parameters():  # a random head (MAR's zero-initialised output would predict eps = 0)
        torch.nn.init.normal_(p, std=0.3)
    return head


def test_transition_log_probs_are_the_samplers_own_gaussian_steps():
    """The log-prob recomputed from a stored trajectory is log N of the sampled step: (x_{k-1} - mean) / sigma is
    standard normal over many draws, and the deterministic last step is exactly the recomputed mean."""
    head, sched = _head(0), sampling_schedule(1000, 6)
    z = torch.randn(4000, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        traj = sample_head(head, sched, z, torch.Generator().manual_seed(2))
        steps = torch.arange(1, 6)
        logp, mean = transition_log_probs(head, sched, z, traj, steps)
        std = sched.step_variance[steps].sqrt()[:, None, None]
        residual = (traj[steps] - mean) / std  # [I, n, C]
        assert residual.mean().abs() < 0.02 and (residual.var() - 1).abs() < 0.03
        want = -0.5 * residual.square().sum(-1) - 3 * std[..., 0].log() - 1.5 * math.log(2 * math.pi)
        assert torch.allclose(logp, want, atol=1e-4)
        k0 = torch.zeros(len(z), dtype=torch.long)
        assert torch.allclose(traj[0], posterior_mean(sched, traj[1], k0, head(traj[1], sched.timesteps[k0], z)))
    with pytest.raises(ValueError, match="deterministic"):
        transition_log_probs(head, sched, z[:2], traj[:, :2], torch.tensor([0, 1]))


def test_a_fresh_trajectorys_score_has_zero_expectation():
    """E_{tau ~ p(.|z)}[grad_z log p(tau | z)] = 0: MTE's extra trajectories, drawn at the condition they are scored
    at, give a zero-mean gradient: its mean over many draws is within noise of 0 and tiny against a single draw's."""
    head, sched = _head(3), sampling_schedule(1000, 5)
    z0 = torch.randn(1, 8, generator=torch.Generator().manual_seed(4))
    draws = 20000
    z = z0.repeat(draws, 1).requires_grad_(True)
    with torch.no_grad():
        traj = sample_head(head, sched, z.detach(), torch.Generator().manual_seed(5))
    logp, _ = transition_log_probs(head, sched, z, traj, torch.arange(1, 5))
    (grad,) = torch.autograd.grad(logp.sum(), z)  # [draws, D]: each draw's score
    mean, se = grad.mean(0), grad.std(0) / math.sqrt(draws)
    assert bool((mean.abs() < 4 * se).all())
    assert mean.norm() < 0.05 * grad.norm(dim=-1).mean()
