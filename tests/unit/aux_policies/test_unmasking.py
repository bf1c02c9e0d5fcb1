"""The learned unmasking policy (ddmrl.aux_policies.unmasking) and its sampler (ddmrl.samplers.unmasking): the
Bernoulli likelihood with the fallback enumerated on a tiny case, the sampler's frequencies against it, its gradient
against the closed form, the multiplicative reward, and what the sampler records."""

from __future__ import annotations

import doctest
import itertools
import math

import pytest
import torch

import ddmrl.aux_policies.unmasking as unmasking
from ddmrl.aux_policies.base import load_aux_policy, speed_reward
from ddmrl.aux_policies.unmasking import UnmaskingPolicy, bernoulli_logp, draw_unmask
from ddmrl.models.checkpoint import save_checkpoint
from ddmrl.samplers.llada import generate

LOGITS = torch.tensor([0.3, -1.2, 2.0, 0.7])  # position 3 is not selectable
SELECT = torch.tensor([True, True, True, False])


def subsets(k: int):
    """Every subset of k positions as a bool [k] tensor."""
    return [torch.tensor(bits, dtype=torch.bool) for bits in itertools.product([False, True], repeat=k)]


def by_hand(logits: list[float], action: list[bool]) -> float:
    """prod_k s_k^u_k (1 - s_k)^(1 - u_k) over the selectable positions, s = sigmoid(logit)."""
    p = 1.0
    for b, u in zip(logits, action, strict=True):
        s = 1 / (1 + math.exp(-b))
        p *= s if u else 1 - s
    return p


def action(bits: torch.Tensor) -> torch.Tensor:
    """A subset of the 3 selectable positions as an action over all 4 (position 3 never revealed)."""
    return torch.cat([bits, torch.tensor([False])])


def test_the_module_doctests_pass():
    assert doctest.testmod(unmasking).failed == 0


def test_without_fallback_the_likelihood_is_the_bernoulli_product_and_sums_to_one():
    total = 0.0
    for bits in subsets(3):
        p = bernoulli_logp(LOGITS, action(bits), SELECT, fallback=False).exp().item()
        assert p == pytest.approx(by_hand(LOGITS[:3].tolist(), bits.tolist()), rel=1e-6)
        total += p
    assert total == pytest.approx(1.0, abs=1e-6)


def test_with_fallback_nothing_selected_goes_to_the_highest_logit_and_the_total_is_one():
    """Enumerated: the empty draw is impossible, its mass moves to 'position 2 alone' (the highest logit among the
    selectable positions); every other set keeps its Bernoulli probability."""
    probs = {}
    for bits in subsets(3):
        probs[tuple(bits.tolist())] = bernoulli_logp(LOGITS, action(bits), SELECT, fallback=True).exp().item()
    s = LOGITS[:3].sigmoid().tolist()
    assert probs[(False, False, False)] == 0.0
    # P({2}) = P_B({2}) + P_B({}) = (1 - s0)(1 - s1)
    assert probs[(False, False, True)] == pytest.approx((1 - s[0]) * (1 - s[1]), rel=1e-6)
    for bits, p in probs.items():
        if sum(bits) >= 1 and bits != (False, False, True):
            assert p == pytest.approx(by_hand(LOGITS[:3].tolist(), list(bits)), rel=1e-6), bits
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-6)


def test_a_row_with_nothing_selectable_has_log_probability_zero():
    none = torch.zeros(4, dtype=torch.bool)
    assert bernoulli_logp(LOGITS, none, none, fallback=True).item() == 0.0
    assert bernoulli_logp(LOGITS, none, none, fallback=False).item() == 0.0


def test_the_sampler_draws_each_set_with_the_enumerated_frequency():
    """200 000 draws of draw_unmask (fixed seed) against the enumerated likelihood, with and without fallback."""
    n = 200_000
    logits, select = LOGITS.expand(n, 4), SELECT.expand(n, 4)
    g = torch.Generator().manual_seed(0)
    for fallback in (False, True):
        drawn = draw_unmask(logits, select, fallback, torch.rand(n, 4, dtype=torch.float64, generator=g))
        assert not drawn[:, 3].any()
        codes = drawn[:, :3].long() @ torch.tensor([4, 2, 1])
        freq = torch.bincount(codes, minlength=8).double() / n
        for bits in subsets(3):
            code = int(bits.long() @ torch.tensor([4, 2, 1]))
            p = bernoulli_logp(LOGITS, action(bits), SELECT, fallback).exp().item()
            assert freq[code].item() == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / n) + 1e-9), (fallback, bits)


@pytest.mark.parametrize("fallback", [False, True])
def test_the_gradient_is_the_closed_form_score(fallback):
    """d log pi / d b_k = u_k - s_k on the selectable positions (0 elsewhere); for the fallback's lone k*,
    P = prod_{k != k*} (1 - s_k): d/d b_k = -s_k for k != k* and 0 for k*."""
    s = LOGITS.sigmoid()
    for bits in subsets(3):
        if fallback and not bits.any():
            continue
        b = LOGITS.clone().requires_grad_(True)
        bernoulli_logp(b, action(bits), SELECT, fallback).backward()
        u = action(bits).float()
        expected = (u - s) * SELECT
        if fallback and bits.tolist() == [False, False, True]:
            expected = -s * SELECT
            expected[2] = 0.0
        assert torch.allclose(b.grad, expected, atol=1e-6), bits


