"""MaskGIT / MMaDA cosine confidence sampler (ddmrl.samplers.maskgit)."""

from __future__ import annotations

import doctest
import math

import pytest
import torch

import ddmrl.samplers.maskgit as maskgit
from ddmrl.samplers.maskgit import generate, keep_masked, mask_schedule, noise_scales

MASK = 0


def prompts(n: int = 3, p: int = 4, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(5, 10, (n, p), generator=g)
    x[0, 0] = 1  # a left pad
    return x


def seed(s: int) -> torch.Generator:
    return torch.Generator().manual_seed(s)


def stub_table(top: list[float], tokens: list[int], p: int = 4, vocab: int = 6) -> torch.Tensor:
    """[P + L, V] logits: completion position k puts logit top[k] on tokens[k] and 0 elsewhere, and a huge logit on
    the mask token (which the sampler must never propose)."""
    table = torch.zeros(p + len(top), vocab)
    for k, (a, v) in enumerate(zip(top, tokens, strict=True)):
        table[p + k, v] = a
    table[:, MASK] = 100.0
    return table


def masked_after_each_step(reveal_step: torch.Tensor, steps: int) -> list[list[int]]:
    """[N, L] reveal steps -> per step s, per row, the number of positions still masked after step s."""
    length = reveal_step.shape[1]
    return [(length - (reveal_step <= s).sum(1)).tolist() for s in range(steps)]


def test_doctests():
    assert doctest.testmod(maskgit, verbose=False).failed == 0


def test_mask_schedule_values_and_unknown_name():
    assert mask_schedule("cosine", 0.0) == 1.0 and mask_schedule("cosine", 1.0) == 0.0
    assert mask_schedule("cosine", 0.5) == pytest.approx(math.sqrt(0.5))
    assert mask_schedule("linear", 0.3) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="schedule"):
        mask_schedule("sigmoid", 0.5)
    with pytest.raises(ValueError, match="schedule"):
        generate(None, prompts(), 4, mask_id=MASK, steps=2, schedule="sigmoid")


@pytest.mark.parametrize(
    ("length", "steps", "schedule", "want"),
    [
        # floor(16 cos(pi/2 r)), r = 1/4, 2/4, 3/4: 14.78, 11.31, 6.12; 0 at the last step
        (16, 4, "cosine", [14, 11, 6, 0]),
        # floor(4 cos(pi/2 r)), r = s/8: 3, 3, 3, 2, 2, 1, 0 clamped to [1, #masked - 1]: 3, 2, 1, 1, 1, 1, 1; then 0
        (4, 8, "cosine", [3, 2, 1, 1, 1, 1, 1, 0]),
        # floor(20 (1 - r)), r = s/10: 18, 16, ..., 2 (20 * (1 - 0.9) is 1.9999999999999996 in floating point)
        (20, 10, "linear", [18, 16, 14, 12, 10, 8, 6, 4, 2, 0]),
    ],
)
def test_number_still_masked_after_each_step_follows_the_schedule(make_model, length, steps, schedule, want):
    """The count still masked after step s is floor(L m((s + 1) / T)), clamped to [1, #masked - 1] before the last
    step, whatever the noise and the tokens drawn; every position gets a reveal step in [0, T - 1]."""
    model = make_model(max_positions=32)
    for t, nt in [(1.0, 1.0), (0.0, 0.0)]:
        out = generate(
            model,
            prompts(),
            length,
            mask_id=MASK,
            steps=steps,
            temperature=t,
            noise_temperature=nt,
            schedule=schedule,
            generator=seed(0),
        )
        assert masked_after_each_step(out.reveal_step, steps) == [[w] * 3 for w in want]
        assert bool(((out.reveal_step >= 0) & (out.reveal_step < steps)).all())
        assert not bool((out.completion_ids == MASK).any())
        assert out.nfe == steps


def test_keep_masked_clamps():
    n = torch.tensor([10, 3, 1])
    assert keep_masked(n, 10, 0, 5, "cosine").tolist() == [9, 2, 1]  # floor(10 cos(pi/10)) = 9
    assert keep_masked(n, 10, 4, 5, "cosine").tolist() == [0, 0, 0]  # last step reveals everything
    assert keep_masked(n, 10, 3, 5, "linear").tolist() == [2, 2, 1]  # floor(10 * 0.2) = 2


