"""The block sampler (``ddmrl.samplers.block``) on the real ``LLaDA2MoeModelLM`` through ``LLaDA2BlockModel``, token
for token against the class's own ``generate`` (LLaDA2.0-mini's and LLaDA2.1-mini's, shared/reference/llada2).

The release's ``generate`` takes one prompt, casts its block mask to bfloat16 (so it runs on a bfloat16 model only),
rounds the canvas up to whole blocks counted from the prompt's first token (``align: sequence``; the tests take
prompt + completion lengths that are whole blocks) and returns the completion up to its first EOS (2.0 also stops
after the block holding it). Its 2.0 ``temperature=0.0`` is not greedy: ``_sample_with_temperature_topk_topp``
skips the division and draws from softmax(logits), top-k / top-p filtered, with the global generator; ddmrl's
``temperature: 1.0`` with a generator seeded as the global one draws the same numbers. 2.1's ``temperature=0.0`` is
the argmax; it commits every masked proposal above ``threshold`` (at least ``num_to_transfer`` = 1) with no step
schedule (``steps: block_length`` gives ddmrl's sampler that count), then edits (``editing_threshold``,
``max_post_steps``), and passes its block mask as 1 / 0 added to the scores (``released_21_mask``).

ddmrl's sampler never proposes the mask token; the test model's output row for it is zero (its logit 0 among
sharpened ones, never in the top k), so the released sampler never proposes it either.
"""

from __future__ import annotations

import copy

import pytest
import torch
from real_llada2 import EOS, MASK, llada2_checkpoint, needs_llada2, sharpen, tokenizer

from ddmrl.models.llada2 import LLaDA2BlockModel
from ddmrl.samplers.block import block_attention, block_index, generate, positions

pytestmark = needs_llada2
P, L = 6, 10  # prompt + completion = 16: whole blocks of 2, 4 and 8


def _model(tmp_path_factory, version: str, scale: float) -> torch.nn.Module:
    model = llada2_checkpoint(tmp_path_factory.mktemp("hub") / version, tokenizer(version), version)
    with torch.no_grad():
        model.lm_head.weight[MASK] = 0.0
    sharpen(model, scale)
    return model.to(torch.bfloat16)


@pytest.fixture(scope="module")
def llada20(tmp_path_factory):
    return _model(tmp_path_factory, "LLaDA2.0-mini", 4.0)


@pytest.fixture(scope="module")
def llada21(tmp_path_factory):
    return _model(tmp_path_factory, "LLaDA2.1-mini", 2.0)


def prompts(n: int = 3) -> torch.Tensor:
    return torch.randint(8, 100, (n, P), generator=torch.Generator().manual_seed(1))


def up_to_eos(tokens: torch.Tensor) -> torch.Tensor:
    """The completion up to its first EOS (included), as the release returns it."""
    eos = (tokens == EOS).nonzero()
    return tokens[: int(eos[0]) + 1] if len(eos) else tokens


@pytest.mark.parametrize(
    ("block_length", "steps", "threshold", "top_k"), [(4, 4, 0.95, 3), (4, 2, 0.5, 3), (8, 4, 0.3, 5), (2, 1, 0.9, 4)]
)
def test_llada20_generate_token_for_token(llada20, block_length, steps, threshold, top_k):
    """LLaDA 2.0 (its temperature 0 = ddmrl's temperature 1, seeded alike), each prompt and two seeds."""
    model = LLaDA2BlockModel(llada20)
    for i, prompt in enumerate(prompts()):
        for seed in (0, 1):
            torch.manual_seed(seed)
            want = llada20.generate(
                inputs=prompt[None], temperature=0.0, top_k=top_k, block_length=block_length, steps=steps,
                gen_length=L, threshold=threshold, eos_id=EOS, mask_id=MASK,
            )[0]  # fmt: skip
            got = generate(
                model, prompt[None], L, mask_id=MASK, block_length=block_length, steps=steps, temperature=1.0,
                top_k=top_k, parallel="threshold", threshold=threshold, align="sequence", kv_cache=False,
                generator=torch.Generator().manual_seed(seed),
            )  # fmt: skip
            assert torch.equal(up_to_eos(got.completion_ids[0]), want), (i, seed)


