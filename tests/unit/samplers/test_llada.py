"""LLaDA's semi-autoregressive low-confidence sampler (ddmrl.samplers.llada)."""

from __future__ import annotations

import doctest

import pytest
import torch

import ddmrl.samplers.llada as llada
from ddmrl.samplers.base import guided_logits, gumbel_argmax
from ddmrl.samplers.llada import generate, transfer_schedule

MASK = 0


class Recorder(torch.nn.Module):
    """Wraps a model and records every (input, logits) pair it produces."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, input_ids):
        out = self.model(input_ids)
        self.calls.append((input_ids.clone(), out.logits.detach().clone()))
        return out


def prompts(n: int = 3, p: int = 4, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(5, 10, (n, p), generator=g)
    x[0, 0] = 1  # a left pad
    return x


def run(model, length=8, block=4, steps=4, **kw):
    return generate(model, prompts(), length, mask_id=MASK, block_length=block, steps=steps, **kw)


def test_transfer_schedule_doctest_and_invariants():
    assert doctest.testmod(llada, verbose=False).failed == 0
    s = transfer_schedule(torch.tensor([0, 1, 5, 7, 8]), 3)
    assert s.tolist() == [[0, 0, 0], [1, 0, 0], [2, 2, 1], [3, 2, 2], [3, 3, 2]]
    assert s.sum(1).tolist() == [0, 1, 5, 7, 8]


# --------------------------------------------------------------------------- a random tiny TinyDDM


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("remasking", ["low_confidence", "random"])
def test_every_position_is_revealed_on_schedule_block_by_block(make_model, temperature, remasking):
    """L = 8, block 4, steps 4: 2 blocks x 2 steps, transfer_schedule(4, 2) = [2, 2] tokens per step; no mask left;
    every token of block 0 is revealed before any token of block 1."""
    model = make_model()
    out = run(model, temperature=temperature, remasking=remasking, generator=torch.Generator().manual_seed(0))
    assert out.completion_ids.shape == (3, 8)
    assert not bool((out.completion_ids == MASK).any())
    assert bool(((out.reveal_step >= 0) & (out.reveal_step < 4)).all())
    for s in range(4):
        assert (out.reveal_step == s).sum(1).tolist() == [2, 2, 2]
    assert bool((out.reveal_step[:, :4].max(1).values < out.reveal_step[:, 4:].min(1).values).all())
    assert out.nfe == 4


def test_a_short_last_block_and_few_steps(make_model):
    """L = 6, block 4 -> blocks of 4 and 2; steps 4 -> 2 per block: [2, 2] then [1, 1]. steps 1 < 2 blocks -> one
    step per block (d1's max(1, steps // blocks)): [4] then [2]."""
    model = make_model()
    out = run(model, length=6, block=4, steps=4)
    assert [(out.reveal_step == s).sum(1).tolist() for s in range(4)] == [[2] * 3, [2] * 3, [1] * 3, [1] * 3]
    out = run(model, length=6, block=4, steps=1)
    assert out.nfe == 2
    assert [(out.reveal_step == s).sum(1).tolist() for s in range(2)] == [[4] * 3, [2] * 3]


def test_temperature_zero_is_deterministic_low_confidence_argmax_decoding(make_model):
    """At temperature 0, each step commits, among the masked positions of the current block, the k with the highest
    max-probability, each set to the argmax token (the mask token excluded) of that step's logits."""
    rec = Recorder(make_model())
    out = run(rec, temperature=0.0)
    assert torch.equal(out.completion_ids, run(make_model(), temperature=0.0).completion_ids)
    p = prompts().shape[1]
    states = [x for x, _ in rec.calls] + [torch.cat([prompts(), out.completion_ids], 1)]
    assert len(rec.calls) == 4
    for s, (x, logits) in enumerate(rec.calls):
        logits = logits.float().clone()
        logits[..., MASK] = -torch.inf
        best = logits.argmax(-1)
        conf = torch.softmax(logits, -1).max(-1).values
        nxt = states[s + 1]
        new = (x == MASK) & (nxt != MASK)
        assert torch.equal(nxt[new], best[new])
        assert torch.equal(nxt[~new], x[~new]), "committed tokens must never change"
        block = slice(p + (s // 2) * 4, p + (s // 2 + 1) * 4)
        for i in range(3):
            still = nxt[i, block] == MASK
            if still.any():
                assert conf[i, block][new[i, block]].min() >= conf[i, block][still].max()
        assert bool((new[:, :p] == 0).all())


def test_same_generator_seed_same_samples_different_seed_different(make_model):
    model = make_model()
    a = run(model, temperature=1.0, generator=torch.Generator().manual_seed(7))
    b = run(model, temperature=1.0, generator=torch.Generator().manual_seed(7))
    c = run(model, temperature=1.0, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.reveal_step, b.reveal_step)
    assert not torch.equal(a.completion_ids, c.completion_ids)


def test_sampling_leaves_the_global_rng_alone(make_model):
    model = make_model()
    torch.manual_seed(5)
    want = torch.rand(2)
    torch.manual_seed(5)
    run(model, temperature=1.0, generator=torch.Generator().manual_seed(1))
    assert torch.equal(torch.rand(2), want)


def test_cfg_zero_is_the_plain_conditional_call_and_cfg_doubles_nfe(make_model):
    model = make_model()
    x = torch.cat([prompts(), torch.full((3, 8), MASK)], 1)
    assert torch.equal(guided_logits(model, x, 4, MASK, 0.0), model(x).logits)
    rec = Recorder(model)
    out = run(rec, cfg_scale=1.5)
    assert out.nfe == 8 and len(rec.calls) == 4
    assert rec.calls[0][0].shape == (6, 12), "conditional and unconditional rows go in one batch"
    assert bool((rec.calls[0][0][3:, :4] == MASK).all()), "the unconditional branch masks the prompt"


# --------------------------------------------------------------------------- stub models with known conditionals


def stub_table(top: list[float], tokens: list[int], p: int = 2, vocab: int = 6) -> torch.Tensor:
    """[P + L, V] logits: completion position k puts logit top[k] on tokens[k] and 0 elsewhere, and a huge logit on
    the mask token (which the sampler must never propose)."""
    table = torch.zeros(p + len(top), vocab)
    for k, (a, v) in enumerate(zip(top, tokens, strict=True)):
        table[p + k, v] = a
    table[:, MASK] = 100.0
    return table


def test_low_confidence_order_with_known_conditionals(fixed_logits_model):
    """Input-independent logits: the confidence of position k is softmax(top_k on one of 5 non-mask tokens), which
    increases with top_k. top = [1, 4, 2, 0.5]:
      one block of 4, 4 steps (one token per step): order 1, 2, 0, 3 -> reveal_step [2, 0, 1, 3];
      blocks of 2, 4 steps: block 0 first (1 then 0), then block 1 (2 then 3) -> reveal_step [1, 0, 2, 3].
    Temperature 0 gives the argmax tokens."""
    model = fixed_logits_model(stub_table([1.0, 4.0, 2.0, 0.5], [3, 5, 2, 4]))
    prompt = torch.tensor([[7, 7], [1, 7]])
    out = generate(model, prompt, 4, mask_id=MASK, block_length=4, steps=4)
    assert out.reveal_step.tolist() == [[2, 0, 1, 3]] * 2
    assert out.completion_ids.tolist() == [[3, 5, 2, 4]] * 2
    out = generate(model, prompt, 4, mask_id=MASK, block_length=2, steps=4)
    assert out.reveal_step.tolist() == [[1, 0, 2, 3]] * 2
    assert out.nfe == 4 and len(model.calls) == 8


class PromptSensitive(torch.nn.Module):
    """logits = table + bias * [first prompt position is masked]: cond - uncond = -bias at every position."""

    def __init__(self, table: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        self.table, self.bias = table, bias

    def forward(self, input_ids):
        n, t = input_ids.shape
        uncond = (input_ids[:, 0] == MASK).float()[:, None, None]
        return type("Out", (), {"logits": self.table[-t:].expand(n, t, -1) + uncond * self.bias})()


def test_cfg_formula_and_its_effect_on_decoding():
    """guided = u + (w + 1)(c - u) with c = T and u = T + b gives T - w b. With T favouring token 3 at every position
    by 1 and b = +2 on token 3 (the unconditional model likes it more), w = 1 makes token 3 lose (1 - 2 < 0)."""
    table = torch.zeros(5, 6)
    table[:, 3] = 1.0
    bias = torch.zeros(6)
    bias[3] = 2.0
    model = PromptSensitive(table, bias)
    x = torch.tensor([[7, 7, MASK, MASK, MASK]])
    assert torch.allclose(guided_logits(model, x, 2, MASK, 1.0), (table - bias)[None])
    plain = generate(model, x[:, :2], 3, mask_id=MASK, block_length=3, steps=3)
    guided = generate(model, x[:, :2], 3, mask_id=MASK, block_length=3, steps=3, cfg_scale=1.0)
    assert plain.completion_ids.tolist() == [[3, 3, 3]]
    assert not bool((guided.completion_ids == 3).any())
    assert guided.nfe == 2 * plain.nfe == 6


# --------------------------------------------------------------------------- Gumbel-max


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_gumbel_argmax_samples_from_tempered_softmax(temperature):
    """20000 draws from a 4-way categorical. Pearson chi-square with 3 dof must stay below 16.27 (p = 0.001), and
    every frequency within 0.015 of its probability (SE <= 0.0035)."""
    logits = torch.tensor([0.0, 1.0, -0.5, 0.3])
    n = 20000
    draws = gumbel_argmax(logits.expand(n, 4), temperature, torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=4).double()
    probs = torch.softmax(logits.double() / temperature, 0)
    chi2 = ((counts - n * probs) ** 2 / (n * probs)).sum().item()
    assert chi2 < 16.27, chi2
    assert (counts / n - probs).abs().max().item() < 0.015


def test_gumbel_argmax_temperature_zero_is_argmax_and_seeded():
    logits = torch.randn(50, 7, generator=torch.Generator().manual_seed(0))
    assert torch.equal(gumbel_argmax(logits, 0.0, None), logits.argmax(-1))
    a = gumbel_argmax(logits, 1.0, torch.Generator().manual_seed(3))
    assert torch.equal(a, gumbel_argmax(logits, 1.0, torch.Generator().manual_seed(3)))
    assert not torch.equal(a, gumbel_argmax(logits, 1.0, torch.Generator().manual_seed(4)))
    # -inf logits (the mask token) are never drawn
    logits[:, 2] = -torch.inf
    assert not bool((gumbel_argmax(logits.expand(20, 50, 7), 1.0, torch.Generator().manual_seed(0)) == 2).any())


def test_unknown_remasking_is_refused(make_model):
    with pytest.raises(ValueError, match="remasking"):
        run(make_model(), remasking="bogus")
