"""The real ``SDARForCausalLM`` (tiny, random) under ddmrl's block diffusion: ``SAMPLERS["block"]`` through
:class:`ddmrl.models.sdar.SDARBlockModel` (SDAR's own ``DynamicCache`` with ``store_kv``) against a transcription of
SDAR's released HF sampler, and ``ddmrl.likelihood.block.block_token_logps`` against a transcription of TraceRL's
SDAR training log-probabilities, on identical inputs.

Transcribed (below, kept as released but for the lines marked ``# ddmrl:``):

* ``block_diffusion_generate`` with ``sample_with_temperature_topk_topp``, ``top_k_logits``, ``top_p_logits`` and
  ``get_num_transfer_tokens``: Gen-Verse/dLLM-RL at 10b4fd1cba83e4496c20585dc2fd01dc02f20255, ``generate.py`` (adapted
  there from JetAstra/SDAR ``generate.py``; dLLM-RL's copy adds the ``[:, None]`` that its ``modeling_sdar.py``, the
  reference copy here, needs for a 4-D mask). TraDo's own rollouts use the same rules in jetengine (Triton), which
  a CPU cannot run.
* TraceRL's SDAR policy log-probabilities: Gen-Verse/dLLM-RL at 10b4fd1, ``train/train_sdar_policy.py``
  (``make_basic_block_attention``, ``process_pad``, ``forward_process``'s logits -> log-softmax -> gather) and the
  position ids of ``train/rl_sdar.py`` ``collect_training_data`` (``tok_idx``, ``tok_idx_ext``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from float_error import forward_passes_agree
from real_sdar import EOS, MASK, needs_sdar, sdar_checkpoint, sharpen, tokenizer

from ddmrl.likelihood.block import block_token_logps
from ddmrl.models import compat
from ddmrl.models.sdar import SDARBlockModel
from ddmrl.samplers import SAMPLERS
from ddmrl.samplers.block import generate

pytestmark = needs_sdar


@pytest.fixture(scope="module")
def sdar(tmp_path_factory):
    """Weights drawn wider than SDAR's 0.02 and a sharpened head: greedy completions vary with the prompt and
    thresholds commit several tokens per pass (at 0.02 every position predicts the same token)."""
    model = sdar_checkpoint(tmp_path_factory.mktemp("hub") / "sdar", tokenizer(), initializer_range=0.5)
    sharpen(model, 3.0)
    return model


class MaskNeverProposed:
    """The reference's model call with the mask token's logit at -inf, as ddmrl's sampler sets it (ddmrl never
    proposes the mask token; SDAR's sampler may, and would then leave the position masked)."""

    def __init__(self, model):
        self.model, self.device = model, model.device

    def eval(self):
        return self

    def __call__(self, *args, **kwargs):
        out = self.model(*args, **kwargs)
        out.logits[..., MASK] = -torch.inf
        return out


# ------------------------------------------------------------------------------------------------ transcriptions
# Gen-Verse/dLLM-RL@10b4fd1 generate.py (from JetAstra/SDAR generate.py)


def top_k_logits(logits, k):
    if k <= 0:
        return logits
    else:
        values, _ = torch.topk(logits, k)
        min_values = values[..., -1, None]
        return torch.where(logits < min_values, torch.full_like(logits, float("-inf")), logits)


def top_p_logits(logits, p):
    sorted_logits, sorted_indices = torch.sort(logits, descending=True)
    cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
    sorted_mask = cumulative_probs > p
    sorted_mask[..., 1:] = sorted_mask[..., :-1].clone()
    sorted_mask[..., 0] = False
    mask_indices = torch.scatter(torch.full_like(logits, False, dtype=torch.bool), -1, sorted_indices, sorted_mask)
    logits = logits.masked_fill(mask_indices, float("-inf"))
    return logits


