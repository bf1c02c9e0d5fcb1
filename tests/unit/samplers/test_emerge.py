"""MaskGRPO's emerge sampler: MDLM-style ancestral sampling (ddmrl.samplers.emerge)."""

from __future__ import annotations

import doctest
import math

import pytest
import torch

import ddmrl.samplers.emerge as emerge
from ddmrl.samplers.emerge import generate, reveal_probability

MASK = 0


def prompts(n: int = 3, p: int = 4, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(5, 10, (n, p), generator=g)
    x[0, 0] = 1  # a left pad
    return x


def seed(s: int) -> torch.Generator:
    return torch.Generator().manual_seed(s)


def constant_table(logits: list[float], rows: int) -> torch.Tensor:
    """[rows, V]: the same logits at every position."""
    return torch.tensor(logits).expand(rows, -1).clone()


def test_doctests():
    assert doctest.testmod(emerge, verbose=False).failed == 0


def test_reveal_probability_is_the_mdlm_posterior_weight():
    """(alpha_s - alpha_t) / (1 - alpha_t) with alpha = 1 - k is (k_s - k_{s+1}) / k_s; cosine k = cos(pi tau / 2)."""
    k = [math.cos(math.pi / 2 * s / 4) for s in range(4)] + [0.0]
    for s in range(3):
        alpha_t, alpha_s = 1 - k[s], 1 - k[s + 1]
        assert reveal_probability("cosine", s, 4) == pytest.approx((alpha_s - alpha_t) / (1 - alpha_t))
    assert reveal_probability("cosine", 0, 4) == pytest.approx(1 - math.cos(math.pi / 8))
    assert reveal_probability("cosine", 3, 4) == 1.0
    with pytest.raises(ValueError, match="schedule"):
        generate(None, prompts(), 4, mask_id=MASK, steps=2, schedule="sigmoid")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_position_is_revealed_once_and_never_changes(make_model, temperature):
    model = make_model()
    calls = []
    orig = model.forward

    def forward(input_ids, *a, **k):
        calls.append(input_ids.clone())
        return orig(input_ids, *a, **k)

    model.forward = forward
    out = generate(model, prompts(), 8, mask_id=MASK, steps=4, temperature=temperature, generator=seed(0))
    assert out.completion_ids.shape == (3, 8)
    assert not bool((out.completion_ids == MASK).any())
    assert bool(((out.reveal_step >= 0) & (out.reveal_step < 4)).all())
    assert out.nfe == len(calls) == int(out.reveal_step.max()) + 1
    states = calls + [torch.cat([prompts(), out.completion_ids], 1)]
    for before, after in zip(states, states[1:], strict=False):
        assert torch.equal(after[:, :4], prompts())
        known = before != MASK
        assert torch.equal(after[known], before[known])
    for s, state in enumerate(states[1:]):
        assert torch.equal(state[:, 4:] != MASK, out.reveal_step <= s)


def test_mask_token_never_drawn(fixed_logits_model):
    """Logit 100 on the mask token everywhere: a sampler that drew it would leave masks behind."""
    model = fixed_logits_model(constant_table([100.0, 0.0, 1.0, 0.5, -1.0, 0.2], 12))
    out = generate(model, prompts(), 8, mask_id=MASK, steps=3, generator=seed(0))
    assert not bool((out.completion_ids == MASK).any())
    assert bool(((out.reveal_step >= 0) & (out.reveal_step < 3)).all())


def test_stops_early_when_everything_is_revealed(fixed_logits_model):
    """L = 1, linear, T = 4: reveal probabilities 1/4, 1/3, 1/2, 1. Rows revealed before the last step stop the loop:
    nfe = (last reveal step) + 1."""
    model = fixed_logits_model(constant_table([0.0, 1.0, 2.0], 5))
    seen = set()
    for s in range(12):
        out = generate(model, torch.full((1, 4), 7), 1, mask_id=MASK, steps=4, schedule="linear", generator=seed(s))
        assert out.nfe == int(out.reveal_step.max()) + 1
        seen.add(out.nfe)
    assert len(seen) > 1


@pytest.mark.parametrize(("schedule", "steps"), [("cosine", 4), ("linear", 4), ("cosine", 12)])
def test_per_step_reveal_frequency_matches_the_ancestral_posterior(fixed_logits_model, schedule, steps):
    """3000 rows x 8 positions. At step s < T - 1 the fraction of still-masked positions that get revealed must be
    within 4 binomial standard errors sqrt(p (1 - p) / n_masked) of p = (k_s - k_{s+1}) / k_s; the last step reveals
    all that remain."""
    model = fixed_logits_model(constant_table([0.0, 1.0, 2.0, 0.5], 12))
    out = generate(model, torch.full((3000, 4), 7), 8, mask_id=MASK, steps=steps, schedule=schedule, generator=seed(0))
    for s in range(steps):
        at_risk = int((out.reveal_step >= s).sum())
        revealed = int((out.reveal_step == s).sum())
        p = reveal_probability(schedule, s, steps)
        if s == steps - 1:
            assert revealed == at_risk
            continue
        se = math.sqrt(p * (1 - p) / at_risk)
        assert abs(revealed / at_risk - p) < 4 * se, (s, revealed / at_risk, p, se)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_revealed_tokens_follow_the_tempered_softmax(fixed_logits_model, temperature):
    """Fixed logits [mask 100, 0, 1, -0.5, 0.3]: every token, whatever its step, is a draw from
    softmax([0, 1, -0.5, 0.3] / temperature) over the 4 non-mask tokens. 2000 x 8 draws in all, and the ones revealed
    at step 0 (linear, T = 2: half of them): Pearson chi-square (3 dof) below 16.27 (p = 0.001) and every frequency
    within 0.02 of its probability (SE <= 0.0056 at step 0)."""
    logits = [100.0, 0.0, 1.0, -0.5, 0.3]
    model = fixed_logits_model(constant_table(logits, 12))
    out = generate(
        model,
        torch.full((2000, 4), 7),
        8,
        mask_id=MASK,
        steps=2,
        temperature=temperature,
        schedule="linear",
        generator=seed(0),
    )
    probs = torch.softmax(torch.tensor(logits[1:], dtype=torch.float64) / temperature, 0)
    for tokens in [out.completion_ids, out.completion_ids[out.reveal_step == 0]]:
        counts = torch.bincount(tokens.flatten(), minlength=5).double()
        assert counts[MASK] == 0
        n = counts.sum()
        expected = n * probs
        chi2 = ((counts[1:] - expected) ** 2 / expected).sum().item()
        assert chi2 < 16.27, chi2
        assert (counts[1:] / n - probs).abs().max().item() < 0.02


def test_temperature_zero_draws_the_argmax(fixed_logits_model):
    table = torch.zeros(12, 6)
    table[4:, 3] = 1.0
    table[[5, 9], 2] = 2.0
    table[:, MASK] = 100.0
    out = generate(fixed_logits_model(table), prompts(), 8, mask_id=MASK, steps=4, temperature=0.0, generator=seed(0))
    assert out.completion_ids.tolist() == [[3, 2, 3, 3, 3, 2, 3, 3]] * 3


def test_same_generator_seed_same_samples_different_seed_different(make_model):
    model = make_model()
    a = generate(model, prompts(), 8, mask_id=MASK, steps=4, generator=seed(7))
    b = generate(model, prompts(), 8, mask_id=MASK, steps=4, generator=seed(7))
    c = generate(model, prompts(), 8, mask_id=MASK, steps=4, generator=seed(8))
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.reveal_step, b.reveal_step)
    assert not torch.equal(a.completion_ids, c.completion_ids)


