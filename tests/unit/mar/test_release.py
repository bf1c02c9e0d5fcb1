"""MAR-GRPO's consistency-aware selection and KL against a transcription of its release (AMAP-ML/mar-grpo,
``src/grpo/src/open_r1/trainer/grpo_trainer_harmon_v1_2.py``, ``compute_loss``: one AR step ``i`` with
``use_critic_token`` (MTE), ``use_latent_sim_coef`` (consistency) and ``critic_for_kl`` false, as its scripts run it).

The release takes per-channel log-probabilities and ratios exp(logp_c - sg(logp_c)) (on-policy, one update per
rollout batch); ddmrl takes the token's log-probability (the sum over channels) in a clipped surrogate. At ratio 1
the gradients are the same; the loss values differ by a constant, (C - 1) x the mean advantage over the trained
transitions. Everything else (selection from step 2, the KL over every unknown token with its own normaliser, k3 of
the mean difference) is compared exactly, losses and gradients.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ddmrl.mar.grpo import StepTerms, step_loss, token_weights
from ddmrl.mar.sampler import MARRollout

S, K, B, N, C, M = 4, 3, 2, 6, 3, 2  # AR steps, diffusion steps trained, images, tokens, channels, MTE trajectories


def rollout() -> MARRollout:
    """Random reveal order over S steps; random drafts of every token at every step and a random final image."""
    g = torch.Generator().manual_seed(0)
    step = torch.stack([torch.randperm(N, generator=g) % S for _ in range(B)])  # [B, N] the step revealing each token
    masks = torch.stack([step >= s for s in range(S + 1)])  # [S + 1, B, N]
    traj = torch.randn(S, 2, B, N, C, generator=g)  # index 0: each step's draft x_0 of every token
    final = torch.randn(B, N, C, generator=g)
    return MARRollout(None, masks, None, traj, None, final, None, S, 0)


def released_step(i, logp_c, logp_seed_c, mean, ref_mean, adv, roll, critic, beta, thresh):
    """One AR step's ``cur_step_total_loss``, transcribed (``k`` diffusion steps flattened into k * B rows)."""
    k = logp_c.shape[0]
    completion_mask = roll.masks[i].unsqueeze(-1).float()  # mask_list[i]: unknown at the step  [B, L, 1]
    completion_mask_next = roll.committed[i].unsqueeze(-1).float()  # mask_to_pred_list[i]
    completion_mask_flat = completion_mask.unsqueeze(0).expand(k, *completion_mask.shape).reshape(k * B, N, 1)
    completion_mask_flat_next = completion_mask_next.unsqueeze(0).expand(k, B, N, 1).reshape(k * B, N, 1)
    critic_token_mask_flat = critic.float().unsqueeze(-1).unsqueeze(0).expand(k, -1, -1, -1).flatten(0, 1)
    advantages_flat = adv.view(B, 1, 1).unsqueeze(0).expand(k, B, 1, 1).reshape(k * B, 1, 1)
    logp_j = logp_c.reshape(k * B, N, C)
    per_token_policy_loss_critic = 0.0
    for seed_idx in range(logp_seed_c.shape[0]):
        mean_logp_j_critic = logp_seed_c[seed_idx].reshape(-1, N, C)
        per_token_policy_loss_critic = per_token_policy_loss_critic + torch.exp(
            mean_logp_j_critic - mean_logp_j_critic.detach()
        ) * (advantages_flat.view(1, -1, 1, 1))
    per_token_policy_loss_critic = per_token_policy_loss_critic / logp_seed_c.shape[0]
    per_token_policy_loss = torch.exp(logp_j - logp_j.detach()) * advantages_flat
    diff_mean = ref_mean.reshape(k * B, N, C) - mean.reshape(k * B, N, C)
    per_token_kl = torch.exp(diff_mean) - diff_mean - 1
    if i > 1:
        cur_diff_latent, prev_diff_latent = roll.trajectories[i, 0], roll.trajectories[i - 1, 0]
        sim_map_diff_cur = F.cosine_similarity(cur_diff_latent, roll.final, dim=-1).view(B, N, -1)
        sim_map_diff_prev = F.cosine_similarity(prev_diff_latent, roll.final, dim=-1).view(B, N, -1)
        sim_map_diff_flat = (sim_map_diff_cur - sim_map_diff_prev).unsqueeze(0).expand(k, B, N, 1).reshape(k * B, N, 1)
        hard_mask = (sim_map_diff_flat > thresh).float()
        sim_mask_diff_flat = (hard_mask * completion_mask_flat + completion_mask_flat_next).clamp_(0, 1)
    kl_loss = (per_token_kl * completion_mask_flat).sum() / completion_mask_flat.sum()
    completion_mask_flat_ = completion_mask_flat * sim_mask_diff_flat if i > 1 else completion_mask_flat
    policy_loss = (
        per_token_policy_loss * completion_mask_flat_ * (1 - critic_token_mask_flat)
        + per_token_policy_loss_critic * completion_mask_flat_ * critic_token_mask_flat
    ).sum() / completion_mask_flat_.sum()
    return -(policy_loss - beta * kl_loss), completion_mask_flat_


