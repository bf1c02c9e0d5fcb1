"""The block-diffusion sampler (``ddmrl.samplers.block``) on a tiny random TinyBlockDDM:

* the exact cache: with ``kv_cache`` every token, reveal step and (per pass) logit equals the plain recomputation
  (the whole canvas up to the block's end, full block-causal mask, no cache), for both alignments, both commit
  rules, greedy and sampled, left-padded prompts included;
* left padding: a padded row's completion equals the row sampled alone (``align: completion``);
* the protocol: a model that keeps no keys and values (it recomputes what it was asked to store) gives the same;
* fidelity: token for token equal to test-local transcriptions of SDAR's ``block_diffusion_generate`` (JetAstra/SDAR
  ``generate.py`` at c2041a8, with its KV cache and ``store_kv``) and LLaDA 2.0's ``generate`` (inclusionAI
  LLaDA2.0-mini ``modeling_llada2_moe.py``, the copy in yjyddq/DARE at 83ae8a3, ``../shared/reference/llada2``),
  sampled at temperature 1 with one seed (their draws are ``torch.multinomial`` on the global generator, ours on a
  generator seeded alike), with and without top-k / top-p, with their fixed-count and threshold rules, a prompt
  whose tail shares the first block (``align: sequence``). The shims below give the tiny model their call
  signature (an HF-style cache object; a 4-D additive mask) and leave the mask token out of the logits, as ddmrl
  does (a released checkpoint gives it no probability to speak of).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from float_error import forward_passes_agree

from ddmrl.models.tiny_block import TinyBlockDDMConfig, TinyBlockDDMForMaskedLM
from ddmrl.samplers import SAMPLERS
from ddmrl.samplers.block import (
    ALIGNS,
    Recomputed,
    block_attention,
    block_index,
    generate,
    lowest_index_first,
    positions,
    release_topk,
    transfer_counts,
)

MASK, V = 0, 40


def block_model(seed: int = 0, pe: str = "rope", sharp: float = 40.0) -> TinyBlockDDMForMaskedLM:
    """A 2-layer TinyBlockDDM whose final norm is scaled by ``sharp`` (confident, spread probabilities)."""
    torch.manual_seed(seed)
    cfg = TinyBlockDDMConfig(
        vocab_size=V, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=40,
        position_embedding=pe, mask_token_id=MASK, pad_token_id=1,
    )  # fmt: skip
    model = TinyBlockDDMForMaskedLM(cfg).eval()
    with torch.no_grad():
        model.ln_f.weight.mul_(sharp)
    return model


@pytest.fixture(scope="module")
def model():
    return block_model()


def prompts(n: int = 3, p: int = 6, seed: int = 0) -> torch.Tensor:
    return torch.randint(4, V, (n, p), generator=torch.Generator().manual_seed(seed))


def test_block_sampler_is_registered():
    assert SAMPLERS["block"] is generate


def test_layout_helpers():
    assert block_index(5, 9, 4, "completion").tolist() == [-2, -1, -1, -1, -1, 0, 0, 0, 0]
    assert block_index(5, 9, 4, "sequence").tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2]
    assert (
        transfer_counts(4, 4) == [1, 1, 1, 1] and transfer_counts(5, 2) == [3, 2] and sum(transfer_counts(3, 5)) == 3
    )
    valid = torch.tensor([[False, True, True, True]])
    att = block_attention(torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0, 1, 1]), valid)[0]
    assert att.tolist() == [[False, True, False, False], [False, True, False, False],
                            [False, True, True, True], [False, True, True, True]]  # fmt: skip
    assert positions(valid).tolist() == [[0, 0, 1, 2]]


@pytest.mark.parametrize("align", ["completion", "sequence"])
@pytest.mark.parametrize("parallel", ["none", "threshold"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cache_is_exact(model, align, parallel, temperature):
    """Cached and recomputed sampling give the same tokens, reveal steps and committed counts; a left-padded batch
    included (row 1 has two pads, row 2 one)."""
    x = prompts()
    mask = torch.ones_like(x)
    mask[1, :2] = mask[2, :1] = 0
    kw = dict(mask_id=MASK, block_length=4, steps=3, align=align, parallel=parallel, threshold=0.6,
              temperature=temperature, top_k=12 if temperature else None, attention_mask=mask)  # fmt: skip
    cached = generate(model, x, 13, generator=torch.Generator().manual_seed(5), **kw)
    plain = generate(model, x, 13, generator=torch.Generator().manual_seed(5), kv_cache=False, **kw)
    assert torch.equal(cached.completion_ids, plain.completion_ids)
    assert torch.equal(cached.reveal_step, plain.reveal_step)
    assert (cached.completion_ids != MASK).all() and (cached.reveal_step >= 0).all()
    blocks = 4  # 13 tokens in blocks of 4 (completion: 4 + 4 + 4 + 1; sequence from 6: 2 + 4 + 4 + 3)
    assert plain.nfe <= blocks * 3 and cached.nfe == plain.nfe + blocks  # + prefill + appends - the last one


def test_cached_logits_equal_recomputed(model):
    """Per pass, the block's logits from the cache equal the full block-causal recomputation (float tolerance)."""
    x, p, b = prompts(2), 6, 4
    full = torch.cat([x, torch.randint(4, V, (2, 8))], 1)  # a canvas: prompt + two completion blocks
    blocks, valid = block_index(p, 14, b, "completion"), torch.ones(2, 14, dtype=torch.bool)
    pos = positions(valid)

    def run(m):  # the blocks from the cache and recomputed: other shapes, tolerance from float32's error
        ref = m.block_forward(full, pos, block_attention(blocks, blocks, valid))[0]  # [2, 14, V]
        _, cache = m.block_forward(full[:, :p], pos[:, :p], block_attention(blocks[:p], blocks[:p], valid[:, :p]),
                                   None, True)  # fmt: skip
        got = []
        for lo, hi in [(6, 10), (10, 14)]:
            att = block_attention(blocks[lo:hi], blocks[:hi], valid[:, :hi])
            got.append(m.block_forward(full[:, lo:hi], pos[:, lo:hi], att, cache, False)[0])
            _, cache = m.block_forward(full[:, lo:hi], pos[:, lo:hi], att, cache, True)
        return torch.cat(got, 1), ref[:, 6:14]

    forward_passes_agree("the cached blocks' logits", run, model, full.shape[1])  # (tests/float_error.py)