def test_llada20_greedy_batch_and_kv_cache(llada20):
    """A batch of three prompts at once, greedy (top-k 1: the release's one deterministic setting), with and without
    the KV cache, each row equal to the release on its prompt alone; several tokens committed per pass."""
    model = LLaDA2BlockModel(llada20)
    x = prompts()
    for block_length, steps in ((4, 4), (8, 2)):
        want = [
            llada20.generate(
                inputs=row[None], temperature=0.0, top_k=1, block_length=block_length, steps=steps, gen_length=L,
                threshold=0.95, eos_id=EOS, mask_id=MASK,
            )[0]
            for row in x
        ]  # fmt: skip
        for kv_cache in (False, True):
            got = generate(
                model, x, L, mask_id=MASK, block_length=block_length, steps=steps, temperature=0.0, top_k=1,
                parallel="threshold", threshold=0.95, align="sequence", kv_cache=kv_cache,
            )  # fmt: skip
            for row, w in zip(got.completion_ids, want, strict=True):
                assert torch.equal(up_to_eos(row), w), (block_length, steps, kv_cache)


@pytest.mark.parametrize(
    ("block_length", "threshold", "editing_threshold", "max_post"),
    [(4, 0.5, 0.0, 16), (4, 0.9, 0.5, 3), (8, 0.3, 0.2, 16), (2, 0.7, 0.9, 2)],
)
def test_llada21_generate_with_editing_token_for_token(llada21, block_length, threshold, editing_threshold, max_post):
    """LLaDA 2.1 (greedy, threshold commits, token editing, its 1 / 0 additive mask), each prompt; at editing
    threshold 0 the edits change the output."""
    model = LLaDA2BlockModel(llada21, released_21_mask=True)
    options = dict(mask_id=MASK, block_length=block_length, steps=block_length, temperature=0.0, threshold=threshold)
    options.update(parallel="threshold", align="sequence", kv_cache=False)
    edited = False
    for i, prompt in enumerate(prompts()):
        want = llada21.generate(
            inputs=prompt[None], temperature=0.0, block_length=block_length, gen_length=L, threshold=threshold,
            editing_threshold=editing_threshold, max_post_steps=max_post, eos_id=EOS, mask_id=MASK,
        )[0]  # fmt: skip
        got = generate(model, prompt[None], L, editing_threshold=editing_threshold, max_post_steps=max_post, **options)
        assert torch.equal(up_to_eos(got.completion_ids[0]), want), i
        edited |= not torch.equal(generate(model, prompt[None], L, **options).completion_ids, got.completion_ids)
    assert edited or editing_threshold > 0


def test_llada21_batch_rows_and_the_kv_cache(llada21):
    """A batch of the three prompts with editing: each row equal to the release on its prompt alone (rows finish
    their blocks independently); with the block-causal mask (the default), the KV cache gives the tokens of
    recomputing the prefix at every pass (float32)."""
    options = dict(mask_id=MASK, block_length=4, steps=4, temperature=0.0, parallel="threshold", threshold=0.5)
    options.update(align="sequence", editing_threshold=0.0, max_post_steps=16)
    x = prompts()
    want = [
        llada21.generate(
            inputs=row[None], temperature=0.0, block_length=4, gen_length=L, threshold=0.5, editing_threshold=0.0,
            max_post_steps=16, eos_id=EOS, mask_id=MASK,
        )[0]
        for row in x
    ]  # fmt: skip
    got = generate(LLaDA2BlockModel(llada21, released_21_mask=True), x, L, kv_cache=False, **options)
    for row, w in zip(got.completion_ids, want, strict=True):
        assert torch.equal(up_to_eos(row), w)
    model = LLaDA2BlockModel(copy.deepcopy(llada21).float())
    cached = generate(model, x, L, kv_cache=True, **options)
    assert torch.equal(cached.completion_ids, generate(model, x, L, kv_cache=False, **options).completion_ids)