def test_mask_token_never_proposed_and_no_mask_left(fixed_logits_model):
    """The stub puts logit 100 on the mask token everywhere: a sampler that proposed it would leave masks behind."""
    model = fixed_logits_model(stub_table([1.0, 4.0, 2.0, 0.5], [3, 5, 2, 4]))
    out = generate(model, prompts(), 4, mask_id=MASK, steps=3, generator=seed(0))
    assert not bool((out.completion_ids == MASK).any())
    assert bool(((out.reveal_step >= 0) & (out.reveal_step < 3)).all())
    assert out.nfe == 3 and len(model.calls) == 3


def test_revealed_tokens_are_frozen_and_the_prompt_never_changes(make_model):
    model = make_model()
    calls = []
    orig = model.forward

    def forward(input_ids, *a, **k):
        calls.append(input_ids.clone())
        return orig(input_ids, *a, **k)

    model.forward = forward
    out = generate(model, prompts(), 8, mask_id=MASK, steps=4, generator=seed(1))
    states = calls + [torch.cat([prompts(), out.completion_ids], 1)]
    for before, after in zip(states, states[1:], strict=False):
        assert torch.equal(after[:, :4], prompts())
        known = before != MASK
        assert torch.equal(after[known], before[known])
    for s, state in enumerate(states[1:]):  # the state after step s has exactly the positions revealed by step s
        assert torch.equal(state[:, 4:] != MASK, out.reveal_step <= s)


def test_greedy_noiseless_decoding_matches_a_hand_computation(fixed_logits_model):
    """Input-independent logits: the confidence of position k is softmax over the 5 non-mask tokens with logit top[k]
    on one of them, increasing in top[k]. L = 6, T = 3, cosine: still masked after each step floor(6 cos(pi/6)) = 5,
    floor(6 cos(pi/3)) = 3, 0, i.e. reveal 1, 2, 3 tokens. top = [1, 4, 2, 0.5, 3, 1.5]: confidence order 1, 4, 2, 5,
    0, 3 -> step 0 reveals position 1, step 1 positions 4 and 2, step 2 the rest. Temperature 0 -> argmax tokens.
    Deterministic: the generator seed does not matter."""
    model = fixed_logits_model(stub_table([1.0, 4.0, 2.0, 0.5, 3.0, 1.5], [3, 5, 2, 4, 1, 3]))
    for s in [0, 1]:
        out = generate(
            model, prompts(), 6, mask_id=MASK, steps=3, temperature=0.0, noise_temperature=0.0, generator=seed(s)
        )
        assert out.reveal_step.tolist() == [[2, 0, 1, 2, 1, 2]] * 3
        assert out.completion_ids.tolist() == [[3, 5, 2, 4, 1, 3]] * 3


def test_noise_scale_annealing_and_the_legacy_compounding():
    """MaskGIT: tau (1 - r_s); MMaDA's in-place update compounds: tau prod_k (1 - r_k), r_s = (s + 1) / T."""
    assert noise_scales(2.0, 5) == pytest.approx([1.6, 1.2, 0.8, 0.4, 0.0])
    want = [2.0 * math.prod(1 - (k + 1) / 5 for k in range(s + 1)) for s in range(5)]
    assert noise_scales(2.0, 5, legacy_compound_noise=True) == pytest.approx(want)
    assert want[1] != pytest.approx(1.2)
    assert noise_scales(0.0, 3, legacy_compound_noise=True) == [0.0, 0.0, 0.0]


def test_confidence_noise_has_the_annealed_gumbel_scale(fixed_logits_model):
    """L = 2, T = 2: step 0 reveals one position (floor(2 cos(pi/4)) = 1 stays masked). With temperature 0 the drawn
    tokens are fixed, with log-confidences a (top logit 2 over 5 tokens) and b = log(1/5). The less confident position
    goes first iff b + tau G2 > a + tau G1, i.e. a logistic variable exceeds (a - b) / tau: probability
    sigmoid(-(a - b) / tau) with tau = noise_temperature * (1 - 1/2) = 1: 0.236 (tau = 2 would give 0.357, tau = 0.5
    0.087). 4000 rows; tolerance 4 binomial standard errors (0.027)."""
    model = fixed_logits_model(stub_table([2.0, 0.0], [3, 1]))
    n = 4000
    a = 2.0 - math.log(math.exp(2.0) + 4)
    b = math.log(1 / 5)
    want = 1 / (1 + math.exp((a - b) / 1.0))
    for legacy in [False, True]:  # the first step's scale is the same either way
        out = generate(
            model,
            torch.full((n, 4), 7),
            2,
            mask_id=MASK,
            steps=2,
            temperature=0.0,
            noise_temperature=2.0,
            legacy_compound_noise=legacy,
            generator=seed(0),
        )
        freq = (out.reveal_step[:, 1] == 0).double().mean().item()
        se = math.sqrt(want * (1 - want) / n)
        assert abs(freq - want) < 4 * se, (freq, want)


