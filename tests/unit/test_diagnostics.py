"""Credit diagnostics (ddmrl.diagnostics.token_credit, credit_by_reveal_step) on hand-made rollouts and a tiny model.

Setting: N = 4 rollouts (2 prompts x G = 2) of L = 8 tokens, all valid (no EOS), advantages (1, -0.5, 2, -1.5);
mu = 4 views; the sampler revealed c = 2 tokens per step at steps 0..3, in a different order in every rollout.
token_credit evaluates the objective at ratio 1 (policy = old = reference), where the clipped surrogate's gradient
w.r.t. log p_j(i, k) is -A_i times the token's weight and the k3 KL gradient vanishes.

RebRL token mode (lambda = t, 1/F): omega_j(k) = delta_j(k) / F(k), Z_i = (1/mu) sum_j sum_k omega_j(k), and the
loss of view j is mean_i sum_k omega_j(k) l_j(i, k) / Z_i, so C_i(k) = sum_j omega_j(k) / (N Z_i) = 1 / (N Z_i) for
every token with F(k) > 0: the same for every token of a rollout, whatever the coupling.

RebRL mode none under trajectory masks with t_j = j/mu: view j masks the c j latest-revealed tokens (realised
ratio exactly j/mu), omega_j(k) = delta_j(k) mu / j. A token revealed at sampler step s is among the c j latest iff
j >= mu - s, so C(k) is proportional to H(s) = sum_{j = mu - s}^{mu} 1/j; the token mean of H is
(1/mu) sum_s H(s) = (1/mu) sum_j j (1/j) = 1, so the relative credit is exactly H(s): for mu = 4,
1/4, 7/12, 13/12, 25/12 at s = 0..3, strictly increasing (tokens revealed late are masked in more views).

diffu-GRPO: every view masks the whole completion with weight 1 and token_mean aggregation: C_i(k) = mu / (N L).

CJ-GRPO: one view per sampler step s (S = 4), the state before it, whose targets are the c tokens of each rollout the
step revealed; token_mean over the N c targets of a view, the S views of an optimiser step averaged, mu optimiser
steps: each token is a target of exactly one view, so C_i(k) = mu / (S N c), flat over the reveal steps.

MDPO: views are the states of each rollout's K steps of largest |A_s|, spread over the mu optimiser steps (K = 2,
mu = 4: each view twice); at ratio 1 the gradient of seq_mean w.r.t. log p(k) in view v is A_{i,s} c_v(k) / (t |M|
N) with |M| the state's masked tokens and t = |M| / L, so divided by |A_{i,s}|: C_i(k) = 2 sum_v c_v(k) L /
(|M_v,i|^2 N) over the views that mask k (c the sampler's confidence).
"""

from __future__ import annotations

import pytest
import torch
from float_error import rtol_positive

from ddmrl.config import GRPOConfig, method_config
from ddmrl.diagnostics import credit_by_reveal_step, token_credit
from ddmrl.masking.views import top_steps
from ddmrl.rollout import Rollouts
from ddmrl.samplers.trajectory import Trajectory, states_from_reveal
from ddmrl.training.grpo import make_views

N, L, P, MU, C = 4, 8, 3, 4, 2
ADV = torch.tensor([1.0, -0.5, 2.0, -1.5])

# Tolerances from float32's error (tests/float_error.py, rtol_positive), not from one CPU's rounding: a credit and its
# closed form are positive, each from sums of positive terms (at most the weights of the MU views' N L tokens, here
# MU views in every method) and at most 16 products and quotients; a relative credit adds a row's mean (L terms), a
# quotient and a mean over a reveal step's tokens (at most N L). The float64 rerun of the other tests cannot apply:
# the views are drawn in float32, and float64 draws are other masks.
CREDIT_RTOL = rtol_positive(MU * N * L + 16)
RELATIVE_RTOL = rtol_positive(MU * N * L + 16 + L + 1 + N * L)


def rollouts(valid: torch.Tensor | None = None) -> Rollouts:
    g = torch.Generator().manual_seed(0)
    steps = torch.arange(L) // C  # [0, 0, 1, 1, 2, 2, 3, 3]
    reveal = torch.stack([steps[torch.randperm(L, generator=g)] for _ in range(N)])  # 2 tokens per step, shuffled
    reveal[0] = steps  # left to right in row 0
    prompt = torch.randint(5, 10, (N, P), generator=g)
    completion = torch.randint(6, 10, (N, L), generator=g)
    cm = torch.ones(N, L, dtype=torch.bool) if valid is None else valid
    return Rollouts(prompt, completion, cm, reveal, [""] * N, 0)


def config(method: str, **kw) -> GRPOConfig:
    base = dict(method=method, num_iterations=MU, num_generations=2, num_prompts=2, beta=0.04, epsilon=0.2)
    return method_config(method, base, **kw)


def credit_for(
    tok, make_model, cfg: GRPOConfig, batch: Rollouts, adv: torch.Tensor = ADV, step_adv: torch.Tensor | None = None
) -> torch.Tensor:
    model = make_model(max_positions=P + L, seed=1)
    return token_credit(model, cfg, batch, adv, 7, tok.pad_token_id, tok.mask_token_id, step_adv)