def sample_with_temperature_topk_topp(logits, temperature=1.0, top_k=0, top_p=1.0):
    orig_shape = logits.shape[:-1]  # [batch, block]
    vocab_size = logits.shape[-1]

    logits = logits.reshape(-1, vocab_size)  # [batch*block, vocab]

    if temperature != 1.0:
        logits = logits / temperature
    if top_k > 0:
        logits = top_k_logits(logits, top_k)
    if top_p < 1.0:
        logits = top_p_logits(logits, top_p)
    probs = F.softmax(logits, dim=-1)  # shape: [batch*block, vocab]
    assert probs.dim() == 2
    token = torch.multinomial(probs, num_samples=1)  # [batch*block, 1]
    token_prob = torch.gather(probs, -1, token)  # [batch*block, 1]

    return token.view(*orig_shape), token_prob.view(*orig_shape)


def get_num_transfer_tokens(block_length, steps):
    base = block_length // steps
    remainder = block_length % steps
    num_transfer_tokens = torch.zeros(steps, dtype=torch.int64) + base
    num_transfer_tokens[:remainder] += 1
    return num_transfer_tokens


@torch.no_grad()
def block_diffusion_generate(
    model,
    prompt,
    mask_id,
    gen_length=128,
    block_length=8,
    denoising_steps=8,
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    remasking_strategy="low_confidence_dynamic",
    confidence_threshold=0.85,
    stopping_criteria_idx=None,
):
    model.eval()
    input_ids = prompt["input_ids"]
    prompt_length = input_ids.shape[1]
    past_key_values = compat.layer_indexable_cache()  # ddmrl: DynamicCache() (5.x's cannot be indexed by layer)

    num_blocks = (prompt_length + gen_length + block_length - 1) // block_length
    total_length = num_blocks * block_length

    block_mask = torch.tril(torch.ones(num_blocks, num_blocks, device=model.device))
    block_diffusion_attention_mask = (
        block_mask.repeat_interleave(block_length, dim=0).repeat_interleave(block_length, dim=1).unsqueeze(0)
    )
    position_ids = torch.arange(total_length, device=model.device).unsqueeze(0)

    x = torch.full((1, total_length), mask_id, dtype=torch.long, device=model.device)
    x[:, :prompt_length] = input_ids
    prefill_blocks = prompt_length // block_length
    prefill_length = prefill_blocks * block_length

    # Prefill stage
    if prefill_length > 0:
        cur_x = x[:, :prefill_length]
        cur_attn_mask = block_diffusion_attention_mask[:, :prefill_length, :prefill_length]
        if cur_attn_mask.dim() == 3:
            cur_attn_mask = cur_attn_mask[:, None, :, :]
        cur_position_ids = position_ids[:, :prefill_length]
        model(
            cur_x,
            attention_mask=cur_attn_mask,
            position_ids=cur_position_ids,
            past_key_values=past_key_values,
            use_cache=True,
            store_kv=True,
        )

    num_transfer_tokens = get_num_transfer_tokens(block_length, denoising_steps)

    # Decode stage
    for num_block in range(prefill_blocks, num_blocks):
        cur_x = x[:, num_block * block_length : (num_block + 1) * block_length].clone()
        cur_attn_mask = block_diffusion_attention_mask[
            :, num_block * block_length : (num_block + 1) * block_length, : (num_block + 1) * block_length
        ]
        if cur_attn_mask.dim() == 3:
            cur_attn_mask = cur_attn_mask[:, None, :, :]
        cur_position_ids = position_ids[:, num_block * block_length : (num_block + 1) * block_length]
        for step in range(denoising_steps + 1):
            mask_index = cur_x == mask_id
            if mask_index.sum() == 0:
                # Store kv cache
                model(
                    cur_x,
                    attention_mask=cur_attn_mask,
                    position_ids=cur_position_ids,
                    past_key_values=past_key_values,
                    use_cache=True,
                    store_kv=True,
                )
                break

            # Denosing
            logits = model(
                cur_x,
                attention_mask=cur_attn_mask,
                position_ids=cur_position_ids,
                past_key_values=past_key_values,
                use_cache=True,
                store_kv=False,
            ).logits

            # Sampling
            x0, x0_p = sample_with_temperature_topk_topp(logits, temperature=temperature, top_k=top_k, top_p=top_p)

            # Sampling strategy
            if remasking_strategy == "sequential":
                transfer_index = torch.zeros_like(x0, dtype=torch.bool)
                for j in range(cur_x.shape[0]):
                    if mask_index[j].any():
                        first_mask_index = mask_index[j].nonzero(as_tuple=True)[0].min().item()
                        transfer_index[j, first_mask_index : first_mask_index + num_transfer_tokens[step]] = True
                    else:
                        raise ValueError("No mask tokens found in the current block.")

            elif remasking_strategy == "low_confidence_static":
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
                    num_high_confidence = high_conf_mask.sum()
                    if num_high_confidence >= num_transfer_tokens[step]:
                        transfer_index[j] = high_conf_mask
                    else:
                        _, idx = torch.topk(confidence[j], num_transfer_tokens[step])
                        transfer_index[j, idx] = True
            else:
                raise ValueError(f"Unknown remasking strategy: {remasking_strategy}")

            cur_x[transfer_index] = x0[transfer_index]

        x[:, num_block * block_length : (num_block + 1) * block_length] = cur_x
        if stopping_criteria_idx is not None and any(
            stop_idx in x[:, prompt_length:] for stop_idx in stopping_criteria_idx
        ):
            break

    return x