def test_legacy_compounding_changes_later_steps_only(fixed_logits_model):
    """Same seed, same draws: the step-0 reveals agree (tau_0 is the same), later ones differ (tau_1 0.5 vs 0.375 x
    the noise temperature). Without noise the switch changes nothing."""
    model = fixed_logits_model(stub_table([1.0, 0.8, 0.6, 0.4, 0.2, 0.0, 0.1, 0.3], [1, 2, 3, 4, 5, 1, 2, 3]))
    kw = dict(mask_id=MASK, steps=4, temperature=0.0, noise_temperature=3.0)
    a = generate(model, torch.full((32, 4), 7), 8, generator=seed(0), **kw)
    b = generate(model, torch.full((32, 4), 7), 8, generator=seed(0), legacy_compound_noise=True, **kw)
    assert torch.equal(a.reveal_step == 0, b.reveal_step == 0)
    assert not torch.equal(a.reveal_step, b.reveal_step)
    kw["noise_temperature"] = 0.0
    a = generate(model, torch.full((2, 4), 7), 8, generator=seed(0), **kw)
    b = generate(model, torch.full((2, 4), 7), 8, generator=seed(0), legacy_compound_noise=True, **kw)
    assert torch.equal(a.reveal_step, b.reveal_step)


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
    assert not bool((out.completion_ids == MASK).any())
    allowed[MASK] = True  # allowing the mask token explicitly still never proposes it
    out = generate(model, prompts(), 8, mask_id=MASK, steps=4, allowed_tokens=allowed, generator=seed(0))
    assert set(out.completion_ids.unique().tolist()) <= {6, 7}
    only_mask = torch.zeros(len(tok), dtype=torch.bool)
    only_mask[MASK] = True
    with pytest.raises(ValueError, match="allowed_tokens"):
        generate(model, prompts(), 8, mask_id=MASK, steps=4, allowed_tokens=only_mask)
    with pytest.raises(ValueError, match="allowed_tokens"):
        generate(model, prompts(), 8, mask_id=MASK, steps=4, allowed_tokens=torch.ones(3, dtype=torch.bool))


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
    table = torch.randint(-3, 4, (10, 6), generator=g).double()
    bias = torch.randint(-2, 3, (6,), generator=g).double()
    kw = dict(mask_id=MASK, steps=3, temperature=1.0, noise_temperature=1.0)
    for w in [0.0, 1.0, 2.5]:
        model = PromptSensitive(table, bias)
        guided = generate(model, prompts(), 6, cfg_scale=w, generator=seed(3), **kw)
        plain = generate(fixed_logits_model(table - w * bias), prompts(), 6, generator=seed(3), **kw)
        assert torch.equal(guided.completion_ids, plain.completion_ids)
        assert torch.equal(guided.reveal_step, plain.reveal_step)
        assert guided.nfe == (6 if w else 3) == len(model.calls) * (2 if w else 1)
        if w:
            x = model.calls[1]  # conditional rows then unconditional rows, one batch
            assert x.shape == (6, 10)
            assert bool((x[3:, :4] == MASK).all()), "the unconditional branch masks the prompt"
            assert torch.equal(x[3:, 4:], x[:3, 4:]), "... and sees the current completion canvas"
            assert torch.equal(x[:3, :4], prompts())


# --------------------------------------------------------------------------- parallel decoding (Fast-dLLM's rules)