def test_sampling_leaves_the_global_rng_alone(make_model):
    model = make_model()
    torch.manual_seed(5)
    want = torch.rand(2)
    torch.manual_seed(5)
    generate(model, prompts(), 8, mask_id=MASK, steps=4, generator=seed(1))
    assert torch.equal(torch.rand(2), want)


def test_allowed_tokens_are_respected(make_model, tok):
    model = make_model()
    allowed = torch.zeros(len(tok), dtype=torch.bool)
    allowed[[6, 7]] = True
    out = generate(model, prompts(), 8, mask_id=MASK, steps=4, allowed_tokens=allowed, generator=seed(0))
    assert set(out.completion_ids.unique().tolist()) <= {6, 7}
    allowed[MASK] = True  # allowing the mask token explicitly still never draws it
    out = generate(model, prompts(), 8, mask_id=MASK, steps=4, allowed_tokens=allowed, generator=seed(0))
    assert set(out.completion_ids.unique().tolist()) <= {6, 7}
    only_mask = torch.zeros(len(tok), dtype=torch.bool)
    only_mask[MASK] = True
    with pytest.raises(ValueError, match="allowed_tokens"):
        generate(model, prompts(), 8, mask_id=MASK, steps=4, allowed_tokens=only_mask)


class PromptSensitive(torch.nn.Module):
    """logits = table + bias * [first prompt position is masked]: cond = table, uncond = table + bias."""

    def __init__(self, table: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        self.table, self.bias = table, bias
        self.calls: list[torch.Tensor] = []

    def forward(self, input_ids):
        self.calls.append(input_ids.clone())
        n, t = input_ids.shape
        uncond = (input_ids[:, 0] == MASK).float()[:, None, None]
        return type("Out", (), {"logits": self.table[-t:].expand(n, t, -1) + uncond * self.bias})()


def test_cfg_is_the_muse_formula_and_weight_zero_is_the_conditional_sampler(fixed_logits_model):
    """(1 + w) c - w u with c = T and u = T + b is T - w b. With the same seed the guided sampler must equal the plain
    sampler run on a model whose logits are T - w b; with w = 0, on T itself (one pass per step, not two)."""
    g = torch.Generator().manual_seed(0)
    table = torch.randint(-3, 4, (12, 6), generator=g).double()
    bias = torch.randint(-2, 3, (6,), generator=g).double()
    for w in [0.0, 1.0, 2.5]:
        model = PromptSensitive(table, bias)
        guided = generate(model, prompts(), 8, mask_id=MASK, steps=4, cfg_scale=w, generator=seed(3))
        plain = generate(fixed_logits_model(table - w * bias), prompts(), 8, mask_id=MASK, steps=4, generator=seed(3))
        assert torch.equal(guided.completion_ids, plain.completion_ids)
        assert torch.equal(guided.reveal_step, plain.reveal_step)
        assert guided.nfe == plain.nfe * (2 if w else 1) == len(model.calls) * (2 if w else 1)
        if w:
            x = model.calls[1]  # conditional rows then unconditional rows, one batch
            assert x.shape == (6, 12)
            assert bool((x[3:, :4] == MASK).all()), "the unconditional branch masks the prompt"
            assert torch.equal(x[3:, 4:], x[:3, 4:]), "... and sees the current completion canvas"
            assert torch.equal(x[:3, :4], prompts())
