"""Block diffusion's training input (``ddmrl.likelihood.block``) on a tiny random TinyBlockDDM:

* identity: the token log-probs of a view from the one [noised | clean] pass equal, block by block, the model run on
  that block's noisy tokens against its clean earlier context alone (the clean prefix cached, then the block: the
  sampler's pass), for both alignments and left-padded prompts (under ``sequence`` each row's blocks from its first
  real token, as the block sampler's);
* the mask against the released ones: SDAR's ``block_diff_mask`` (JetAstra/SDAR at c2041a8,
  ``training/model/SDAR-8B-Chat/modeling_sdar.py``; [x_t | x_0], blocks from position 0) is ``align: sequence``
  restricted to the noised blocks that hold completion positions, and TraceRL's ``make_basic_block_attention`` with
  ``process_pad`` (Gen-Verse/dLLM-RL at 10b4fd1, ``train/train_sdar_policy.py``; [prompt | clean | noised]) is
  ``align: completion`` with the positions reordered (transcriptions below);
* gradients reach the model; ``sequence_logits`` (the pre-training / SFT loss's) agrees with it.
"""

from __future__ import annotations

import pytest
import torch
from float_error import forward_passes_agree

from ddmrl.likelihood.block import block_diffusion_input, block_token_logps, sequence_logits
from ddmrl.models.tiny_block import TinyBlockDDMConfig, TinyBlockDDMForMaskedLM
from ddmrl.samplers.block import block_attention, block_index, block_spans, positions, row_shifts, shift_left

MASK, V, B = 0, 40, 4


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = TinyBlockDDMConfig(vocab_size=V, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                             max_position_embeddings=40, position_embedding="rope", mask_token_id=MASK)  # fmt: skip
    return TinyBlockDDMForMaskedLM(cfg).eval()


