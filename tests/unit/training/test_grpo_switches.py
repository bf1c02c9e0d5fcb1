"""The two reproduction switches of the GRPO loop: ``legacy_micro_step_views`` (ddmrl.training.grpo.step_views) and
``legacy_broadcast_weighting`` (ddmrl.objectives.weights.token_weights), against d1's and MaskGRPO's trainers.

Micro-step view index (d1's ``compute_loss``): the trainer keeps one counter ``_step``
over micro-batches, incremented before the loss, and picks view ``_step % mu``. With A micro-batches per optimiser
step, micro-batch a of inner step s is micro-step m = s A + a, so it uses view (s A + a + 1) mod mu. With A = 2 and
mu = 12, slot 0 gets (2s + 1) mod 12 = 1, 3, 5, 7, 9, 11, 1, 3, ... : only the mu / A = 6 odd views, each twice;
slot 1 gets 2, 4, ..., 10, 0, 2, ...: the even views, each twice.

Broadcast weighting (MaskGRPO's code): the loss mask is the stack of all mu masks, broadcast against one view's
per-token loss, so each position k (masked in this view or not, valid or after EOS) has weight F(k) = number of views
masking it, and the token_mean loss is sum_k F(k) l(k) / sum_k F(k).
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
from fake_rewards import varied_reward

import ddmrl.training.grpo as grpo_module
from ddmrl.config import GRPOConfig, SamplerConfig
from ddmrl.masking.views import Views, build_views
from ddmrl.methods.maskgrpo import Params as MaskGRPOParams
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.objectives.base import ObjectiveInputs
from ddmrl.objectives.token_clip import token_clip
from ddmrl.objectives.weights import token_weights
from ddmrl.rollout import Rollouts
from ddmrl.tasks import make_task
from ddmrl.training.grpo import make_views, step_views, train_grpo


def hand_views(mu: int, n: int = 1, length: int = 2) -> Views:
    return Views(
        torch.zeros(mu, n, length, dtype=torch.bool), torch.zeros(mu, n, 0, dtype=torch.bool), torch.ones(mu, n), 0
    )


def cfg_for(ga: int, mu: int, legacy: bool) -> GRPOConfig:
    return GRPOConfig(
        num_prompts=12, gradient_accumulation_steps=ga, num_iterations=mu, legacy_micro_step_views=legacy
    )


# ------------------------------------------------------------------------------------ micro-step view index


def test_legacy_views_with_two_micro_batches_and_mu_12_by_hand():
    """A = 2, mu = 12 (module docstring): slot 0 -> 1, 3, 5, 7, 9, 11, 1, 3, 5, 7, 9, 11;
    slot 1 -> 2, 4, 6, 8, 10, 0, 2, 4, 6, 8, 10, 0."""
    views, cfg = hand_views(12), cfg_for(2, 12, True)
    slot0 = [step_views(views, s, 0, cfg) for s in range(12)]
    slot1 = [step_views(views, s, 1, cfg) for s in range(12)]
    assert slot0 == [(j,) for j in [1, 3, 5, 7, 9, 11] * 2]
    assert slot1 == [(j,) for j in [2, 4, 6, 8, 10, 0] * 2]


@pytest.mark.parametrize(("ga", "mu"), [(2, 12), (4, 12), (3, 6), (2, 4)])
def test_legacy_views_give_each_slot_only_mu_over_a_views_each_a_times(ga, mu):
    """Over the mu inner steps, slot a sees the residue class {v : v = a + 1 mod A} (A | mu): mu / A distinct
    views, each exactly A times, the A slots partitioning the mu views (no slot sees every view)."""
    views, cfg = hand_views(mu), cfg_for(ga, mu, True)
    seen_by_slot = []
    for a in range(ga):
        counts = Counter(step_views(views, s, a, cfg)[0] for s in range(mu))
        assert set(counts) == {v for v in range(mu) if v % ga == (a + 1) % ga}
        assert len(counts) == mu // ga and set(counts.values()) == {ga}
        seen_by_slot.append(set(counts))
    assert set().union(*seen_by_slot) == set(range(mu))
    assert all(len(s) < mu for s in seen_by_slot)


def test_legacy_views_follow_the_micro_step_counter():
    """The legacy index is (m + 1) mod mu for the running micro-step counter m = s A + a (d1's ``_step % mu``
    after the increment)."""
    views, cfg = hand_views(5), cfg_for(2, 5, True)
    got = [step_views(views, s, a, cfg)[0] for s in range(5) for a in range(2)]
    assert got == [(m + 1) % 5 for m in range(10)]


def test_without_the_switch_every_micro_batch_at_step_s_uses_view_s():
    views = hand_views(12)
    for ga in (1, 2, 4):
        cfg = cfg_for(ga, 12, False)
        assert [[step_views(views, s, a, cfg) for a in range(ga)] for s in range(12)] == [
            [(s,)] * ga for s in range(12)
        ]


def test_without_the_switch_the_schedule_is_followed():
    """GDPO: every node at every step; SPG: views_per_step consecutive views per step."""
    cm = torch.ones(2, 8, dtype=torch.bool)
    prompt = torch.full((2, 2), 7)
    gdpo = build_views(
        "gdpo_quadrature", mu=3, seed=0, completion_mask=cm, prompt_ids=prompt, pad_id=1, views_per_step=3
    )
    spg = build_views("block_random", mu=3, seed=0, completion_mask=cm, prompt_ids=prompt, pad_id=1, views_per_step=2)
    cfg = cfg_for(2, 3, False)
    assert [step_views(gdpo, s, a, cfg) for s in range(3) for a in range(2)] == [(0, 1, 2)] * 6
    assert [step_views(spg, s, 1, cfg) for s in range(3)] == [(0, 1), (2, 3), (4, 5)]


@pytest.mark.parametrize("legacy", [False, True])
def test_the_loop_consumes_views_as_step_views_says(make_model, monkeypatch, legacy):
    """train_grpo asks step_views once per (inner step s, micro-batch a), in order, and evaluates the current policy on
    exactly those views: mu = 4, A = 2, one rollout batch. Legacy: views (2s + a + 1) mod 4 = 1, 2, 3, 0, 1, 2, 3, 0;
    paper intent: 0, 0, 1, 1, 2, 2, 3, 3."""
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    calls = []
    real = grpo_module.step_views

    def spy(views, step, micro, cfg):
        out = real(views, step, micro, cfg)
        calls.append((step, micro, out))
        return out

    monkeypatch.setattr(grpo_module, "step_views", spy)
    cfg = GRPOConfig(
        method="unigrpo",
        max_steps=4,
        num_prompts=2,
        num_generations=2,
        num_iterations=4,
        gradient_accumulation_steps=2,
        beta=0.0,
        legacy_micro_step_views=legacy,
        sampler=SamplerConfig(block_length=4, steps=4, temperature=1.0),
    )
    train_grpo(policy, copy.deepcopy(policy), tok, task, lambda it: task.generate(2, seed=it), cfg, 0)
    want = [(m + 1) % 4 for m in range(8)] if legacy else [m // 2 for m in range(8)]
    assert calls == [(m // 2, m % 2, (want[m],)) for m in range(8)]


# ------------------------------------------------------------------------------------------ broadcast weights

# mu = 3 views of N = 2 rollouts, L = 4; row 1 has its last position after EOS (masked in views 0 and 2).
MASKS = torch.tensor(
    [
        [[1, 0, 1, 0], [1, 1, 0, 1]],
        [[1, 1, 0, 0], [0, 1, 0, 0]],
        [[0, 1, 1, 0], [0, 1, 1, 1]],
    ],
    dtype=torch.bool,
)
VALID = torch.tensor([[True, True, True, True], [True, True, True, False]])
F_ALL = torch.tensor([[2.0, 2.0, 2.0, 0.0], [1.0, 3.0, 1.0, 2.0]])  # views masking each position, over ALL positions


def test_broadcast_weights_count_every_view_masking_each_position():
    """Every view gets the same weights F(k) = sum_j 1[k masked in view j], at every position: also where the view
    does not mask k (row 0, position 1 in view 0) and after EOS (row 1, position 3: F = 2)."""
    views = Views(MASKS, torch.zeros(3, 2, 0, dtype=torch.bool), torch.ones(3, 2), 0)
    assert torch.equal(MASKS.sum(0).float(), F_ALL)
    for weighting in ("masked_mean", "completion_mean", "rebrl"):
        w, z = token_weights(weighting, views, VALID, legacy_broadcast=True)
        assert z is None
        assert torch.equal(w, F_ALL[None].expand(3, 2, 4)), weighting
    paper, _ = token_weights("masked_mean", views, VALID)
    assert torch.equal(paper, (MASKS & VALID[None]).float())  # the switch off: the view's own valid targets


@pytest.mark.parametrize("j", [0, 1, 2])
def test_broadcast_token_mean_loss_is_the_f_weighted_mean_of_psi(j):
    """token_clip with token_mean and beta = 0 on view j: loss = -sum_{i,k} F(i,k) psi_j(i,k) / sum F, where
    psi = min(rho A, clip(rho, 1 -/+ eps) A) is computed here by hand, at every position."""
    views = Views(MASKS, torch.zeros(3, 2, 0, dtype=torch.bool), torch.ones(3, 2), 0)
    w, _ = token_weights("masked_mean", views, VALID, legacy_broadcast=True)
    g = torch.Generator().manual_seed(j)
    old = torch.randn(3, 2, 4, generator=g) - 1
    logps = old + 0.4 * torch.randn(3, 2, 4, generator=g)
    adv = torch.tensor([1.3, -0.7])
    x = ObjectiveInputs(
        logps[[j]], old[[j]], None, adv, w[[j]], None, torch.ones(1, 2), MASKS[[j]] & VALID[None], VALID, 2
    )
    out = token_clip(x, GRPOConfig(epsilon=0.2, beta=0.0, loss_type="token_mean"))
    rho = torch.exp(logps[j] - old[j])
    a = adv[:, None]
    psi = torch.minimum(rho * a, rho.clamp(0.8, 1.2) * a)
    want = -(F_ALL * psi).sum() / F_ALL.sum()
    assert out.loss.item() == pytest.approx(want.item(), abs=1e-6)
    # the paper-intent weights give another value (only the view's own valid masked tokens count)
    own = (MASKS[j] & VALID).float()
    assert abs(want.item() - (-(own * psi).sum() / own.sum()).item()) > 1e-3


def test_make_views_applies_the_broadcast_switch():
    """Through make_views (MaskGRPO record, AR-like fading): with the switch every view's weights are the count of
    views masking each position over all L positions (post-EOS included); without it, the view's valid masks."""
    n, length = 4, 6
    valid = torch.ones(n, length, dtype=torch.bool)
    valid[1, 4:] = False
    batch = Rollouts(
        torch.full((n, 3), 7), torch.full((n, length), 6), valid, torch.arange(length).repeat(n, 1), [""] * n, 0
    )
    base = dict(method="maskgrpo", num_iterations=4, gamma=0.6)
    views, w, z, inputs = make_views(MaskGRPOParams(**base, legacy_broadcast_weighting=True), batch, 3, 1, 0)
    assert z is None and inputs.shape == (4, n, 3 + length)
    f = views.masks.float().sum(0)
    assert torch.equal(w, f[None].expand(4, n, length))
    assert f[1, 4:].sum() > 0, "no post-EOS position was masked: the check of their weight is vacuous"
    views2, w2, _, _ = make_views(MaskGRPOParams(**base), batch, 3, 1, 0)
    assert torch.equal(views2.masks, views.masks)
    assert torch.equal(w2, (views.masks & valid[None]).float())


