"""A cached forward pass for LLaDA's own model class (``LLaDAModelLM`` of ``modeling_llada.py``, Nie et al. 2025).

LLaDA's forward refuses a KV cache (``"The kvcache is not suppotred for MDM."``), and its blocks can only append a
cache *before* the queries (``layer_past``: rotary positions counted from the end), which is Fast-dLLM's prefix
cache but not its dual cache (Wu et al. 2025, "Fast-dLLM", section 3.1), where the queries sit between cached
positions. :func:`forward_window` therefore drives the model's own modules (embedding, each block's norms,
projections, rotary embedding, attention kernel and feed-forward, the final norm and output layer) itself, for a
window of positions against cached keys and values of all others, the way ``ddmrl.models.tiny`` does for TinyDDM.

The modules are the model's, so LoRA adapters injected by peft and the model's dtype take part as in its own
forward; without a cache (``past_key_values=None``, ``window_start=0``) the result is the model's own forward pass
(tested against ``LLaDAModelLM.forward`` on a tiny random instance). Dropout follows the modules' training flags;
activation checkpointing and attention biases (padding masks) are not supported: the samplers call the model
without either.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

#: per layer (keys, values), each [B, H_kv, T, head_dim], keys after the rotary embedding
KVCache = tuple[tuple[torch.Tensor, torch.Tensor], ...]


def is_llada(model: nn.Module) -> bool:
    """True for LLaDA's ``LLaDAModelLM`` (recognised by its structure: ``model.transformer`` with ``wte`` and
    ``ln_f``, and blocks with an ``attn_norm``), whatever module path it was loaded from."""
    transformer = getattr(getattr(model, "model", None), "transformer", None)
    return transformer is not None and "wte" in transformer and "ln_f" in transformer


def blocks(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks in order (``blocks``, or ``block_groups`` when ``block_group_size > 1``)."""
    t = model.model.transformer
    if "blocks" in t:
        return list(t.blocks)
    return [b for group in t.block_groups for b in group]


def _rotary(block: nn.Module, q: torch.Tensor, k: torch.Tensor, start: int, total: int):
    """LLaDA's rotary embedding of queries and keys [B, H, n, hd] sitting at positions start..start + n - 1, with the
    block's own tables and precision (``RotaryEmbedding.forward`` assumes the queries are the last positions)."""
    cfg = block.config
    q_, k_ = (q.float(), k.float()) if cfg.rope_full_precision else (q, k)
    n = q.shape[-2]
    with torch.autocast(q.device.type, enabled=False):
        sin, cos = block.rotary_emb.get_rotary_embedding(total, q_.device)  # [1, 1, total, hd]
        sin, cos = sin[:, :, start : start + n].type_as(q_), cos[:, :, start : start + n].type_as(q_)
        q_ = block.rotary_emb.apply_rotary_pos_emb(sin, cos, q_)
        k_ = block.rotary_emb.apply_rotary_pos_emb(sin, cos, k_)
    return q_.type_as(q), k_.type_as(k)


def _attention(block, q, k, v, past, start: int, total: int):
    """LLaDABlock.attention for a window: [B, n, C] projections -> ([B, n, C] output, (keys, values) attended to)."""
    b, n, c = q.shape
    cfg = block.config
    dtype = k.dtype
    if block.q_norm is not None and block.k_norm is not None:
        q, k = block.q_norm(q).to(dtype=dtype), block.k_norm(k).to(dtype=dtype)
    hd = c // cfg.n_heads
    q = q.view(b, n, cfg.n_heads, hd).transpose(1, 2)  # [B, H, n, hd]
    k = k.view(b, n, cfg.effective_n_kv_heads, hd).transpose(1, 2)  # [B, H_kv, n, hd]
    v = v.view(b, n, cfg.effective_n_kv_heads, hd).transpose(1, 2)
    if cfg.rope:
        q, k = _rotary(block, q, k, start, total)
    if past is not None:
        end = start + n
        k = torch.cat([past[0][:, :, :start], k, past[0][:, :, end:]], 2)  # [B, H_kv, T, hd]
        v = torch.cat([past[1][:, :, :start], v, past[1][:, :, end:]], 2)
    p = cfg.attention_dropout if block.training else 0.0
    att = block._scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=p, is_causal=False)
    att = att.transpose(1, 2).contiguous().view(b, n, c)
    return block.attn_out(att), (k, v)


def _block(block, x: torch.Tensor, past, start: int, total: int):
    """LLaDASequentialBlock / LLaDALlamaBlock.forward for a window of positions."""
    h = block.attn_norm(x)
    if hasattr(block, "att_proj"):  # sequential block: fused q, k, v
        q, k, v = block.att_proj(h).split(block.fused_dims, dim=-1)
    else:  # llama block (LLaDA-8B)
        q, k, v = block.q_proj(h), block.k_proj(h), block.v_proj(h)
    att, kv = _attention(block, q, k, v, past, start, total)
    x = x + block.dropout(att)
    h = block.ff_norm(x)
    if hasattr(block, "up_proj"):
        h = block.act(block.ff_proj(h)) * block.up_proj(h)
    else:
        h = block.act(block.ff_proj(h))
    return x + block.dropout(block.ff_out(h)), kv


def forward_window(
    model: nn.Module, input_ids: torch.Tensor, past_key_values: KVCache | None = None, window_start: int = 0
) -> tuple[torch.Tensor, KVCache]:
    """Logits [B, n, V] of ``input_ids`` [B, n] at positions ``window_start`` .. ``window_start + n - 1``, and every
    layer's (keys, values) of all positions attended to.

    ``past_key_values``: every layer's cached keys and values of all T positions (from an earlier call); the window's
    slots are replaced by its own. Without it the window is the whole sequence (``window_start`` must be 0) and the
    result is ``model(input_ids).logits`` (up to float reassociation: same operations, same order).
    """
    m = model.model
    cfg = m.config
    n = input_ids.shape[1]
    total = window_start + n if past_key_values is None else past_key_values[0][0].shape[2]
    if past_key_values is None and window_start:
        raise ValueError("forward_window: a window that does not start at 0 needs past_key_values")
    if window_start + n > total:
        raise ValueError(f"window {window_start}..{window_start + n - 1} lies outside the {total} cached positions")
    if not cfg.rope or cfg.alibi:
        raise ValueError("forward_window: LLaDA's masked diffusion models use rotary positions (rope: true)")
    x = m.transformer.wte(input_ids)  # [B, n, C]
    if cfg.input_emb_norm:
        x = x * (cfg.d_model**0.5)
    x = m.transformer.emb_drop(x)
    kv = []
    for i, block in enumerate(blocks(model)):
        x, layer_kv = _block(block, x, None if past_key_values is None else past_key_values[i], window_start, total)
        kv.append(layer_kv)
    x = m.transformer.ln_f(x)
    logits = F.linear(x, m.transformer.wte.weight, None) if cfg.weight_tying else m.transformer.ff_out(x)
    if cfg.scale_logits:
        logits = logits * (1 / math.sqrt(cfg.d_model))
    return logits, tuple(kv)