def batch(p: int = 6, length: int = 10, n: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    prompt, completion = torch.randint(4, V, (n, p), generator=g), torch.randint(4, V, (n, length), generator=g)
    view = completion.masked_fill(torch.rand(n, length, generator=g) < 0.5, MASK)
    mask = torch.ones_like(prompt)
    mask[1, :2] = mask[2, :1] = 0
    prompt[1, :2] = prompt[2, :1] = 1  # pads
    return prompt, completion, view, mask


def separately(model, prompt, completion, view, mask, align):
    """[N, L] each block's log-probs from the clean context before it (cached) and the block's noisy tokens, on the
    block sampler's grid (under ``sequence`` each row's blocks from its first real token: the rows moved left by
    ``row_shifts``, their completions read back from where they then start)."""
    p, length = prompt.shape[1], completion.shape[1]
    valid = torch.cat([mask.bool(), torch.ones_like(completion, dtype=torch.bool)], 1)
    shift = row_shifts(mask.bool(), B, align)
    clean = shift_left(torch.cat([prompt, completion], 1), shift, 0)
    noisy = shift_left(torch.cat([prompt, view], 1), shift, 0)
    valid = shift_left(valid, shift, False)
    t, first = clean.shape[1], p - shift
    blocks, pos = block_index(p, t, B, align), positions(valid)
    out = torch.zeros(clean.shape)
    for lo, hi in block_spans(blocks, int(first.min())):
        cache = None
        if lo:
            att = block_attention(blocks[:lo], blocks[:lo], valid[:, :lo])
            _, cache = model.block_forward(clean[:, :lo], pos[:, :lo], att, None, True)
        att = block_attention(blocks[lo:hi], blocks[:hi], valid[:, :hi])
        logits = model.block_forward(noisy[:, lo:hi], pos[:, lo:hi], att, cache, False)[0]
        out[:, lo:hi] = torch.log_softmax(logits.float(), -1).gather(-1, clean[:, lo:hi, None]).squeeze(-1)
    return out.gather(1, first[:, None] + torch.arange(length))


@pytest.mark.parametrize("align", ["completion", "sequence"])
@pytest.mark.parametrize("p", [6, 8])
def test_equals_each_block_with_its_clean_context(model, align, p):
    prompt, completion, view, mask = batch(p)

    def run(m):  # the one [noised | clean] pass and the blocks' own passes: tolerance from float32's error
        got = block_token_logps(m, torch.cat([prompt, view], 1), completion, block_length=B, align=align,
                                prompt_mask=mask)  # fmt: skip
        return got, separately(m, prompt, completion, view, mask, align)

    forward_passes_agree("the view's log-probs", run, model, p + 2 * completion.shape[1])  # (tests/float_error.py)


def test_gradients_and_sequence_logits(model):
    prompt, completion, view, _ = batch()
    ids = torch.cat([prompt, view], 1)
    logp = block_token_logps(model, ids, completion, block_length=B)
    logp.sum().backward()
    assert model.tok.weight.grad is not None and model.tok.weight.grad.abs().sum() > 0
    model.zero_grad()

    def run(m):  # sequence_logits' log-probs and block_token_logps': two codes, tolerance from float32's error
        with torch.no_grad():
            logits = sequence_logits(m, ids, torch.cat([prompt, completion], 1), 6, block_length=B)  # [N, T, V]
            ref = block_token_logps(m, ids, completion, block_length=B)
        assert logits.shape[1] == 16 and (logits[:, :6] == 0).all()
        return torch.log_softmax(logits[:, 6:], -1).gather(-1, completion[..., None]).squeeze(-1), ref

    forward_passes_agree("the log-probs", run, model, 2 * ids.shape[1])  # (tests/float_error.py; [noised | clean])


def sdar_block_diff_mask(q_idx, kv_idx, block_size, n):
    """JetAstra/SDAR ``block_diff_mask`` (c2041a8), transcribed (b, h dropped)."""
    x0_flag_q, x0_flag_kv = q_idx >= n, kv_idx >= n
    block_q = torch.where(x0_flag_q == 1, (q_idx - n) // block_size, q_idx // block_size)
    block_kv = torch.where(x0_flag_kv == 1, (kv_idx - n) // block_size, kv_idx // block_size)
    block_diagonal = (block_q == block_kv) & (x0_flag_q == x0_flag_kv)
    offset_block_causal = (block_q > block_kv) & (x0_flag_kv == 1) & (x0_flag_q == 0)
    block_causal = (block_q >= block_kv) & (x0_flag_kv == 1) & (x0_flag_q == 1)
    return block_diagonal | offset_block_causal | block_causal


@pytest.mark.parametrize("p", [0, 3, 6, 8])
def test_mask_is_sdars_block_diff_mask(p):
    t = p + 10
    prompt, completion = torch.randint(4, V, (1, p)), torch.randint(4, V, (1, 10))
    inp = block_diffusion_input(prompt, completion, completion, block_length=B, align="sequence")
    idx = torch.arange(2 * t)
    sdar = sdar_block_diff_mask(idx[:, None], idx[None, :], B, t)  # [2T, 2T] over [x_t | x_0]
    keep = torch.cat([torch.arange(inp.start, t), torch.arange(t, 2 * t)])  # the noised blocks ddmrl builds
    assert torch.equal(inp.attention[0], sdar[keep][:, keep])
    assert inp.start == (p // B) * B
    assert torch.equal(inp.position_ids[0], torch.cat([torch.arange(inp.start, t), torch.arange(t)]))


def tracerl_attention(n, start_pos, block_size):
    """dLLM-RL ``make_basic_block_attention`` (10b4fd1, train/train_sdar_policy.py), transcribed: [1, 1, N, N]."""
    L0 = start_pos
    L1 = (n - L0) // 2
    bias = torch.full((1, 1, n, n), 0)
    rows, rows_token = torch.arange(L0 + L1, L0 + 2 * L1), torch.arange(L0, L0 + L1)
    for bi in range((L1 + block_size - 1) // block_size):
        left_end = L0 + min(bi * block_size, L1)
        right_start = L0 + L1 + (left_end - L0)
        i_start, i_end = bi * block_size, min((bi + 1) * block_size, L1)
        block_rows = rows[i_start:i_end]
        bias[:, :, block_rows.unsqueeze(-1), 0:left_end] = 1
        bias[:, :, block_rows.unsqueeze(-1), right_start : (right_start + block_size)] = 1
        block_rows = rows_token[i_start:i_end]
        left_end = L0 + min((bi + 1) * block_size, L1)
        bias[:, :, block_rows.unsqueeze(-1), 0:left_end] = 1
    if L0 > 0:
        for bi in range((L0 + block_size - 1) // block_size):
            row_end, row_start = max(L0 - bi * block_size, 0), max(L0 - (bi + 1) * block_size, 0)
            if row_end > row_start:
                bias[:, :, torch.arange(row_start, row_end).unsqueeze(-1), 0:row_end] = 1
    return bias


def tracerl_process_pad(attn, input_ids, start_pos, pad_id):
    """dLLM-RL ``process_pad`` (10b4fd1), transcribed."""
    cols = torch.arange(input_ids.shape[1])
    key_mask = (cols < start_pos).unsqueeze(0) & (input_ids == pad_id)
    attn.masked_fill_(key_mask[:, None, None, :], 0)
    a = attn[:, 0]
    bad = (a.sum(dim=-1) == 0) & (torch.arange(a.size(1)).unsqueeze(0) < start_pos)
    b, r = bad.nonzero(as_tuple=True)
    a[b, r, :] = 0
    a[b, r, r] = 1
    return attn


@pytest.mark.parametrize("length", [8, 10])  # 10: a shorter last block
def test_mask_is_tracerls_training_mask(length):
    prompt, completion, view, mask = batch(6, length)
    inp = block_diffusion_input(prompt, completion, view, block_length=B, align="completion", prompt_mask=mask)
    p, n = 6, 6 + 2 * length
    ids = torch.cat([prompt, completion, view], 1)  # TraceRL's order: [prompt | clean | noised]
    ref = tracerl_process_pad(tracerl_attention(n, p, B).repeat(3, 1, 1, 1), ids, p, 1)[:, 0].bool()
    order = torch.cat([torch.arange(length, length + p + length), torch.arange(length)])  # ours -> TraceRL's
    ours = inp.attention[:, order][:, :, order]
    real = torch.cat([mask.bool(), torch.ones(3, 2 * length, dtype=torch.bool)], 1)  # pad queries' rows differ
    assert torch.equal(ours[real], ref[real])
    assert torch.equal(inp.input_ids[:, order], ids)