def test_speed_reward_by_hand():
    r = torch.tensor([1.0, 1.0, 0.5, 0.0, 1.0])
    steps = torch.tensor([1, 10, 5, 3, 25])  # 25 > L: clamped to L
    got = speed_reward(r, steps, 20, 0.3)
    expected = [1.0, (11 / 20) ** 0.3, 0.5 * (16 / 20) ** 0.3, 0.0, (1 / 20) ** 0.3]
    assert got.tolist() == pytest.approx(expected, rel=1e-6)
    assert torch.equal(speed_reward(r, steps, 20, 0.0), r)  # alpha 0: the task reward alone


def policy(seed: int = 0, **kw) -> UnmaskingPolicy:
    torch.manual_seed(seed)
    return UnmaskingPolicy(hidden_size=16, num_heads=2, intermediate_size=32, time_embed_dim=8, **kw)


def test_the_policy_starts_as_plain_layer_norms_and_at_init_bias():
    """Smart init: the AdaLN modulation is zero (the conditioning changes nothing yet) and the head's bias is the
    initial logit; every output is finite and has one logit per position."""
    p = policy(init_bias=-2.0)
    assert torch.count_nonzero(p.block.modulation.weight) == 0 and p.head.bias.item() == -2.0
    masked = torch.tensor([[True, False, True, True]])
    out = p.logits(masked, torch.tensor([[0.9, 1.0, 0.2, 0.5]]), torch.tensor([0.25]))
    assert out.shape == (1, 4) and torch.isfinite(out).all()
    # the mask indicator and t act only through the (zero) modulation at init
    again = p.logits(~masked, torch.tensor([[0.9, 1.0, 0.2, 0.5]]), torch.tensor([0.75]))
    assert torch.allclose(out, again)


def test_policy_and_sampler_on_a_tiny_model(tok, make_model, tmp_path):
    """The llada sampler with a policy: every block is completed (the fallback), each active step reveals at least
    one masked position of its own block, a row's NFE is its active steps, and the recorded log-probs are what the
    policy gives the recorded observations (so GRPO's first ratio is 1); then the policy saved with the model loads
    back identical."""
    model = make_model(max_positions=16)
    p = policy(init_bias=0.0, temperature=0.7)
    prompt = torch.tensor([[5, 6, 7], [5, 8, 9], [6, 6, 6]])
    out = generate(model, prompt, 8, mask_id=tok.mask_token_id, block_length=4, steps=99, aux_policy=p.train(),
                   generator=torch.Generator().manual_seed(1))  # fmt: skip
    trace = out.aux
    assert not (out.completion_ids == tok.mask_token_id).any()
    masked_obs, conf, t, select, temp = trace.obs
    n, s, length = masked_obs.shape
    assert (n, length) == (3, 8) and torch.all(temp == 0.7)
    assert torch.equal(trace.active, select.any(-1))
    assert torch.equal(trace.nfe, trace.active.sum(1)) and out.nfe == s
    assert bool((trace.actions.sum(-1)[trace.active] >= 1).all()) and not trace.actions[~trace.active].any()
    assert bool((trace.actions <= select).all())  # only selectable (masked, in the block) positions are revealed
    for i in range(n):
        steps = out.reveal_step[i]
        for block in range(2):
            revealed = steps[4 * block : 4 * block + 4]
            assert (revealed >= 0).all()
        assert steps[:4].max() < steps[4:].min()  # blocks left to right
        # t is the row's own steps so far over L
        active = trace.active[i].nonzero().flatten()
        assert t[i, active].tolist() == pytest.approx([j / 8 for j in range(len(active))])
    recomputed = p(trace.obs, trace.actions)
    assert torch.allclose(recomputed, trace.logp, atol=1e-5)
    assert (trace.logp[~trace.active] == 0).all()

    save_checkpoint(model, tok, tmp_path / "m", aux_policy=p)
    loaded = load_aux_policy(tmp_path / "m")
    assert isinstance(loaded, UnmaskingPolicy) and not loaded.training and loaded.config == p.config
    p.eval()
    first = (masked_obs[:, 0], conf[:, 0], t[:, 0])
    assert torch.equal(loaded.logits(*first), p.logits(*first))
    assert load_aux_policy(tmp_path) is None  # a directory without one


def test_evaluation_mode_uses_its_temperature_and_always_falls_back(tok, make_model):
    p = policy(fallback=False, temperature=1.0, eval_temperature=0.5)
    assert p.train().temperature() == 1.0 and not p.uses_fallback()
    assert p.eval().temperature() == 0.5 and p.uses_fallback()
    model = make_model(max_positions=16)
    out = generate(model, torch.tensor([[5, 6, 7]]), 8, mask_id=tok.mask_token_id, block_length=4, steps=8,
                   aux_policy=p, generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert torch.all(out.aux.obs[4] == 0.5) and not (out.completion_ids == tok.mask_token_id).any()


def test_without_fallback_an_empty_draw_wastes_the_step_and_a_block_may_stay_masked(tok, make_model):
    """The released code's training mode: at a very low initial logit almost nothing is drawn; a block gets at most
    block_length steps, so positions can stay masked; their log-probs are the plain Bernoulli ones."""
    p = policy(fallback=False, init_bias=-8.0).train()
    model = make_model(max_positions=16)
    out = generate(model, torch.tensor([[5, 6, 7]]), 8, mask_id=tok.mask_token_id, block_length=4, steps=8,
                   aux_policy=p, generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert out.aux.active.sum() == 8  # 4 steps per block, all wasted or nearly so
    assert (out.completion_ids == tok.mask_token_id).any()
    assert torch.allclose(p(out.aux.obs, out.aux.actions), out.aux.logp, atol=1e-5)
