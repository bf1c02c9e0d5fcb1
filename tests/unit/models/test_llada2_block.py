"""LLaDA 2.x's block-diffusion training view (what DARE trains LLaDA 2.x on) on the real ``LLaDA2MoeModelLM``.

The transcription below restates, in our words, what yjyddq/DARE (commit 83ae8a305a53a914cce563aedceeac88566891cb)
computes for a LLaDA 2.x actor: ``verl/workers/actor/llada2_dp_actor_bgpo.py`` (``_forward_micro_batch``,
``_compute_block_diffusion_token_losses``; the cj_grpo and ebpo actors build the same input) with
``verl/workers/actor/block_diffusion_utils.py`` (``compact_block_diffusion_artifacts``, ``build_token_block_ids``,
``build_block_diffusion_mask``'s ``mask_mod``, ``build_full_block_diffusion_tensors``) and
``verl/models/transformers/llada2.py`` (``llada2_block_diffusion_lm_forward``):

* each row is compacted to its valid tokens (left prompt pads and right response pads removed), keeping the
  rollout's position ids (counted from the first real token);
* block ids: compact index // block_size (``block_origin = "global"``, the trainer's default and what the release's
  own ``generate`` uses: blocks from position 0 of the prompt);
* the model input is ``[noisy | clean]`` (2S tokens), positions ``[pos | pos]``, under the BD3LM mask: a query sees a
  key iff both are valid and (same block and same half) or (query noisy, key clean, key's block earlier) or (both
  clean, key's block not later). DARE evaluates this ``mask_mod`` with FlexAttention; here it is evaluated densely
  and passed to the class's own SDPA attention as an additive mask (the same attention weights);
* the token loss is ``cross_entropy(logits, clean token) / p_mask`` at the noisy half's masked response positions,
  and a sample's log-likelihood estimate is minus its sum. The log-probabilities below are the per-token
  ``-cross_entropy`` before the division by ``p_mask`` (a method's weight, not the view's).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from float_error import forward_passes_agree
from real_llada2 import EOS, MASK, VERSIONS, llada2_checkpoint, needs_llada2, tokenizer

from ddmrl.likelihood.block import block_token_logps
from ddmrl.models.llada2 import LLaDA2BlockModel, block_logits

pytestmark = needs_llada2


@pytest.fixture(scope="module", params=VERSIONS)
def model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("hub") / request.param
    return llada2_checkpoint(path, tokenizer(request.param), request.param)


def dare_token_logps(
    model, input_ids, attention_mask, position_ids, noisy_ids, target_mask, prompt_section, block_size
) -> torch.Tensor:
    """Transcription (see the module docstring): log p(x0_j | [noisy | clean]) at the targets, [B, R] (0 elsewhere)."""
    batch, _ = input_ids.shape
    valid = attention_mask.bool()
    lengths = valid.sum(1)
    s = int(lengths.max())
    noisy = torch.full((batch, s), EOS)
    clean = torch.full((batch, s), EOS)
    cvalid = torch.zeros(batch, s, dtype=torch.bool)
    ctarget = torch.zeros(batch, s, dtype=torch.bool)
    cpos = torch.zeros(batch, s, dtype=torch.long)
    where = torch.full((batch, s), -1)
    for b in range(batch):
        idx = valid[b].nonzero().flatten()
        n = len(idx)
        noisy[b, :n], clean[b, :n], cpos[b, :n] = noisy_ids[b, idx], input_ids[b, idx], position_ids[b, idx]
        cvalid[b, :n] = True
        is_response = idx >= prompt_section
        ctarget[b, :n] = target_mask[b, idx].bool() & is_response
        where[b, :n] = torch.where(is_response, idx - prompt_section, -1)
    block_ids = torch.where(cvalid, torch.arange(s)[None].expand(batch, -1) // block_size, -1)  # "global"
    q = torch.arange(2 * s)
    q_clean, q_tok = q >= s, q % s
    allowed = torch.zeros(batch, 2 * s, 2 * s, dtype=torch.bool)
    for b in range(batch):
        qb, kb = block_ids[b, q_tok][:, None], block_ids[b, q_tok][None, :]
        qc, kc = q_clean[:, None], q_clean[None, :]
        qv, kv = cvalid[b, q_tok][:, None], cvalid[b, q_tok][None, :]
        diagonal = (qb == kb) & (qc == kc)
        offset_causal = (qb > kb) & kc & ~qc
        causal = (qb >= kb) & kc & qc
        allowed[b] = qv & kv & (diagonal | offset_causal | causal)
    full_ids = torch.cat([noisy, clean], 1)
    full_pos = torch.cat([cpos, cpos], 1)
    dtype = model.get_input_embeddings().weight.dtype
    bias = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]
    hidden = model.model(input_ids=full_ids, attention_mask=bias, position_ids=full_pos, use_cache=False)[0]
    logits = model.lm_head(hidden[:, :s]).float()  # the noisy half
    nll = F.cross_entropy(logits.transpose(1, 2), clean, reduction="none")  # [B, S]
    out = torch.zeros(batch, input_ids.shape[1] - prompt_section)
    for b in range(batch):
        sel = ctarget[b]
        out[b, where[b, sel]] = -nll[b, sel]
    return out


def rollout_batch(seed: int = 0):
    """Two rows as DARE's rollout lays them out: left-padded prompts (8 and 5 real tokens) in a prompt section of 8,
    responses of 10 and 7 tokens right-padded to 10; a masked view of each response (about half its tokens)."""
    g = torch.Generator().manual_seed(seed)
    prompt_section, response = 8, 10
    ids = torch.randint(8, 100, (2, prompt_section + response), generator=g)
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = EOS, 0  # left pads of the short prompt
    ids[1, prompt_section + 7 :], mask[1, prompt_section + 7 :] = EOS, 0  # right pads of the short response
    position_ids = (mask.cumsum(1) - 1).clamp_min(0)
    masked = (torch.rand(ids.shape, generator=g) < 0.5) & mask.bool()
    masked[:, :prompt_section] = False
    noisy = torch.where(masked, MASK, ids)
    return ids, mask, position_ids, noisy, masked, prompt_section


@pytest.mark.parametrize("block_size", [4, 5])
def test_dares_concatenated_view_equals_each_block_with_its_clean_prefix(model, block_size):
    """The identity the [noisy | clean] input rests on, on the real class: a noisy block's logits are those of the
    clean tokens before it followed by that noisy block, under the block-causal mask (``block_logits``)."""
    ids, mask, position_ids, noisy, masked, prompt_section = rollout_batch()

    def run(network):  # two codes of the same log-probs: tolerance from float32's error (tests/float_error.py)
        with torch.no_grad():
            got = dare_token_logps(network, ids, mask, position_ids, noisy, masked, prompt_section, block_size)
        want = torch.zeros_like(got)
        for b in range(2):
            row_ids, row_noisy = ids[b][mask[b].bool()], noisy[b][mask[b].bool()]
            start = int(mask[b, :prompt_section].sum())
            for block_start in range(0, len(row_ids), block_size):
                end = min(block_start + block_size, len(row_ids))
                view = torch.cat([row_ids[:block_start], row_noisy[block_start:end]])[None]
                with torch.no_grad():
                    logp = torch.log_softmax(block_logits(network, view, block_length=block_size)[0].float(), -1)
                for j in range(max(block_start, start), end):
                    k = j - start  # response index
                    if row_noisy[j] == MASK:
                        want[b, k] = logp[j, row_ids[j]]
        return got, want

    assert masked[:, prompt_section:].sum() > 5
    forward_passes_agree("the noisy blocks' log-probs", run, model, 2 * ids.shape[1])  # DARE's [noisy | clean]
    with torch.no_grad():
        got = dare_token_logps(model, ids, mask, position_ids, noisy, masked, prompt_section, block_size)
    assert (got != 0).sum() == masked.sum()


@pytest.mark.parametrize(("block_size", "pads"), [(4, (0, 4, 0)), (8, (0, 0, 0)), (4, (0, 1, 3)), (8, (0, 5, 2))])
def test_block_token_logps_equal_dares_transcription(model, block_size, pads):
    """ddmrl's block-diffusion view (``ddmrl.likelihood.block.block_token_logps``, ``align: sequence``) through
    ``LLaDA2BlockModel`` equals DARE's computation at every masked position, rows left-padded by whole blocks or not
    (DARE's blocks count from each row's first real token, and so do ddmrl's: the rows moved left by their pad count
    modulo the block) and responses unpadded (DARE drops right pads, ddmrl attends them)."""
    g = torch.Generator().manual_seed(2)
    prompt_section, response = 8, 12
    ids = torch.randint(8, 100, (3, prompt_section + response), generator=g)
    mask = torch.ones_like(ids)
    for row, n in enumerate(pads):
        ids[row, :n], mask[row, :n] = EOS, 0
    position_ids = (mask.cumsum(1) - 1).clamp_min(0)
    masked = torch.rand(ids.shape, generator=g) < 0.5
    masked[:, :prompt_section] = False
    noisy = torch.where(masked, MASK, ids)
    sel = masked[:, prompt_section:]

    def run(network):  # two codes of the same log-probs: tolerance from float32's error (tests/float_error.py)
        with torch.no_grad():
            want = dare_token_logps(network, ids, mask, position_ids, noisy, masked, prompt_section, block_size)
            got = block_token_logps(
                LLaDA2BlockModel(network), noisy, ids[:, prompt_section:], block_length=block_size, align="sequence",
                prompt_mask=mask[:, :prompt_section],
            )  # fmt: skip
        return got[sel], want[sel]

    assert sel.sum() > 10
    forward_passes_agree("the masked positions' log-probs", run, model, 2 * ids.shape[1])  # [noisy | clean]


def test_block_token_logps_in_train_mode_reach_the_experts(model):
    """The update's pass: train mode (the MoE's differentiable branch) gives the eval-mode values and gradients on
    the routed experts, the shared expert, the attention and the router."""
    import copy

    from ddmrl.models.llada2 import LLaDA2Adapter

    trained = copy.deepcopy(model).train()
    block = LLaDA2Adapter(tokenizer(), MASK, block_length=4).block_model(trained)
    ids, mask, _, noisy, masked, p = rollout_batch()
    ids, noisy = ids[:1], noisy[:1]  # the unpadded row

    def run(network):  # the MoE's two codes: tolerance from float32's error (tests/float_error.py)
        adapted = LLaDA2Adapter(tokenizer(), MASK, block_length=4).block_model(copy.deepcopy(network).train())
        with torch.no_grad():
            got = block_token_logps(adapted, noisy, ids[:, p:], block_length=4, align="sequence")
            want = block_token_logps(LLaDA2BlockModel(network), noisy, ids[:, p:], block_length=4, align="sequence")
        return got, want

    forward_passes_agree("the train mode's log-probs", run, model, 2 * ids.shape[1])
    got = block_token_logps(block, noisy, ids[:, p:], block_length=4, align="sequence")
    (got * masked[:1, p:]).sum().backward()
    moe = trained.model.layers[1].mlp
    assert any(e.down_proj.weight.grad is not None and e.down_proj.weight.grad.abs().sum() > 0 for e in moe.experts)
    assert moe.shared_experts.up_proj.weight.grad.abs().sum() > 0
    assert trained.model.layers[0].attention.query_key_value.weight.grad.abs().sum() > 0
    # the router's weight gets a gradient through the routing weights of the selected experts (full fine-tuning
    # trains it; LORA_TARGETS leave it frozen)
    assert moe.gate.weight.grad.abs().sum() > 0