# ------------------------------------------------------------------------------------------------ the releases' quirks


@pytest.mark.parametrize(("block_length", "steps"), [(4, 4), (8, 4)])
def test_llada20_all_ties_follow_its_topk_with_release_topk(llada20, block_length, steps):
    """Top-k 1 and threshold 1: every confidence is exactly 1 (or 1/2 where two bfloat16 logits tie at the top: both
    are kept, 2.0's temperature 0 draws between them, ddmrl's temperature 1 seeded alike draws the same) and none
    exceeds the threshold, so 2.0's fallback
    ``torch.topk`` alone picks the committed positions, by its order among ties. ``selection: release_topk`` (with
    ``kv_cache: false``, 2.0's recomputation) gives the release's tokens for each prompt; the default (ties to the
    lower index) differs from it."""
    model, differ = LLaDA2BlockModel(llada20), 0
    for i, prompt in enumerate(prompts()):
        torch.manual_seed(0)
        want = llada20.generate(
            inputs=prompt[None], temperature=0.0, top_k=1, block_length=block_length, steps=steps, gen_length=L,
            threshold=1.0, eos_id=EOS, mask_id=MASK,
        )[0]  # fmt: skip
        kw = dict(mask_id=MASK, block_length=block_length, steps=steps, temperature=1.0, top_k=1, parallel="threshold",
                  threshold=1.0, align="sequence", kv_cache=False)  # fmt: skip
        got = generate(model, prompt[None], L, selection="release_topk", generator=torch.Generator().manual_seed(0),
                       **kw).completion_ids[0]  # fmt: skip
        assert torch.equal(up_to_eos(got), want), i
        plain = generate(model, prompt[None], L, generator=torch.Generator().manual_seed(0), **kw).completion_ids[0]
        differ += not torch.equal(up_to_eos(plain), want)
    assert differ > 0, "the all-ties case must separate the two rules"


BF16_SETTINGS = [(4, 4, 0.95, 3), (4, 2, 0.5, 3), (8, 4, 0.3, 5)]  # (block_length, steps, threshold, top_k)


def test_llada20_bfloat16_exact_mode_is_kv_cache_false(llada20):
    """bfloat16, sampled (3 settings x 3 prompts x 2 seeds = 18 completions): 2.0's ``generate`` recomputes the
    canvas at every pass, and ``kv_cache: false`` (the exact mode) gives its tokens in all 18. The cache (the
    default) is exact in real arithmetic only: in bfloat16 its logits are rounded otherwise, and some completions
    differ (measured on a CPU: 3 of the 18; :func:`test_bfloat16_cache_moves_the_logits_by_rounding`)."""
    model, differ = LLaDA2BlockModel(llada20), 0
    for block_length, steps, threshold, top_k in BF16_SETTINGS:
        for i, prompt in enumerate(prompts()):
            for seed in (0, 1):
                torch.manual_seed(seed)
                want = llada20.generate(
                    inputs=prompt[None], temperature=0.0, top_k=top_k, block_length=block_length, steps=steps,
                    gen_length=L, threshold=threshold, eos_id=EOS, mask_id=MASK,
                )[0]  # fmt: skip
                kw = dict(mask_id=MASK, block_length=block_length, steps=steps, temperature=1.0, top_k=top_k,
                          parallel="threshold", threshold=threshold, align="sequence")  # fmt: skip
                exact = generate(model, prompt[None], L, kv_cache=False, generator=torch.Generator().manual_seed(seed),
                                 **kw)  # fmt: skip
                assert torch.equal(up_to_eos(exact.completion_ids[0]), want), (block_length, steps, i, seed)
                cached = generate(model, prompt[None], L, generator=torch.Generator().manual_seed(seed), **kw)
                differ += not torch.equal(up_to_eos(cached.completion_ids[0]), want)
    assert differ < 18