def test_padded_row_equals_row_alone(model):
    x = prompts(2, 6)
    mask = torch.ones_like(x)
    mask[1, :2] = 0
    kw = dict(mask_id=MASK, block_length=4, steps=2, parallel="threshold", threshold=0.5)
    both = generate(model, x, 8, attention_mask=mask, **kw)
    alone = generate(model, x[1:, 2:], 8, **kw)
    assert torch.equal(both.completion_ids[1], alone.completion_ids[0])


def test_protocol_without_a_real_cache(model):
    """``Recomputed`` over the model's cache-free forward: what it is asked to store it keeps and recomputes (a
    family whose code has no KV cache satisfies the contract this way); a padded batch, both alignments."""
    x = prompts()
    mask = torch.ones_like(x)
    mask[1, :2] = 0
    plain = Recomputed(lambda ids, pos, att: model(ids, position_ids=pos, attention_mask=att).logits)
    for align in ALIGNS:
        kw = dict(mask_id=MASK, block_length=4, steps=4, align=align, attention_mask=mask)
        assert torch.equal(generate(plain, x, 10, **kw).completion_ids, generate(model, x, 10, **kw).completion_ids)


def test_refusals(model):
    with pytest.raises(ValueError, match="parallel"):
        generate(model, prompts(), 4, mask_id=MASK, block_length=4, steps=1, parallel="factor")
    with pytest.raises(ValueError, match="cfg_scale"):
        generate(model, prompts(), 4, mask_id=MASK, block_length=4, steps=1, cfg_scale=1.0)


# ------------------------------------------------------------------------------------------------ SDAR


