"""Fast-dLLM's options of the LLaDA sampler (ddmrl.samplers.llada): KV cache and parallel decoding.

What GRPO needs from every option: reveal steps and NFE recorded per token, seeds that reproduce a rollout exactly,
and, with every option off, today's sampler bit for bit (checked against a transcription of the sampler as it was
before the options existed, commit 9591c2d, whose confidence is a float32 softmax: ``confidence_dtype: float32``).
"""

from __future__ import annotations

import pytest
import torch

from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM
from ddmrl.samplers.llada import generate

MASK = 0


# --------------------------------------------------------------------------- the sampler before the options


def _uniform(shape, device, gen):
    where = gen.device if gen is not None else device
    return torch.rand(shape, dtype=torch.float64, device=where, generator=gen).to(device)


def _gumbel_argmax(logits, temperature, gen):
    if temperature == 0:
        return logits.argmax(-1)
    u = _uniform(logits.shape, logits.device, gen).clamp_min(1e-300)
    return (logits.double() / temperature - torch.log(-torch.log(u))).argmax(-1)


def _guided(model, x, prompt_len, mask_id, cfg_scale):
    if cfg_scale == 0:
        return model(x).logits
    uncond = x.clone()
    uncond[:, :prompt_len] = mask_id
    cond_logits, uncond_logits = model(torch.cat([x, uncond])).logits.chunk(2)
    return uncond_logits + (cfg_scale + 1) * (cond_logits - uncond_logits)


@torch.no_grad()
def reference_generate(
    model, prompt_ids, completion_length, *, mask_id, block_length, steps, temperature=0.0,
    remasking="low_confidence", cfg_scale=0.0, generator=None,
):  # fmt: skip
    """``ddmrl.samplers.llada.generate`` at commit 9591c2d (before kv_cache and parallel), transcribed."""
    p = prompt_ids.shape[1]
    shape = (prompt_ids.shape[0], completion_length)
    x = torch.cat([prompt_ids, torch.full(shape, mask_id, dtype=prompt_ids.dtype)], dim=1)
    reveal = torch.full(shape, -1, dtype=torch.long)
    num_blocks = -(-completion_length // block_length)
    steps_per_block = max(1, steps // num_blocks)
    step, nfe = 0, 0
    for b in range(num_blocks):
        lo, hi = p + b * block_length, p + min(completion_length, (b + 1) * block_length)
        num_masked = (x[:, lo:hi] == mask_id).sum(1)
        base, rem = num_masked // steps_per_block, num_masked % steps_per_block
        schedule = base[:, None] + (torch.arange(steps_per_block)[None, :] < rem[:, None]).long()
        for s in range(steps_per_block):
            logits = _guided(model, x, p, mask_id, cfg_scale).float()
            nfe += 2 if cfg_scale else 1
            never = torch.zeros(logits.shape[-1], dtype=torch.bool)
            never[mask_id] = True
            logits = logits.masked_fill(never, -torch.inf)
            proposal = _gumbel_argmax(logits, temperature, generator)
            if remasking == "low_confidence":
                conf = torch.softmax(logits, -1).gather(-1, proposal[..., None]).squeeze(-1).double()
            else:
                conf = _uniform(proposal.shape, proposal.device, generator)
            selectable = torch.zeros_like(x, dtype=torch.bool)
            selectable[:, lo:hi] = x[:, lo:hi] == mask_id
            conf = conf.masked_fill(~selectable, -torch.inf)
            rank = conf.argsort(1, descending=True).argsort(1)
            commit = (rank < schedule[:, s : s + 1]) & selectable
            x = torch.where(commit, proposal, x)
            reveal[commit[:, p:]] = step
            step += 1
    return x[:, p:], reveal, nfe


# --------------------------------------------------------------------------- helpers


def model(layers: int = 1, seed: int = 0, rope: bool = False, vocab: int = 10, positions: int = 40):
    torch.manual_seed(seed)
    cfg = TinyDDMConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_layers=layers,
        num_heads=2,
        intermediate_size=64,
        max_position_embeddings=positions,
        position_embedding="rope" if rope else "learned",
        mask_token_id=MASK,
    )
    m = TinyDDMForMaskedLM(cfg).eval()
    with torch.no_grad():  # sharper than the 0.02-std init, so that confidences spread over (0, 1)
        for p in m.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.4)
    return m