# ------------------------------------------------------------------------------------------ old_logp_mode


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_old_and_reference_log_probs_take_the_configured_mode(make_model, monkeypatch, mode):
    """old_logp_mode: the old and reference passes run with the model in eval mode (dropout off) or, as TRL, in
    train mode; the current policy's pass is always in train mode."""
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    seen = {"view_logps": [], "token_logps": []}
    real_views, real_tokens = grpo_module.view_logps, grpo_module.token_logps

    def spy_views(model, *args, **kw):
        seen["view_logps"].append(model.training)
        return real_views(model, *args, **kw)

    def spy_tokens(model, *args, **kw):
        seen["token_logps"].append(model.training)
        return real_tokens(model, *args, **kw)

    monkeypatch.setattr(grpo_module, "view_logps", spy_views)
    monkeypatch.setattr(grpo_module, "token_logps", spy_tokens)
    cfg = GRPOConfig(method="unigrpo", remasking="unigrpo", max_steps=2, num_prompts=2, num_generations=2,
                     num_iterations=2, beta=0.04, old_logp_mode=mode,
                     sampler=SamplerConfig(block_length=4, steps=4, temperature=1.0))  # fmt: skip
    train_grpo(policy, copy.deepcopy(policy), tok, task, lambda it: task.generate(2, seed=it), cfg, 0)
    assert seen["view_logps"][0] == (mode == "train")  # the old pass (the frozen reference copy: its own mode)
    assert seen["token_logps"][-2:] == [True, True]  # the update's forward passes (one view per step)