class SDARShim:
    """The tiny model under SDAR's call: ``model(x, attention_mask=[1, q, k] 0/1, position_ids, past_key_values=<a
    holder>, use_cache=True, store_kv=...)``; ``store_kv`` appends the call's keys and values to the holder."""

    def __init__(self, model):
        self.model = model

    def eval(self):
        return self

    def __call__(self, x, attention_mask, position_ids, past_key_values, use_cache, store_kv):
        out = self.model(x, position_ids=position_ids, attention_mask=attention_mask.bool().expand(x.shape[0], -1, -1),
                         past_key_values=past_key_values.kv, use_cache=True)  # fmt: skip
        if store_kv:
            past_key_values.kv = out.past_key_values
        out.logits[..., MASK] = -torch.inf
        return out


class Holder:
    kv = None


def sdar_sample(logits, temperature=1.0, top_k=0, top_p=1.0):
    """SDAR ``sample_with_temperature_topk_topp`` (with ``top_k_logits``, ``top_p_logits``), transcribed."""
    orig_shape = logits.shape[:-1]
    logits = logits.reshape(-1, logits.shape[-1])
    if temperature != 1.0:
        logits = logits / temperature
    if top_k > 0:
        values, _ = torch.topk(logits, top_k)
        logits = torch.where(logits < values[..., -1, None], torch.full_like(logits, float("-inf")), logits)
    if top_p < 1.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        sorted_mask = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1) > top_p
        sorted_mask[..., 1:] = sorted_mask[..., :-1].clone()
        sorted_mask[..., 0] = False
        mask_indices = torch.scatter(torch.full_like(logits, False, dtype=torch.bool), -1, sorted_indices, sorted_mask)
        logits = logits.masked_fill(mask_indices, float("-inf"))
    probs = F.softmax(logits, dim=-1)
    token = torch.multinomial(probs, num_samples=1)
    return token.view(*orig_shape), torch.gather(probs, -1, token).view(*orig_shape)


def num_transfer(block_length, steps):
    base, remainder = block_length // steps, block_length % steps
    out = torch.zeros(steps, dtype=torch.int64) + base
    out[:remainder] += 1
    return out


@torch.no_grad()
def sdar_generate(model, input_ids, mask_id, gen_length, block_length, denoising_steps, temperature=1.0, top_k=0,
                  top_p=1.0, remasking_strategy="low_confidence_dynamic", confidence_threshold=0.85):  # fmt: skip
    """JetAstra/SDAR ``generate.py`` ``block_diffusion_generate`` at c2041a8, transcribed (``DynamicCache()`` is
    the shim's holder; the ``sequential`` and ``entropy_bounded`` branches and the stopping criteria left out)."""
    model.eval()
    prompt_length = input_ids.shape[1]
    past_key_values = Holder()
    num_blocks = (prompt_length + gen_length + block_length - 1) // block_length
    total_length = num_blocks * block_length
    block_mask = torch.tril(torch.ones(num_blocks, num_blocks))
    block_diffusion_attention_mask = (
        block_mask.repeat_interleave(block_length, dim=0).repeat_interleave(block_length, dim=1).unsqueeze(0)
    )
    position_ids = torch.arange(total_length).unsqueeze(0)
    x = torch.full((1, total_length), mask_id, dtype=torch.long)
    x[:, :prompt_length] = input_ids
    prefill_blocks = prompt_length // block_length
    prefill_length = prefill_blocks * block_length
    if prefill_length > 0:
        cur_x = x[:, :prefill_length]
        cur_attn_mask = block_diffusion_attention_mask[:, :prefill_length, :prefill_length]
        model(cur_x, attention_mask=cur_attn_mask, position_ids=position_ids[:, :prefill_length],
              past_key_values=past_key_values, use_cache=True, store_kv=True)  # fmt: skip
    num_transfer_tokens = num_transfer(block_length, denoising_steps)
    for num_block in range(prefill_blocks, num_blocks):
        lo, hi = num_block * block_length, (num_block + 1) * block_length
        cur_x = x[:, lo:hi].clone()
        cur_attn_mask = block_diffusion_attention_mask[:, lo:hi, :hi]
        cur_position_ids = position_ids[:, lo:hi]
        for step in range(denoising_steps + 1):
            mask_index = cur_x == mask_id
            if mask_index.sum() == 0:
                model(cur_x, attention_mask=cur_attn_mask, position_ids=cur_position_ids,
                      past_key_values=past_key_values, use_cache=True, store_kv=True)  # fmt: skip
                break
            logits = model(cur_x, attention_mask=cur_attn_mask, position_ids=cur_position_ids,
                           past_key_values=past_key_values, use_cache=True, store_kv=False).logits  # fmt: skip
            x0, x0_p = sdar_sample(logits, temperature=temperature, top_k=top_k, top_p=top_p)
            if remasking_strategy == "low_confidence_static":
                confidence = torch.where(mask_index, x0_p, -torch.inf)
                transfer_index = torch.zeros_like(x0, dtype=torch.bool)
                for j in range(confidence.shape[0]):
                    _, idx = torch.topk(confidence[j], num_transfer_tokens[step])
                    transfer_index[j, idx] = True
            elif remasking_strategy == "low_confidence_dynamic":
                confidence = torch.where(mask_index, x0_p, -torch.inf)
                transfer_index = torch.zeros_like(x0, dtype=torch.bool)
                for j in range(confidence.shape[0]):
                    high_conf_mask = confidence[j] > confidence_threshold
                    if high_conf_mask.sum() >= num_transfer_tokens[step]:
                        transfer_index[j] = high_conf_mask
                    else:
                        _, idx = torch.topk(confidence[j], num_transfer_tokens[step])
                        transfer_index[j, idx] = True
            cur_x[transfer_index] = x0[transfer_index]
        x[:, lo:hi] = cur_x
    return x