@torch.no_grad()
def reference_generate(model, prompt_ids, length, *, mask_id, steps, temperature, noise_temperature, generator):
    """``generate`` at commit 9591c2d (before the parallel rules; cosine schedule, no CFG), transcribed."""
    p = prompt_ids.shape[1]
    x = torch.cat([prompt_ids, torch.full((prompt_ids.shape[0], length), mask_id)], 1)
    reveal = torch.full((prompt_ids.shape[0], length), -1)
    for s in range(steps):
        logits = model(x).logits[:, p:].double()
        logits[..., mask_id] = -torch.inf
        u = torch.rand(logits.shape, dtype=torch.float64, generator=generator).clamp_min(1e-300)
        proposal = (logits / temperature - torch.log(-torch.log(u))).argmax(-1)
        log_conf = torch.log_softmax(logits, -1).gather(-1, proposal[..., None]).squeeze(-1)
        masked = x[:, p:] == mask_id
        drawn = torch.where(masked, proposal, x[:, p:])
        tau = noise_temperature * (1 - (s + 1) / steps)
        if tau > 0:
            u = torch.rand(log_conf.shape, dtype=torch.float64, generator=generator).clamp_min(1e-300)
            log_conf = log_conf - tau * torch.log(-torch.log(u))
        rank = log_conf.masked_fill(~masked, torch.inf).argsort(dim=1, stable=True).argsort(dim=1)
        if s == steps - 1:
            keep = torch.zeros(x.shape[0], dtype=torch.long)
        else:
            target = math.floor(length * math.cos(math.pi / 2 * (s + 1) / steps) + 1e-9)
            keep = (masked.sum(1) - 1).clamp(max=target).clamp(min=1)
        remask = rank < keep[:, None]
        reveal[masked & ~remask] = s
        x[:, p:] = drawn.masked_fill(remask, mask_id)
    return x[:, p:], reveal


def test_parallel_none_is_maskgit_before_the_rules_bit_for_bit(make_model):
    model = make_model()
    for s in (0, 1):
        ids, reveal = reference_generate(
            model, prompts(), 8, mask_id=MASK, steps=4, temperature=1.0, noise_temperature=1.0, generator=seed(s)
        )
        out = generate(model, prompts(), 8, mask_id=MASK, steps=4, parallel="none", generator=seed(s))
        assert torch.equal(out.completion_ids, ids) and torch.equal(out.reveal_step, reveal) and out.nfe == 4


def test_threshold_reveals_confident_tokens_early_and_stops_when_done(fixed_logits_model):
    """L = 6, 6 steps, cosine: the schedule alone keeps 5, 5, 4, 3, 1, 0 masked. Confidence e^8 / (e^8 + 4) = 0.9987
    (5 proposable tokens) at positions 0-3, 1/5 at positions 4-5. With threshold 0.9, step 0 reveals positions 0-3;
    the other two follow MaskGIT's schedule, which keeps one masked until the last step (MMaDA's clamp): 6 passes.
    With every position confident, step 0 reveals everything and sampling stops: 1 pass."""
    table = stub_table([8.0, 8.0, 8.0, 8.0, 0.0, 0.0], [1, 2, 3, 4, 5, 5])
    table[:, MASK] = 0.0
    kw = dict(mask_id=MASK, steps=6, temperature=0.0, noise_temperature=0.0)
    plain = generate(fixed_logits_model(table), prompts(), 6, **kw)
    assert plain.nfe == 6 and masked_after_each_step(plain.reveal_step, 6)[0] == [5, 5, 5]
    out = generate(fixed_logits_model(table), prompts(), 6, parallel="threshold", **kw)
    assert out.reveal_step[:, :4].tolist() == [[0] * 4] * 3 and out.nfe == 6
    assert sorted(out.reveal_step[0, 4:].tolist()) == [1, 5]
    assert out.completion_ids[:, :4].tolist() == [[1, 2, 3, 4]] * 3
    confident = fixed_logits_model(stub_table([8.0] * 6, [1, 2, 3, 4, 5, 5]).index_fill(1, torch.tensor([MASK]), 0))
    out = generate(confident, prompts(), 6, parallel="threshold", **kw)
    assert out.nfe == 1 == len(confident.calls) and out.reveal_step.tolist() == [[0] * 6] * 3


def test_parallel_rules_never_reveal_less_than_the_schedule(make_model):
    model = make_model()
    plain = generate(model, prompts(), 8, mask_id=MASK, steps=6, generator=seed(0))
    for rule in ("threshold", "factor"):
        out = generate(model, prompts(), 8, mask_id=MASK, steps=6, parallel=rule, threshold=0.2, generator=seed(0))
        assert out.nfe <= plain.nfe and not bool((out.completion_ids == MASK).any())
        schedule = masked_after_each_step(plain.reveal_step, 6)
        for s, row in enumerate(masked_after_each_step(out.reveal_step, out.nfe)):  # never more masked than plain
            assert all(m <= keep for m, keep in zip(row, schedule[s], strict=True))
    with pytest.raises(ValueError, match="unknown parallel rule"):
        generate(model, prompts(), 8, mask_id=MASK, steps=6, parallel="eager")