def test_bfloat16_cache_moves_the_logits_by_rounding(llada20):
    """The sampler's calls on a canvas of 16 (blocks of 4 from position 0, a prompt of 6): the first block
    prefilled, then each later block evaluated against the cache and appended, against recomputing the canvas up to
    the block's end (2.0's ``generate``). Equal to 1e-5 in float32 (measured: exactly), not in bfloat16, where the
    cached keys and values and the shorter calls round otherwise (measured: max |difference| 0.0078)."""
    x = torch.cat([prompts(), torch.randint(8, 100, (3, L), generator=torch.Generator().manual_seed(2))], 1)
    blocks, valid = block_index(P, P + L, 4, "sequence"), torch.ones(3, P + L, dtype=torch.bool)
    pos, gaps = positions(valid), {}
    for dtype in (torch.bfloat16, torch.float32):
        model, gap = LLaDA2BlockModel(copy.deepcopy(llada20).to(dtype)), 0.0
        with torch.no_grad():
            _, cache = model.block_forward(x[:, :4], pos[:, :4], block_attention(blocks[:4], blocks[:4], valid[:, :4]),
                                           None, True)  # fmt: skip
            for lo in (4, 8, 12):
                hi = lo + 4
                att = block_attention(blocks[lo:hi], blocks[:hi], valid[:, :hi])  # [3, 4, hi]
                part = model.block_forward(x[:, lo:hi], pos[:, lo:hi], att, cache)[0]
                whole = block_attention(blocks[:hi], blocks[:hi], valid[:, :hi])  # [3, hi, hi]
                full = model.block_forward(x[:, :hi], pos[:, :hi], whole)[0][:, lo:hi]
                gap = max(gap, float((part.float() - full.float()).abs().max()))
                _, cache = model.block_forward(x[:, lo:hi], pos[:, lo:hi], att, cache, True)
        gaps[dtype] = gap
    assert gaps[torch.float32] < 1e-5 < 1e-3 < gaps[torch.bfloat16], gaps


@pytest.mark.parametrize(("block_length", "lengths"), [(4, (6, 5, 3)), (4, (6, 4, 1)), (2, (6, 5, 3))])
def test_llada20_padded_batch_counts_blocks_from_each_rows_first_token(llada20, block_length, lengths):
    """A left-padded batch under ``align: sequence``: 2.0's ``generate`` takes one prompt and counts blocks from its
    first token, and so does ddmrl's sampler per row. In float32 (greedy, top-k 1) each padded row equals the row
    sampled alone, every token, with and without the cache (the row alone equals the release: the tests above). In
    bfloat16 a padded row's keys and scores are rounded otherwise than the row's alone, as with the cache (measured
    here: 1 of the 9 rows leaves the release at a near-tie, (4, (6, 4, 1)) row 2, the same row in float32 does not)."""
    model = LLaDA2BlockModel(copy.deepcopy(llada20).float())
    x = prompts()
    pads = torch.tensor([P - n for n in lengths])
    mask = (torch.arange(P)[None] >= pads[:, None]).long()
    x = x.masked_fill(mask == 0, EOS)
    kw = dict(mask_id=MASK, block_length=block_length, steps=4, temperature=0.0, top_k=1, parallel="threshold",
              threshold=0.95, align="sequence")  # fmt: skip
    for kv_cache in (False, True):
        got = generate(model, x, L, attention_mask=mask, kv_cache=kv_cache, **kw).completion_ids
        for row, n in enumerate(lengths):
            alone = generate(model, x[row : row + 1, P - n :], L, kv_cache=kv_cache, **kw).completion_ids[0]
            assert torch.equal(got[row], alone), (kv_cache, row, got[row], alone)