def leaves(seed: int):
    g = torch.Generator().manual_seed(seed)
    logp_c = (-torch.rand(K, B, N, C, generator=g, dtype=torch.float64)).requires_grad_(True)
    logp_seed_c = (-torch.rand(M, K, B, N, C, generator=g, dtype=torch.float64)).requires_grad_(True)
    mean = torch.randn(K, B, N, C, generator=g, dtype=torch.float64).requires_grad_(True)
    ref_mean = mean.detach() + 0.3 * torch.randn(K, B, N, C, generator=g, dtype=torch.float64)
    return logp_c, logp_seed_c, mean, ref_mean


@pytest.mark.parametrize("i", [1, 2, 3])
def test_selection_and_kl_are_the_releases_losses_and_gradients(i):
    roll, beta, thresh = rollout(), 0.05, 0.0
    adv = torch.tensor([0.8, -1.1], dtype=torch.float64)
    critic = torch.zeros(B, N, dtype=torch.bool)
    critic[:, :2] = True  # MTE's selected (most uncertain) tokens
    logp_c, logp_seed_c, mean, ref_mean = leaves(i)
    weights = token_weights(roll, "masked", True, thresh)  # the defaults: consistency_start 2, the release's
    terms = StepTerms(logp_c.sum(-1), mean, logp_seed_c.sum(-1))
    old = StepTerms(terms.logp.detach(), None, terms.logp_mte.detach())
    got, _ = step_loss(terms, old, ref_mean, adv, weights[i], critic, torch.ones(K), 0.2, beta,
                       roll.masks[i], "k3_means")  # fmt: skip
    want, trained = released_step(i, logp_c, logp_seed_c, mean, ref_mean, adv, roll, critic, beta, thresh)
    assert torch.equal(trained[:B, :, 0].bool(), weights[i]), "the same tokens trained"
    constant = (C - 1) * (trained * adv.view(1, B, 1, 1).expand(K, B, 1, 1).reshape(K * B, 1, 1)).sum() / trained.sum()
    assert torch.allclose(got, want + constant, rtol=1e-12, atol=1e-14)
    for x in (logp_c, logp_seed_c, mean):
        (g_got,) = torch.autograd.grad(got, x, retain_graph=True)
        (g_want,) = torch.autograd.grad(want, x, retain_graph=True)
        assert torch.allclose(g_got, g_want, rtol=1e-10, atol=1e-15)


def test_the_old_settings_differ_from_the_release():
    """consistency_start 1 filters step 1's drafts too; kl_tokens trained restricts the KL to the selected tokens."""
    roll, beta = rollout(), 0.05
    early, release = token_weights(roll, "masked", True, 0.0, start=1), token_weights(roll, "masked", True, 0.0)
    assert torch.equal(early[2:], release[2:]) and torch.equal(release[1], roll.masks[1])
    assert not torch.equal(early[1], release[1])
    adv = torch.tensor([0.8, -1.1], dtype=torch.float64)
    logp_c, logp_seed_c, mean, ref_mean = leaves(7)
    terms = StepTerms(logp_c.sum(-1), mean, None)
    old = StepTerms(terms.logp.detach(), None, None)
    args = (terms, old, ref_mean, adv, release[2], None, torch.ones(K), 0.2, beta)
    masked_kl, _ = step_loss(*args, roll.masks[2], "k3_means")
    trained_kl, _ = step_loss(*args, None, "k3_means")
    assert not torch.allclose(masked_kl, trained_kl)