SETTINGS = [  # (remasking strategy, top_k, top_p): sampled at temperature 1
    ("low_confidence_static", 0, 1.0),
    ("low_confidence_dynamic", 0, 1.0),
    ("low_confidence_static", 8, 0.9),
    ("low_confidence_dynamic", 8, 0.9),
]


@pytest.mark.parametrize("strategy, top_k, top_p", SETTINGS)
@pytest.mark.parametrize("p", [8, 6])  # 6: the prompt's tail shares the first block
@pytest.mark.parametrize("seed", [0, 1])
def test_equals_sdar_block_diffusion_generate(model, strategy, top_k, top_p, p, seed):
    """``steps`` = block_length (4), as SDAR's released setting: SDAR's static rule then never asks for more tokens
    than the block has masks (where it would, it overwrites committed ones; ddmrl commits at most the masks)."""
    x = prompts(1, p, seed)
    gen_length = 16 - p  # the canvas ends with a whole block (SDAR rounds it up to one)
    torch.manual_seed(seed)
    ref = sdar_generate(SDARShim(model), x, MASK, gen_length, 4, 4, top_k=top_k, top_p=top_p,
                        remasking_strategy=strategy, confidence_threshold=0.5)  # fmt: skip
    out = generate(model, x, gen_length, mask_id=MASK, block_length=4, steps=4, temperature=1.0, top_k=top_k,
                   top_p=top_p, parallel="threshold" if strategy.endswith("dynamic") else "none", threshold=0.5,
                   align="sequence", generator=torch.Generator().manual_seed(seed))  # fmt: skip
    assert torch.equal(out.completion_ids, ref[:, p:])


# ------------------------------------------------------------------------------------------------ LLaDA 2.0


class LLaDA2Shim:
    """The tiny model under LLaDA 2.0's call: ``forward(x, attention_mask=[1, 1, T, T] 0 / -inf, position_ids)``."""

    def __init__(self, model):
        self.model = model

    def forward(self, x, attention_mask, position_ids):
        out = self.model(x, position_ids=position_ids, attention_mask=(attention_mask[:, 0] == 0))
        out.logits[..., MASK] = -torch.inf
        return out