# Gen-Verse/dLLM-RL@10b4fd1 train/train_sdar_policy.py (make_basic_block_attention, process_pad, forward_process)
# and train/rl_sdar.py (collect_training_data: tok_idx, tok_idx_ext)


def make_basic_block_attention(
    N: int,
    start_pos: int,  # = L0
    block_size: int,  # = b
) -> torch.Tensor:
    B = 1
    L0 = start_pos
    L1 = (N - L0) // 2  # N = L0 + 2·L1
    assert L0 + 2 * L1 == N, "input length must be L0 + 2*L1"

    # all -inf first
    bias = torch.full((B, 1, N, N), 0)

    rows = torch.arange(L0 + L1, L0 + 2 * L1)  # (L1,)
    rows_token = torch.arange(L0, L0 + L1)  # (L1,)

    # update block by block
    for bi in range((L1 + block_size - 1) // block_size):
        #  [bi*b , min((bi+1)*b, L1))
        left_end = L0 + min((bi) * block_size, L1)
        right_start = L0 + L1 + (left_end - L0)

        i_start = bi * block_size
        i_end = min((bi + 1) * block_size, L1)  # no i_end

        block_rows = rows[i_start:i_end]
        bias[:, :, block_rows.unsqueeze(-1), 0:left_end] = 1
        bias[:, :, block_rows.unsqueeze(-1), right_start : (right_start + block_size)] = 1

        block_rows = rows_token[i_start:i_end]
        left_end = L0 + min((bi + 1) * block_size, L1)
        bias[:, :, block_rows.unsqueeze(-1), 0:left_end] = 1

    if L0 > 0:
        num_blocks_pre = (L0 + block_size - 1) // block_size
        for bi in range(num_blocks_pre):
            # row interval [row_start, row_end)
            row_end = max(L0 - bi * block_size, 0)
            row_start = max(L0 - (bi + 1) * block_size, 0)
            if row_end > row_start:
                block_rows = torch.arange(row_start, row_end)
                bias[:, :, block_rows.unsqueeze(-1), 0:row_end] = 1

    return bias  # (B,1,N,N)


def process_pad(attn, input_ids, L0, L1, start_pos, pad_id):  # ddmrl: L0, L1, start_pos, pad_id were closed over
    N = L0 + 2 * L1
    device = input_ids.device

    cols = torch.arange(N, device=device)  # (N,)
    key_mask = (cols < start_pos).unsqueeze(0) & (input_ids == pad_id)  # (B, N)

    # set -inf
    attn.masked_fill_(key_mask[:, None, None, :], 0)

    # aviod +-inf or none in forward
    A = attn[:, 0]  # (B, N, N)
    bad = (A.sum(dim=-1) == 0) & (torch.arange(A.size(1), device=A.device).unsqueeze(0) < start_pos)
    b, r = bad.nonzero(as_tuple=True)
    A[b, r, :] = 0
    A[b, r, r] = 1

    return attn


def tracerl_token_logps(model, input_ids, noised, start_pos, block_size, pad_id):
    """``forward_process``'s ``logp_new_tok`` [B, L0 + L1] for the left-padded prompt + clean completion
    ``input_ids`` [B, L0 + L1] and the noised completion ``noised`` [B, L1] (``extended_input_ids``)."""
    extended_input_ids = torch.cat([input_ids, noised], dim=1)  # ddmrl: one_round_vectorized's layout
    B, L = input_ids.shape
    L0 = start_pos
    L1 = L - L0
    # rl_sdar.py collect_training_data
    labels = extended_input_ids[:, :L].clone()
    idx = torch.arange(L).unsqueeze(0).expand(extended_input_ids.shape[0], -1)
    valid = (idx >= start_pos) | extended_input_ids[:, :L].ne(pad_id)
    tok_idx = valid.long().cumsum(dim=-1) - 1
    tok_idx = tok_idx.masked_fill(~valid, 1)
    tok_idx_resp = tok_idx[:, start_pos:]
    tok_idx_ext = torch.cat([tok_idx, tok_idx_resp], dim=1)
    # train_sdar_policy.py forward_process
    basic_block_attention = make_basic_block_attention(L0 + 2 * L1, start_pos, block_size)
    attention_mask = basic_block_attention.clone()
    attention_mask = attention_mask.repeat_interleave(B, dim=0)
    attention_mask = process_pad(attention_mask, extended_input_ids, L0, L1, start_pos, pad_id)

    logits = model(input_ids=extended_input_ids, attention_mask=attention_mask, position_ids=tok_idx_ext).logits
    logits = torch.cat([logits[:, :L0, :], logits[:, L0 + L1 :, :]], dim=1)  # (B, L0+L1, V)

    log_probs = F.log_softmax(logits, dim=-1)

    logp_new_tok = log_probs.gather(dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return logp_new_tok


# ------------------------------------------------------------------------------------------------ tests


def prompts(n: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(10, 100, (n, length), generator=torch.Generator().manual_seed(seed))


#: (block_length, steps, strategy, threshold, prompt length, gen_length): P + gen a multiple of the block (SDAR
#: denoises whole blocks; ddmrl's last block ends with the completion). A pass never has to commit more than the
#: block's masked count: where it would (a threshold pass committed several, then a fixed count k_s > the masks
#: left; or the prompt's tail in the first block under a static count), SDAR's topk takes non-masked positions too
#: and overwrites committed or prompt tokens; ddmrl commits at most the masks (docs/families.md, block diffusion)
GREEDY = [
    (4, 4, "low_confidence_static", None, 6, 10),
    (4, 2, "low_confidence_static", None, 8, 8),
    (4, 4, "low_confidence_dynamic", 0.7, 6, 10),
    (4, 4, "low_confidence_dynamic", 0.3, 8, 8),
    (4, 4, "low_confidence_dynamic", 0.85, 5, 11),
    (2, 2, "low_confidence_static", None, 7, 9),
    (2, 1, "low_confidence_dynamic", 0.5, 8, 8),
]


@pytest.mark.parametrize(("block", "steps", "strategy", "threshold", "p", "gen"), GREEDY)
def test_greedy_batch_equals_sdars_sampler(sdar, monkeypatch, block, steps, strategy, threshold, p, gen):
    """ddmrl's block sampler on a batch of 3 prompts (align sequence, SDAR's grid) against SDAR's
    ``block_diffusion_generate`` on each prompt alone, greedy: the reference's draw is its multinomial replaced by
    the argmax (its confidences are then softmax(logits) of the argmax, what ddmrl's temperature 0 uses)."""
    x = prompts(3, p, seed=block * 10 + steps)
    model = SDARBlockModel(sdar)
    out = SAMPLERS["block"](
        model, x, gen, mask_id=MASK, block_length=block, steps=steps, temperature=0.0,
        parallel="none" if threshold is None else "threshold", threshold=threshold or 0.9, align="sequence",
    )  # fmt: skip
    monkeypatch.setattr(torch, "multinomial", lambda probs, num_samples: probs.argmax(-1, keepdim=True))
    for row in range(3):
        ref = block_diffusion_generate(
            MaskNeverProposed(sdar), {"input_ids": x[row : row + 1]}, MASK, gen_length=gen, block_length=block,
            denoising_steps=steps, remasking_strategy=strategy, confidence_threshold=threshold or 0.9,
        )  # fmt: skip
        assert torch.equal(ref[0, :p], x[row]) and not (ref == MASK).any()
        assert torch.equal(out.completion_ids[row], ref[0, p:]), (row, out.completion_ids[row], ref[0, p:])
    assert len(out.completion_ids.unique()) > 3, "a degenerate model would make the comparison trivial"


def test_a_threshold_commits_several_tokens_per_pass(sdar):
    x = prompts(3, 8, seed=42)
    kw = dict(mask_id=MASK, block_length=4, steps=4, temperature=0.0, align="sequence")
    fixed = generate(SDARBlockModel(sdar), x, 8, **kw)
    rule = generate(SDARBlockModel(sdar), x, 8, parallel="threshold", threshold=0.3, **kw)
    assert rule.nfe < fixed.nfe and (rule.completion_ids != MASK).all()


SAMPLED = [  # (block_length, steps, strategy, threshold, top_k, top_p, seed); as GREEDY, k_s never above the masks
    (4, 4, "low_confidence_static", None, 0, 1.0, 0),
    (4, 4, "low_confidence_dynamic", 0.5, 8, 1.0, 1),
    (4, 4, "low_confidence_dynamic", 0.85, 0, 0.9, 2),
    (2, 2, "low_confidence_static", None, 5, 0.8, 3),
]


@pytest.mark.parametrize(("block", "steps", "strategy", "threshold", "top_k", "top_p", "seed"), SAMPLED)
def test_sampled_equals_sdars_sampler(sdar, block, steps, strategy, threshold, top_k, top_p, seed):
    """Temperature 1 with top-k / top-p, one prompt: ddmrl's ``generator`` seeded as SDAR's global generator draws
    the same numbers in the same order (one multinomial over the block's positions per pass)."""
    p, gen = 8, 8
    x = prompts(1, p, seed=100 + seed)
    out = generate(
        SDARBlockModel(sdar), x, gen, mask_id=MASK, block_length=block, steps=steps, temperature=1.0,
        top_k=top_k or None, top_p=top_p, parallel="none" if threshold is None else "threshold",
        threshold=threshold or 0.9, align="sequence", generator=torch.Generator().manual_seed(seed),
    )  # fmt: skip
    torch.manual_seed(seed)
    ref = block_diffusion_generate(
        MaskNeverProposed(sdar), {"input_ids": x}, MASK, gen_length=gen, block_length=block, denoising_steps=steps,
        top_k=top_k, top_p=top_p, remasking_strategy=strategy, confidence_threshold=threshold or 0.9,
    )  # fmt: skip
    assert torch.equal(out.completion_ids[0], ref[0, p:])


def test_cached_sampling_equals_recomputation_on_sdar(sdar):
    """SDAR's own cache is exact inside the sampler: kv_cache on and off give the same tokens and reveal steps on a
    left-padded batch (align completion, TraceRL's grid)."""
    x = prompts(3, 7, seed=7)
    x[1, :3] = EOS
    mask = (torch.arange(7)[None] >= torch.tensor([[0], [3], [0]])).long()
    kw = dict(mask_id=MASK, block_length=4, steps=2, temperature=0.0, parallel="threshold", threshold=0.5)
    cached = generate(SDARBlockModel(sdar), x, 8, attention_mask=mask, **kw)
    recomputed = generate(SDARBlockModel(sdar), x, 8, attention_mask=mask, kv_cache=False, **kw)
    assert torch.equal(cached.completion_ids, recomputed.completion_ids)
    assert torch.equal(cached.reveal_step, recomputed.reveal_step)
    alone = generate(SDARBlockModel(sdar), x[1:2, 3:], 8, **kw)
    assert torch.equal(cached.completion_ids[1], alone.completion_ids[0]), "a padded row gives the row alone"


@pytest.mark.parametrize(("block", "length"), [(4, 10), (2, 7), (4, 8)])
def test_block_logps_equal_tracerls(sdar, block, length):
    """ddmrl's block-diffusion token log-probabilities (align completion) against TraceRL's on the same left-padded
    prompts, completions and noised copies: the completion's log-probs equal to float tolerance."""
    g = torch.Generator().manual_seed(block * 100 + length)
    p = 6
    prompt = torch.randint(10, 100, (3, p), generator=g)
    prompt[0, :2] = EOS  # left pads
    prompt[2, :4] = EOS
    prompt_mask = (prompt != EOS).long()
    completion = torch.randint(10, 100, (3, length), generator=g)
    completion[1, -2:] = EOS  # EOS in the completion is a token, not a pad
    noised = completion.masked_fill(torch.rand(3, length, generator=g) < 0.5, MASK)

    def run(network):  # two codes of the same log-probs: tolerance from float32's error (tests/float_error.py)
        with torch.no_grad():
            want = tracerl_token_logps(network, torch.cat([prompt, completion], 1), noised, p, block, EOS)[:, p:]
            got = block_token_logps(
                SDARBlockModel(network), torch.cat([prompt, noised], 1), completion, block_length=block,
                align="completion", prompt_mask=prompt_mask,
            )  # fmt: skip
        assert got.shape == (3, length)
        return got, want.float()

    forward_passes_agree("the completion's log-probs", run, sdar, p + 2 * length)  # [prompt | clean | noised]
    with torch.no_grad():
        want = tracerl_token_logps(sdar, torch.cat([prompt, completion], 1), noised, p, block, EOS)[:, p:]
    if p % block:  # SDAR's sampling grid (align sequence) is another input: TraceRL trains on the completion's
        with torch.no_grad():
            other = block_token_logps(
                SDARBlockModel(sdar), torch.cat([prompt, noised], 1), completion, block_length=block,
                align="sequence", prompt_mask=prompt_mask,
            )  # fmt: skip
        assert not torch.allclose(other, want.float(), atol=1e-3)


def test_training_mode_gives_logits_and_gradients(sdar):
    """``fuse_cross_entropy`` off (TraceRL's setting, load_sdar's): in training mode the real class returns logits,
    and the block-diffusion log-probs carry gradients to the LoRA targets' weights."""
    sdar.config.fuse_cross_entropy = False  # as load_sdar sets it (the fixture builds the class directly)
    sdar.train()
    try:
        completion = prompts(2, 8, seed=9)
        view = torch.cat([prompts(2, 5, seed=8), completion.masked_fill(torch.arange(8) % 3 == 0, MASK)], 1)
        logps = block_token_logps(SDARBlockModel(sdar), view, completion, block_length=4)
        logps.sum().backward()
        grad = sdar.model.layers[0].self_attn.q_proj.weight.grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    finally:
        sdar.zero_grad(set_to_none=True)
        sdar.eval()


# ------------------------------------------------------------------------------------------------ the releases' quirks


@pytest.mark.parametrize("steps", [4, 2])
def test_all_ties_follow_the_releases_topk_with_release_topk(sdar, steps):
    """Top-k 1: every proposal's confidence is exactly 1, so which positions a pass of SDAR's static rule commits is
    only torch.topk's order among ties (on this CPU the last tied position first). ``selection: release_topk`` gives
    the release's tokens; the default (ties to the lower index) differs from it (measured: 7 of 8 tokens at 4 steps,
    one prompt)."""
    p, gen = 8, 8
    x = prompts(1, p, seed=5)
    torch.manual_seed(0)
    ref = block_diffusion_generate(
        MaskNeverProposed(sdar), {"input_ids": x}, MASK, gen_length=gen, block_length=4, denoising_steps=steps,
        top_k=1, remasking_strategy="low_confidence_static",
    )[0, p:]  # fmt: skip
    kw = dict(mask_id=MASK, block_length=4, steps=steps, temperature=1.0, top_k=1, align="sequence")
    release = generate(SDARBlockModel(sdar), x, gen, selection="release_topk", **kw).completion_ids[0]
    stable = generate(SDARBlockModel(sdar), x, gen, **kw).completion_ids[0]
    assert torch.equal(release, ref)
    assert int((stable != ref).sum()) > 0, "the all-ties case must separate the two rules"


@pytest.fixture(scope="module")
def sdar_bf16(sdar):
    import copy

    return copy.deepcopy(sdar).to(torch.bfloat16)


def test_bfloat16_softmax_is_sdars_with_softmax_dtype_logits(sdar_bf16):
    """A bfloat16 SDAR: the release samples from its model's bfloat16 softmax (SDAR does not upcast its logits) with
    its own KV cache, as ddmrl's cached sampler does. ``softmax_dtype: logits`` with ``selection: release_topk``
    (ties are common among bfloat16 confidences) gives the release's tokens in all 36 sampled completions here (the
    4 SAMPLED settings x 9 seeds); ddmrl's float32 softmax (the default) differs in some (measured on a CPU: 3 of
    these 36, 15 tokens; 6 of 144 completions over 36 seeds per setting, 31 tokens)."""
    differ = 0
    for block, steps, strategy, threshold, top_k, top_p, seed0 in SAMPLED:
        for seed in range(40 * seed0 + 16, 40 * seed0 + 25):
            x = prompts(1, 8, seed=100 + seed)
            torch.manual_seed(seed)
            ref = block_diffusion_generate(
                MaskNeverProposed(sdar_bf16), {"input_ids": x}, MASK, gen_length=8, block_length=block,
                denoising_steps=steps, top_k=top_k, top_p=top_p, remasking_strategy=strategy,
                confidence_threshold=threshold or 0.9,
            )[0, 8:]  # fmt: skip
            kw = dict(mask_id=MASK, block_length=block, steps=steps, temperature=1.0, top_k=top_k or None, top_p=top_p,
                      parallel="none" if threshold is None else "threshold", threshold=threshold or 0.9,
                      align="sequence")  # fmt: skip
            release = generate(SDARBlockModel(sdar_bf16), x, 8, softmax_dtype="logits", selection="release_topk",
                               generator=torch.Generator().manual_seed(seed), **kw)  # fmt: skip
            assert torch.equal(release.completion_ids[0], ref), (block, steps, strategy, seed)
            plain = generate(SDARBlockModel(sdar_bf16), x, 8, generator=torch.Generator().manual_seed(seed), **kw)
            differ += not torch.equal(plain.completion_ids[0], ref)
    assert differ > 0, "the bfloat16 softmax matters on this model (3 of 36 measured on a CPU)"


#: (block_length, padded prompt length, each row's prompt length, gen_length): rows with several pad counts modulo
#: the block, and (7, 3, 7) + 9: every row padded and filling whole blocks
PADDED = [(4, 8, (8, 5, 6), 8), (4, 8, (7, 3, 7), 9), (2, 8, (8, 5, 6, 7), 8)]


@pytest.mark.parametrize(("block", "p", "lengths", "gen"), PADDED)
def test_padded_rows_take_sdars_grid_from_their_first_token(sdar, monkeypatch, block, p, lengths, gen):
    """``align: sequence`` on a left-padded batch: SDAR's ``block_diffusion_generate`` takes one prompt and counts
    blocks from its first token, so each row's blocks count from its first real token (the row moved left by its pad
    count modulo the block). Greedy, static rule, one token per pass: each row equals the release on its prompt
    alone, every token where prompt + completion fill whole blocks, and the tokens before the last (partial) block
    elsewhere (the release rounds the canvas up and denoises extra masks there: docs/families.md). Blocks counted
    from the padded canvas's start (ddmrl before) differed from the release (measured: the 5-token row beside the
    8-token one in 3 of its 7 tokens before the partial last block with blocks of 4)."""
    x = prompts(len(lengths), p, seed=11)
    pads = torch.tensor([p - n for n in lengths])
    mask = (torch.arange(p)[None] >= pads[:, None]).long()
    x = x.masked_fill(mask == 0, EOS)
    out = generate(
        SDARBlockModel(sdar), x, gen, mask_id=MASK, block_length=block, steps=block, temperature=0.0,
        align="sequence", attention_mask=mask,
    )  # fmt: skip
    monkeypatch.setattr(torch, "multinomial", lambda probs, num_samples: probs.argmax(-1, keepdim=True))
    for row, n in enumerate(lengths):
        whole = (n + gen) // block * block - n  # the completion tokens before a partial last block
        extra = -(n + gen) % block  # the masks the release adds to fill the last block
        ref = block_diffusion_generate(
            MaskNeverProposed(sdar), {"input_ids": x[row : row + 1, p - n :]}, MASK, gen_length=gen + extra,
            block_length=block, denoising_steps=block, remasking_strategy="low_confidence_static",
        )[0, n : n + gen]  # fmt: skip
        assert torch.equal(out.completion_ids[row, :whole], ref[:whole]), (row, out.completion_ids[row], ref)