def prompts(n: int = 4, p: int = 5, seed: int = 0) -> torch.Tensor:
    x = torch.randint(4, 10, (n, p), generator=torch.Generator().manual_seed(seed))
    x[0, :2] = 1  # left pads
    return x


def sample(m, length=12, block=4, steps=6, seed=0, **kw):
    return generate(
        m, prompts(), length, mask_id=MASK, block_length=block, steps=steps,
        generator=torch.Generator().manual_seed(seed), **kw,
    )  # fmt: skip


def same(a, b) -> bool:
    return torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.reveal_step, b.reveal_step)


# --------------------------------------------------------------------------- options off: today's sampler


@pytest.mark.parametrize(
    "kw",
    [
        {"steps": 12, "temperature": 0.0},  # one token per step
        {"steps": 6, "temperature": 0.0},  # d1's two per step
        {"steps": 12, "temperature": 1.0},
        {"steps": 6, "temperature": 1.0, "remasking": "random"},
        {"steps": 6, "temperature": 0.7, "cfg_scale": 1.5},
        {"steps": 4, "temperature": 1.0, "block": 5},  # a short last block, steps not dividing into blocks
    ],
)
def test_options_off_is_the_sampler_before_them_bit_for_bit(kw):
    m = model(layers=2)
    block = kw.pop("block", 4)
    for seed in (0, 1):
        gen = torch.Generator().manual_seed(seed)
        ids, reveal, nfe = reference_generate(m, prompts(), 12, mask_id=MASK, block_length=block, generator=gen, **kw)
        out = sample(m, block=block, seed=seed, kv_cache="none", parallel="none", confidence_dtype="float32", **kw)
        assert torch.equal(out.completion_ids, ids) and torch.equal(out.reveal_step, reveal) and out.nfe == nfe


# --------------------------------------------------------------------------- the cache


@pytest.mark.parametrize("kv_cache", ["prefix", "dual"])
@pytest.mark.parametrize("rope", [False, True])
@pytest.mark.parametrize("cfg_scale", [0.0, 1.0])
def test_one_layer_cache_is_exact(kv_cache, rope, cfg_scale):
    """With one layer the cached keys and values are exactly the current ones (a position's first-layer keys depend
    only on its own token): greedy decoding with the cache commits the same tokens at the same steps as without."""
    m = model(layers=1, rope=rope)
    for steps in (12, 6):
        plain = sample(m, steps=steps, cfg_scale=cfg_scale)
        cached = sample(m, steps=steps, cfg_scale=cfg_scale, kv_cache=kv_cache)
        assert same(plain, cached) and cached.nfe == plain.nfe


class CountingTiny(torch.nn.Module):
    """Counts the positions a TinyDDM evaluates (the cache shrinks them), through its own forward."""

    def __init__(self, inner) -> None:
        super().__init__()
        self.inner, self.config, self.positions = inner, inner.config, []

    def forward(self, input_ids, **kw):
        self.positions.append(input_ids.shape[1])
        return self.inner(input_ids, **kw)

    def get_base_model(self):  # as peft's wrapper: the cache drives the model inside
        return self


def test_cache_evaluates_the_block_window_after_each_refresh():
    """L = 8 after a 5-token prompt, blocks of 4, 2 steps per block: the refresh evaluates all 13 positions; the
    second step evaluates the block and what follows (prefix: 8 then 4) or the block only (dual: 4 and 4)."""
    for kv_cache, windows in (("prefix", [13, 8, 13, 4]), ("dual", [13, 4, 13, 4])):
        m = CountingTiny(model(layers=2))
        out = sample(m, length=8, steps=4, kv_cache=kv_cache)
        assert m.positions == windows and out.nfe == 4