@torch.no_grad()
def llada2_generate(self, inputs, temperature=0.0, block_length=32, steps=32, gen_length=2048, top_p=None,
                    top_k=None, minimal_topk=1, threshold=0.95, eos_id=156892, mask_id=156895):  # fmt: skip
    """LLaDA2.0-mini ``LLaDA2MoeModelLM.generate`` (DARE 83ae8a3, ``models/LLaDA2.0-mini/modeling_llada2_moe.py``),
    transcribed with its ``_sample_with_temperature_topk_topp`` (= SDAR's at temperature > 0); ``eos_early_stop``
    off; ``self`` is the shim."""
    steps = min(steps, gen_length // minimal_topk)
    input_ids = inputs
    prompt_length = input_ids.shape[1]
    num_blocks = (prompt_length + gen_length + block_length - 1) // block_length
    total_length = num_blocks * block_length
    block_mask = torch.tril(torch.ones(num_blocks, num_blocks))
    block_diffusion_attention_mask = (
        block_mask.repeat_interleave(block_length, dim=0).repeat_interleave(block_length, dim=1)[None, None].log()
    )
    position_ids = torch.arange(total_length).unsqueeze(0)
    x = torch.full((1, total_length), mask_id, dtype=torch.long)
    x[:, :prompt_length] = input_ids.clone()
    prefill_blocks = prompt_length // block_length
    num_transfer_tokens_schedule = num_transfer(block_length, steps)
    for num_block in range(prefill_blocks, num_blocks):
        current_window_end = (num_block + 1) * block_length
        cur_x = x[:, :current_window_end]
        cur_attn_mask = block_diffusion_attention_mask[:, :, :current_window_end, :current_window_end]
        cur_position_ids = position_ids[:, :current_window_end]
        for step in range(steps):
            active_block_mask = cur_x[:, -block_length:] == mask_id
            if active_block_mask.sum() == 0:
                break
            logits = self.forward(cur_x, attention_mask=cur_attn_mask, position_ids=cur_position_ids).logits
            active_logits = logits[:, -block_length:, :]
            x0, x0_p = sdar_sample(active_logits, temperature=temperature, top_k=top_k or 0, top_p=top_p or 1.0)
            num_to_transfer = num_transfer_tokens_schedule[step].item()
            transfer_index = torch.zeros_like(x0, dtype=torch.bool)
            confidence = torch.where(active_block_mask, x0_p, -torch.inf)
            high_conf_mask = confidence[0] > threshold
            if high_conf_mask.sum().item() >= num_to_transfer:
                transfer_index[0] = high_conf_mask
            else:
                _, idx = torch.topk(confidence[0], k=min(num_to_transfer, active_block_mask.sum().item()))
                transfer_index[0, idx] = True
            if transfer_index.any():
                cur_x[:, -block_length:][transfer_index] = x0[transfer_index]
        x[:, :current_window_end] = cur_x
        if eos_id is not None and (x[0, prompt_length:current_window_end] == eos_id).any():
            break
    return x[:, : prompt_length + gen_length]


@pytest.mark.parametrize("threshold, steps", [(0.5, 4), (0.95, 2), (2.0, 3)])
@pytest.mark.parametrize("kv_cache", [True, False])
def test_equals_llada2_generate(model, threshold, steps, kv_cache):
    """LLaDA 2.0's rule is ddmrl's ``parallel: threshold`` (a threshold above 1: the fixed count alone); its
    ``generate`` recomputes the canvas at every pass, ddmrl's cache gives the same tokens."""
    x, gen_length = prompts(1, 6, 3), 10
    torch.manual_seed(3)
    ref = llada2_generate(LLaDA2Shim(model), x, temperature=1.0, block_length=4, steps=steps, gen_length=gen_length,
                          top_k=10, threshold=threshold, eos_id=-1, mask_id=MASK)  # fmt: skip
    out = generate(model, x, gen_length, mask_id=MASK, block_length=4, steps=steps, temperature=1.0, top_k=10,
                   parallel="threshold", threshold=threshold, align="sequence", kv_cache=kv_cache,
                   generator=torch.Generator().manual_seed(3))  # fmt: skip
    assert torch.equal(out.completion_ids, ref[:, 6:])


def test_threshold_commits_more_per_pass(model):
    """On this confident model the threshold rule binds: fewer passes than the fixed count, never more."""
    x = prompts(4, 6)
    kw = dict(mask_id=MASK, block_length=4, steps=4, temperature=1.0, threshold=0.5)
    fixed = generate(model, x, 10, parallel="none", generator=torch.Generator().manual_seed(0), **kw)
    rule = generate(model, x, 10, parallel="threshold", generator=torch.Generator().manual_seed(0), **kw)
    assert rule.nfe < fixed.nfe
    assert (rule.completion_ids != MASK).all()


@pytest.mark.parametrize("strategy", ["low_confidence_static", "low_confidence_dynamic"])
def test_equals_sdar_with_two_tokens_per_pass(model, strategy):
    """``steps`` 2 over blocks of 4 (two tokens a pass), a prompt of whole blocks."""
    x = prompts(1, 8, 2)
    torch.manual_seed(2)
    ref = sdar_generate(SDARShim(model), x, MASK, 8, 4, 2, remasking_strategy=strategy, confidence_threshold=0.5)
    out = generate(model, x, 8, mask_id=MASK, block_length=4, steps=2, temperature=1.0, align="sequence",
                   parallel="threshold" if strategy.endswith("dynamic") else "none", threshold=0.5,
                   generator=torch.Generator().manual_seed(2))  # fmt: skip
    assert torch.equal(out.completion_ids, ref[:, 8:])


# ------------------------------------------------------------------------------------------------ the sampler's keys


def test_the_block_keys_reach_generate_and_bad_values_are_refused(model):
    """``sampler.options.block`` (kv_cache, selection, softmax_dtype) by the module's ``Params``: the rollout's
    keywords carry them; kv_cache false recomputes (no prefill, no appends: fewer calls, the same tokens here in
    float32); a bad value is one line naming the key."""
    from ddmrl.config import SamplerConfig
    from ddmrl.errors import ConfigError
    from ddmrl.rollout import sampler_kwargs

    default = sampler_kwargs(SamplerConfig(name="block", block_length=4, steps=8), 12)
    assert {k: default[k] for k in ("kv_cache", "selection", "softmax_dtype")} == {
        "kv_cache": True, "selection": "lowest_index_first", "softmax_dtype": "float32"}  # fmt: skip
    options = {"block": {"kv_cache": False, "selection": "release_topk", "softmax_dtype": "logits"}}
    kw = sampler_kwargs(SamplerConfig(name="block", block_length=4, steps=8, options=options), 12)
    assert (kw["kv_cache"], kw["selection"], kw["softmax_dtype"]) == (False, "release_topk", "logits")
    x = prompts()
    cached, plain = (generate(model, x, 12, mask_id=MASK, **k) for k in (default, kw))
    assert torch.equal(cached.completion_ids, plain.completion_ids) and plain.nfe < cached.nfe
    with pytest.raises(ConfigError, match=r"options\.block\.selection = 'topk'"):
        SamplerConfig(name="block", options={"block": {"selection": "topk"}})
    with pytest.raises(ValueError, match=r"sampler.options.block.softmax_dtype = 'float16'"):
        generate(model, x, 4, mask_id=MASK, block_length=4, steps=1, softmax_dtype="float16")


def test_release_topk_is_torch_topk_row_by_row():
    """The releases' selection on all-equal confidences: torch.topk's own order (here checked against it, whatever
    the device's), only masked positions, at most the masked count; the default takes the lowest indices."""
    conf = torch.ones(2, 8)
    masked = torch.ones(2, 8, dtype=torch.bool)
    masked[1, :5] = False
    k = torch.tensor([[3], [3]])
    got = release_topk(conf, masked, k)
    assert got[0].nonzero().flatten().tolist() == sorted(torch.topk(conf[0], 3).indices.tolist())
    scored = torch.where(masked[1], conf[1], -torch.inf)
    assert got[1].nonzero().flatten().tolist() == sorted(torch.topk(scored, 3).indices.tolist()) == [5, 6, 7]
    assert lowest_index_first(conf, masked, k)[0].nonzero().flatten().tolist() == [0, 1, 2]