@pytest.mark.parametrize("coupling", ["independent", "nested", "trajectory"])
def test_rebrl_token_mode_gives_every_token_of_a_rollout_the_same_credit(tok, make_model, coupling):
    batch = rollouts()
    cfg = config("rebrl", rebrl_mode="token", coupling=coupling)
    views, _, z, _ = make_views(cfg, batch, 7, tok.pad_token_id, tok.mask_token_id)
    assert bool(((views.masks & batch.completion_mask[None]).sum(0) > 0).all()), "a token with F = 0: vacuous"
    credit = credit_for(tok, make_model, cfg, batch)
    assert torch.allclose(credit, (1 / (N * z))[:, None].expand(N, L), rtol=CREDIT_RTOL, atol=0)  # 1 / (N Z_i)
    frame = credit_by_reveal_step(credit, batch, ADV)
    assert frame["reveal_step"].tolist() == [0, 1, 2, 3]
    assert frame["count"].tolist() == [N * C] * MU
    assert frame["relative_credit"].tolist() == pytest.approx([1.0] * MU, rel=RELATIVE_RTOL)


def test_rebrl_none_mode_trajectory_credit_grows_with_the_reveal_step(tok, make_model):
    """Module docstring: relative credit H(s) = sum_{j = mu - s}^{mu} 1/j = 1/4, 7/12, 13/12, 25/12."""
    batch = rollouts()
    cfg = config("rebrl", rebrl_mode="none", coupling="trajectory", remasking="rebrl_linear")  # t_j = j / mu
    views, _, _, _ = make_views(cfg, batch, 7, tok.pad_token_id, tok.mask_token_id)
    assert views.masks.sum(-1)[:, 0].tolist() == [2, 4, 6, 8]  # c j latest-revealed tokens per view
    credit = credit_for(tok, make_model, cfg, batch)
    frame = credit_by_reveal_step(credit, batch, ADV)
    rel = frame["relative_credit"].tolist()
    want = [sum(1 / j for j in range(MU - s, MU + 1)) for s in range(MU)]
    assert want == pytest.approx([1 / 4, 7 / 12, 13 / 12, 25 / 12])
    assert rel == pytest.approx(want, rel=RELATIVE_RTOL)
    assert all(a < b for a, b in zip(rel, rel[1:], strict=False))


def test_diffu_grpo_credit_is_flat(tok, make_model):
    batch = rollouts()
    credit = credit_for(tok, make_model, config("diffu_grpo"), batch)
    assert torch.allclose(credit, torch.full((N, L), MU / (N * L)), rtol=CREDIT_RTOL, atol=0)
    frame = credit_by_reveal_step(credit, batch, ADV)
    assert frame["relative_credit"].tolist() == pytest.approx([1.0] * MU, rel=RELATIVE_RTOL)


def test_zero_advantage_rows_and_post_eos_tokens_get_no_credit(tok, make_model):
    """A_i = 0: credit 0 and the row is left out of the per-step table; tokens after EOS: credit 0 and not counted."""
    valid = torch.ones(N, L, dtype=torch.bool)
    valid[1, 6:] = False
    batch = rollouts(valid)
    adv = torch.tensor([1.0, -0.5, 0.0, -1.5])
    credit = credit_for(tok, make_model, config("rebrl", rebrl_mode="token", coupling="trajectory"), batch, adv)
    assert bool((credit[2] == 0).all()) and bool((credit[1, 6:] == 0).all())
    assert bool((credit[[0, 1, 3]][valid[[0, 1, 3]]] > 0).all())
    frame = credit_by_reveal_step(credit, batch, adv)
    assert int(frame["count"].sum()) == 3 * L - 2


def test_cj_grpo_credit_is_flat_each_token_a_target_once(tok, make_model):
    """Module docstring: C_i(k) = mu / (S N c), the views rebuilt from the reveal steps (no stored trajectory)."""
    batch = rollouts()
    credit = credit_for(tok, make_model, config("cj_grpo"), batch)
    assert torch.allclose(credit, torch.full((N, L), MU / (MU * N * C)), rtol=CREDIT_RTOL, atol=0)
    frame = credit_by_reveal_step(credit, batch, ADV)
    assert frame["relative_credit"].tolist() == pytest.approx([1.0] * MU, rel=RELATIVE_RTOL)


def test_mdpo_credit_is_the_confidence_over_the_squared_masked_count(tok, make_model):
    """Module docstring: C_i(k) = 2 sum_v c_v(k) L / (|M_v,i|^2 N) over the K = 2 top steps that mask k."""
    batch = rollouts()
    g = torch.Generator().manual_seed(3)
    states = states_from_reveal(batch.completion_ids, batch.reveal_step, tok.mask_token_id)  # [S, N, L]
    masked = states == tok.mask_token_id
    predictions = torch.where(masked, batch.completion_ids[None], states)
    confidence = torch.where(masked, torch.rand(states.shape, generator=g), 1.0)
    batch = batch._replace(trajectory=Trajectory(states, predictions, confidence))
    step_adv = torch.randn(N, MU, generator=g)
    credit = credit_for(tok, make_model, config("mdpo", sample_train_steps=2), batch, ADV.abs(), step_adv)
    want = torch.zeros(N, L)
    for i in range(N):
        for s in top_steps(step_adv, 2)[i].tolist():
            m = masked[s, i]
            want[i] += 2 * torch.where(m, confidence[s, i], 0.0) * L / (m.sum() ** 2 * N)
    assert torch.allclose(credit, want, rtol=CREDIT_RTOL, atol=0)