@pytest.mark.parametrize("kv_cache", ["prefix", "dual"])
def test_deeper_cache_is_approximate_but_keeps_the_schedule(kv_cache):
    """With 3 layers the cache is Fast-dLLM's approximation (its error is bounded in test_cache.py; its effect on
    accuracy is measured in benchmarks/): the samples differ from the plain sampler's, but every step reveals as many
    tokens as the plain sampler's and nothing stays masked."""
    m = model(layers=3)
    plain, cached = sample(m, steps=12), sample(m, steps=12, kv_cache=kv_cache)
    assert not torch.equal(plain.completion_ids, cached.completion_ids)
    assert not bool((cached.completion_ids == MASK).any()) and cached.nfe == plain.nfe
    for s in range(12):
        assert torch.equal((plain.reveal_step == s).sum(1), (cached.reveal_step == s).sum(1))


def test_a_model_without_a_cached_forward_is_refused(fixed_logits_model):
    stub = fixed_logits_model(torch.zeros(20, 10))
    with pytest.raises(ValueError, match="kv_cache = 'prefix': FixedLogits has no cached forward"):
        generate(stub, prompts(), 8, mask_id=MASK, block_length=4, steps=4, kv_cache="prefix")


# --------------------------------------------------------------------------- parallel decoding


def table(conf_logits: list[float], tokens: list[int], p: int, vocab: int = 10) -> torch.Tensor:
    """[P + L, V] fixed logits: completion position k puts ``conf_logits[k]`` on ``tokens[k]``, 0 elsewhere."""
    t = torch.zeros(p + len(tokens), vocab)
    for k, (a, v) in enumerate(zip(conf_logits, tokens, strict=True)):
        t[p + k, v] = a
    return t


def test_threshold_commits_the_confident_tokens_and_ends_blocks_early(fixed_logits_model):
    """Confidence of position k: e^a / (e^a + 8) over 9 proposable tokens (the mask is excluded). a = 8 gives 0.997,
    a = 1 gives 0.25. One block of 6, 6 steps (one token per step): step 0 commits the three confident ones (and
    nothing else: the schedule's one token is among them); the rest follow one per step by confidence: 3 + 1 + 1 + 1
    tokens, 4 passes instead of 6."""
    a = [8.0, 1.0, 8.0, 2.0, 8.0, 1.5]
    stub = fixed_logits_model(table(a, [4, 5, 6, 7, 8, 9], p=5))
    out = generate(stub, prompts(), 6, mask_id=MASK, block_length=6, steps=6, parallel="threshold", threshold=0.9)
    assert out.reveal_step.tolist() == [[0, 3, 0, 1, 0, 2]] * 4
    assert out.completion_ids.tolist() == [[4, 5, 6, 7, 8, 9]] * 4
    assert out.nfe == 4 == len(stub.calls)


def test_factor_rule_on_known_confidences(fixed_logits_model):
    """Confidences 0.997, 0.85, 0.70, 0.25 (a = 8, ln(8 * 0.85 / 0.15), ln(8 * 0.7 / 0.3), 1): factor 1 commits the
    leading k with c_(k) >= 1 - 1 / (k + 1): 0.997 >= 0.5, 0.85 >= 0.667, 0.70 < 0.75 -> 2 tokens, then the
    remaining two one by one (0.70 >= 0.5 alone, then 0.25: the schedule's one)."""
    import math

    a = [8.0, math.log(8 * 0.85 / 0.15), math.log(8 * 0.7 / 0.3), 1.0]
    stub = fixed_logits_model(table(a, [4, 5, 6, 7], p=5))
    out = generate(stub, prompts(), 4, mask_id=MASK, block_length=4, steps=4, parallel="factor", factor=1.0)
    assert out.reveal_step.tolist() == [[0, 0, 1, 2]] * 4
    assert out.nfe == 3


def test_parallel_never_commits_fewer_than_the_schedule_nor_takes_more_steps():
    """On a random model at temperature 1, per block: every step commits at least ceil(masked / steps left), so
    parallel decoding never needs more passes than the plain sampler; reveal steps are 0..nfe-1, each used."""
    m = model(layers=2)
    for steps, rule in ((12, "threshold"), (6, "threshold"), (12, "factor")):
        plain = sample(m, steps=steps, temperature=1.0)
        fast = sample(m, steps=steps, temperature=1.0, parallel=rule, threshold=0.5, factor=2.0)
        assert fast.nfe <= plain.nfe
        assert not bool((fast.completion_ids == MASK).any()) and bool((fast.reveal_step >= 0).all())
        assert sorted(set(fast.reveal_step.flatten().tolist())) == list(range(fast.nfe))


