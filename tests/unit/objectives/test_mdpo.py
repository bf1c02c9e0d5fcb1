"""MDPO (He et al. 2025, arXiv 2508.13148): per-step advantages, top-K step selection and the policy loss, against a
transcription of its released trainer (autonomousvision/mdpo, ``src/open_r1/mdpo/mdpo_trainer.py``:
``_generate_and_score_completions``, ``split_into_micro_batches``, ``compute_loss``) and against hand computations.

The released trainer runs one rollout per process (``per_device_train_batch_size: 1``) and G processes per group:
group statistics come from ``gather``, the step selection from the process's own row. The transcriptions below
keep that layout, one row at a time.
"""

from __future__ import annotations

import math

import pytest
import torch

from ddmrl.config import method_config
from ddmrl.masking.views import top_steps
from ddmrl.objectives import STEP_ADVANTAGES
from ddmrl.objectives.advantages import mdpo_step_advantages
from ddmrl.objectives.base import ObjectiveInputs
from ddmrl.objectives.mdpo import k2_kl, mdpo

# --------------------------------------------------------------------------- the released code, transcribed


def released_step_advantages(all_step_rewards: torch.Tensor) -> torch.Tensor:
    """adv-v4 of one process's rows [B, S] (lines 849-851 of the trainer)."""
    diffusion_steps = all_step_rewards.shape[1]
    all_step_advantages = (
        torch.cat([all_step_rewards[:, 0:1], all_step_rewards[:, 1:] - all_step_rewards[:, :-1]], dim=-1) + 1
    )
    all_step_advantages += torch.cat(
        [
            (
                all_step_rewards[:, 1:].flip(dims=(-1,)).cumsum(dim=-1)
                / torch.arange(1, diffusion_steps, device=all_step_rewards.device).unsqueeze(0)
            ).flip(dims=(-1,)),
            all_step_rewards[:, -1:],
        ],
        dim=-1,
    )
    return all_step_advantages