def test_threshold_one_and_cache_none_keeps_plain_decoding_at_temperature_zero():
    """threshold 1.0 commits nothing beyond the schedule (a confidence of exactly 1 aside): the same greedy tokens
    and order as the plain sampler (on the fast path: the block's positions only)."""
    m = model(layers=2)
    for steps in (12, 6):
        assert same(sample(m, steps=steps), sample(m, steps=steps, parallel="threshold", threshold=1.0))


def test_parallel_needs_low_confidence_and_options_are_validated():
    m = model()
    with pytest.raises(ValueError, match="needs remasking low_confidence"):
        sample(m, parallel="threshold", remasking="random")
    with pytest.raises(ValueError, match="unknown kv_cache"):
        sample(m, kv_cache="triple")
    with pytest.raises(ValueError, match="unknown parallel rule"):
        sample(m, parallel="eager")


# --------------------------------------------------------------------------- what GRPO needs


@pytest.mark.parametrize(
    "kw", [{"kv_cache": "dual"}, {"parallel": "threshold"}, {"kv_cache": "prefix", "parallel": "factor"}]
)
def test_every_option_is_reproducible_from_its_seed_and_leaves_the_global_rng_alone(kw):
    m = model(layers=2)
    torch.manual_seed(5)
    want = torch.rand(2)
    torch.manual_seed(5)
    a = sample(m, temperature=1.0, seed=7, cfg_scale=0.5, **kw)
    assert torch.equal(torch.rand(2), want)
    b = sample(m, temperature=1.0, seed=7, cfg_scale=0.5, **kw)
    c = sample(m, temperature=1.0, seed=8, cfg_scale=0.5, **kw)
    assert same(a, b) and a.nfe == b.nfe
    assert not torch.equal(a.completion_ids, c.completion_ids)


class Recorder(torch.nn.Module):
    def __init__(self, inner) -> None:
        super().__init__()
        self.inner, self.inputs = inner, []

    def forward(self, input_ids):
        self.inputs.append(input_ids.clone())
        return self.inner(input_ids)


def test_reveal_steps_are_the_real_order_of_a_parallel_rollout():
    """Replaying the recorded forward inputs: the tokens masked in the input of pass s and present in the input of
    pass s + 1 (or the output) are exactly those with reveal_step s, and never change afterwards."""
    rec = Recorder(model(layers=2))
    out = sample(rec, temperature=1.0, parallel="threshold", threshold=0.3)
    p = prompts().shape[1]
    states = [x[:, p:] for x in rec.inputs] + [out.completion_ids]
    assert len(rec.inputs) == out.nfe
    for s in range(out.nfe):
        now = (states[s] == MASK) & (states[s + 1] != MASK)
        assert torch.equal(now, out.reveal_step == s)
        assert torch.equal(states[s + 1][states[s] != MASK], states[s][states[s] != MASK])


def test_tracerl_views_of_a_parallel_rollout_follow_its_reveal_steps():
    """TraceRL rebuilds its trajectory from reveal_step: with parallel decoding several tokens share a step, and each
    token is still a training target exactly once, at the view of its own (merged) step, with every token revealed
    later masked (the sampler's real order)."""
    from ddmrl.masking.views import build_views

    out = sample(model(layers=2), temperature=1.0, parallel="threshold", threshold=0.3)
    assert (out.reveal_step[:, :, None] == out.reveal_step[:, None, :]).sum() > out.reveal_step.numel()  # shared
    n, length = out.completion_ids.shape
    views = build_views(
        "tracerl", mu=4, seed=0, completion_mask=torch.ones(n, length, dtype=torch.bool), prompt_ids=prompts(),
        pad_id=1, reveal_step=out.reveal_step, shrink=2,
    )  # fmt: skip
    assert torch.equal(views.target_masks.sum(0), torch.ones(n, length, dtype=torch.long))
    trace = out.reveal_step // 2
    for tau in range(views.masks.shape[0]):
        assert torch.equal(views.target_masks[tau], trace == tau)
        assert torch.equal(views.masks[tau], trace >= tau)