def released_group(rows: list[torch.Tensor], num_generations: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """G processes with one rollout each: their normalised advantages [G, S] and each one's top-k steps [G, k]."""
    local = [released_step_advantages(r[None]) for r in rows]  # each [1, S]
    gathered_all_advantages = torch.cat(local).view(-1, num_generations, rows[0].shape[0])  # gather()
    mean_grouped_advantages = gathered_all_advantages.mean(dim=1)
    std_grouped_advantages = gathered_all_advantages.std(dim=1)
    advantages = [(a - mean_grouped_advantages) / (std_grouped_advantages + 1e-4) for a in local]
    steps = [torch.topk(torch.abs(a).sum(dim=0), k=k, dim=-1).indices for a in advantages]
    return torch.cat(advantages), torch.stack(steps)


def random_step_rewards(b: int, g: int, s: int, seed: int) -> torch.Tensor:
    """Continuous per-step rewards (no ties): [B * G, S]."""
    return torch.rand(b * g, s, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2


@pytest.mark.parametrize(("b", "g", "s", "seed"), [(1, 4, 8, 0), (3, 4, 16, 1), (2, 6, 5, 2), (2, 2, 2, 3)])
def test_step_advantages_are_the_released_adv_v4_normalised_per_step_over_the_group(b, g, s, seed):
    r = random_step_rewards(b, g, s, seed)
    got = mdpo_step_advantages(r, g)
    for group in range(b):
        rows = list(r[group * g : (group + 1) * g])
        want, _ = released_group(rows, g, min(2, s))
        assert torch.allclose(got[group * g : (group + 1) * g], want, atol=1e-12, rtol=0)
    assert STEP_ADVANTAGES["mdpo"] is mdpo_step_advantages


@pytest.mark.parametrize(("g", "s", "k", "seed"), [(4, 16, 8, 0), (4, 8, 8, 1), (6, 10, 3, 2), (2, 5, 1, 3)])
def test_top_k_steps_are_the_released_selection(g, s, k, seed):
    r = random_step_rewards(1, g, s, seed)
    _, want = released_group(list(r), g, k)
    assert torch.equal(top_steps(mdpo_step_advantages(r, g), k), want)


def test_binary_rewards_by_hand():
    """Correctness rewards of S = 3 steps, G = 2 rollouts. Rollout 0 is right at steps 2 and 3 (r = 0, 1, 1),
    rollout 1 only at step 2 (0, 1, 0: over-denoising). a_s = gain + 1 + mean of later rewards:
        rollout 0: a = (0 + 1 + 1, 1 + 1 + 1, 0 + 1 + 1) = (2, 3, 2)
        rollout 1: a = (0 + 1 + 0.5, 1 + 1 + 0, -1 + 1 + 0) = (1.5, 2, 0)
    Per step over the pair, (a - mean) / (std + 1e-4) with std = |a0 - a1| / sqrt(2): +-1/sqrt(2) up to the eps,
    positive for rollout 0 at every step. The step selection prefers step 3 (largest gap), then step 2."""
    r = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    a = mdpo_step_advantages(r, 2)
    gaps = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    want = (gaps / 2) / (gaps / 2**0.5 + 1e-4)
    assert torch.allclose(a[0], want) and torch.allclose(a[1], -want)
    assert top_steps(a, 2).tolist() == [[2, 1], [2, 1]]
    assert top_steps(a, 10).shape == (2, 3), "K is capped at the number of steps"


def test_equal_rewards_give_zero_advantages():
    r = torch.ones(4, 6, dtype=torch.float64)
    assert torch.equal(mdpo_step_advantages(r, 4), torch.zeros(4, 6, dtype=torch.float64))


# --------------------------------------------------------------------------- the loss


def released_loss(per_token_logps, old, ref, advantages, conf, masked, epsilon, beta, max_completion_length):
    """``compute_loss`` for one micro-batch (one rollout, one selected step), transcribed; ``masked`` is its
    ``completion_mask`` (input == mask id)."""
    if beta != 0.0:
        logr = ref - per_token_logps
        per_token_kl = logr**2 / 2
    completion_mask = masked
    lambda_t = max_completion_length / (completion_mask.sum(dim=-1, keepdim=True) + 1e-4)
    coef_1 = torch.exp(per_token_logps - old)
    coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon)
    per_token_loss1 = coef_1 * advantages
    per_token_loss2 = coef_2 * advantages
    per_token_loss = -torch.min(per_token_loss1, per_token_loss2) * lambda_t
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * per_token_kl
    return (per_token_loss * completion_mask * conf).sum() / (completion_mask.sum() + 1e-4)


def inputs(n=3, length=6, v=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    logps = -torch.rand(v, n, length, generator=g, dtype=torch.float64) * 3
    old = logps + (torch.rand(v, n, length, generator=g, dtype=torch.float64) - 0.5)
    ref = logps + (torch.rand(v, n, length, generator=g, dtype=torch.float64) - 0.5)
    masked = torch.rand(v, n, length, generator=g) < 0.6
    masked[..., 0] = True  # at least one target per view
    conf = torch.rand(v, n, length, generator=g, dtype=torch.float64)
    adv = torch.randn(v, n, generator=g, dtype=torch.float64)
    return logps, old, ref, masked, conf, adv


def objective_inputs(logps, old, ref, masked, conf, adv) -> ObjectiveInputs:
    v, n, length = logps.shape
    t = masked.double().mean(-1)  # every position valid: the realised fraction is |M| / L
    return ObjectiveInputs(
        logps,
        old,
        ref,
        adv[0] * 0,
        masked * conf,
        None,
        t,
        masked,
        torch.ones(n, length, dtype=torch.bool),
        2,
        extras={"view_advantages": adv},
    )


@pytest.mark.parametrize("beta", [0.0, 0.02])
def test_loss_is_the_released_compute_loss_per_rollout_averaged(beta):
    """loss_type seq_mean (MDPO's default): each rollout's released micro-batch loss, averaged over rollouts and over
    the step's views. The released 1e-4 in L / (|M| + 1e-4) and |M| + 1e-4 is the only difference (rtol 1e-3)."""
    logps, old, ref, masked, conf, adv = inputs()
    cfg = method_config("mdpo", {"beta": beta, "epsilon": 0.2})
    got = mdpo(objective_inputs(logps, old, ref, masked, conf, adv), cfg).loss
    per_rollout = [
        released_loss(logps[v, i], old[v, i], ref[v, i], adv[v, i], conf[v, i], masked[v, i].double(), 0.2, beta, 6)
        for v in range(2)
        for i in range(3)
    ]
    want = torch.stack(per_rollout).mean()
    assert torch.allclose(got, want, rtol=1e-3)


def test_loss_by_hand_one_rollout_two_tokens():
    """L = 4, masked positions {0, 1} (t = 1/2, lambda = 2), confidences 0.5 and 1, A = 1, epsilon 0.2, beta 0.1.
    Token 0: rho = e^0.1 = 1.105 < 1.2, psi = 1.105; token 1: rho = e^0.5 = 1.649, clipped to 1.2 (A > 0). KL k2
    against ref: 0 for token 0, 0.3^2 / 2 = 0.045 for token 1; positions 2 and 3 are not masked and do not count.
        loss = [0.5 (-e^0.1 x 2 + 0) + 1 (-1.2 x 2 + 0.1 x 0.045)] / 2"""
    logps = torch.tensor([[[-1.0, -1.0, -2.0, -2.0]]], dtype=torch.float64)
    old = logps - torch.tensor([[[0.1, 0.5, 0.0, 0.0]]], dtype=torch.float64)
    ref = logps + torch.tensor([[[0.0, 0.3, 9.0, 9.0]]], dtype=torch.float64)
    masked = torch.tensor([[[True, True, False, False]]])
    conf = torch.tensor([[[0.5, 1.0, 0.3, 0.3]]], dtype=torch.float64)
    x = objective_inputs(logps, old, ref, masked, conf, torch.tensor([[1.0]], dtype=torch.float64))
    out = mdpo(x, method_config("mdpo", {"beta": 0.1, "epsilon": 0.2}))
    want = (0.5 * (-math.exp(0.1) * 2) + 1.0 * (-1.2 * 2 + 0.1 * 0.045)) / 2
    assert out.loss.item() == pytest.approx(want, rel=1e-9)
    assert out.terms["clip_ratio"] == pytest.approx(0.5) and out.terms["kl"] == pytest.approx(0.045 / 2)
    assert k2_kl(torch.tensor([0.0]), torch.tensor([0.3])).item() == pytest.approx(0.045)


def test_token_mean_pools_the_rollouts_of_a_step():
    logps, old, ref, masked, conf, adv = inputs(v=1)
    cfg = method_config("mdpo", {"beta": 0.0, "loss_type": "token_mean"})
    x = objective_inputs(logps, old, ref, masked, conf, adv)
    ratio = torch.exp(logps - old)[0]
    a = adv[0][:, None]
    psi = torch.minimum(ratio * a, ratio.clamp(0.8, 1.2) * a) / x.t[0][:, None]
    want = -(masked[0] * conf[0] * psi).sum() / masked[0].sum()
    assert torch.allclose(mdpo(x, cfg).loss, want)


def test_the_gradient_is_the_advantage_times_confidence_and_lambda_at_ratio_one():
    """At ratio 1 (old = current) and beta 0: d loss / d logp_k = -A c_k (L / |M|) / |M| / N / V."""
    logps, _, ref, masked, conf, adv = inputs(n=2, v=1)
    logps = logps.clone().requires_grad_(True)
    x = objective_inputs(logps, logps.detach(), ref, masked, conf, adv)
    (grad,) = torch.autograd.grad(mdpo(x, method_config("mdpo", {"beta": 0.0})).loss, logps)
    m = masked.double()
    count = m.sum(-1, keepdim=True)
    want = -adv[..., None] * conf * m * (6 / count) / count / 2
    assert torch.allclose(grad, want)
