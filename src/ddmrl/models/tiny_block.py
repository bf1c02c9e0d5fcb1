"""TinyBlockDDM: the embedded block-diffusion model, TinyDDM's transformer under an attention mask, with an exact KV
cache (SDAR-style block diffusion, Cheng et al. 2025; Arriola et al. 2025, "Block Diffusion").

TinyDDM (``ddmrl.models.tiny``) attends everywhere; this model attends where the caller says: ``forward`` takes
``position_ids`` [N, n] and a boolean ``attention_mask`` [N, n, C + n] over the C cached positions and the n given
ones, and with ``use_cache`` returns every layer's keys and values of all C + n positions (the cache grows by
appending, as a causal language model's does). Without a mask it attends everywhere (TinyDDM's forward, with
positions counted after the cache). It implements the block-diffusion protocol of ``ddmrl.samplers.block``
(``block_forward``); the block structure (``config.block_size``, the alignment) is the sampler's and the training
input's business (``ddmrl.samplers.block``, ``ddmrl.likelihood.block``), so the same weights can be read under any
block layout. The weights and their names are TinyDDM's (the same modules): a TinyDDM checkpoint loads into it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

from ddmrl.models.tiny import (
    KVCache,
    TinyDDMConfig,
    TinyDDMForMaskedLM,
    TinyDDMOutput,
    _Block,
    config_fields,
    rotary_angles,
    rotate,
)


class TinyBlockDDMConfig(TinyDDMConfig):
    """TinyDDM's configuration plus ``block_size`` (the block length it is trained and sampled with) and
    ``block_align`` (``completion`` | ``sequence``, ``ddmrl.samplers.block.block_index``)."""

    model_type = "tiny_block_ddm"

    def __init__(self, block_size: int = 4, block_align: str = "completion", **kwargs) -> None:
        if block_size < 1:
            raise ValueError(f"block_size = {block_size}: must be >= 1")
        if block_align not in ("completion", "sequence"):
            raise ValueError(f"block_align = {block_align!r}: choose completion or sequence")
        self.block_size = block_size
        self.block_align = block_align
        super().__init__(**kwargs)


def _layer(block: _Block, x: torch.Tensor, rotary, past, mask: torch.Tensor | None):
    """One of TinyDDM's blocks (its own modules) under an attention ``mask`` [N, n, C + n] against cached (keys,
    values) [N, H, C, hd]; returns the new hidden states and the (keys, values) of all C + n positions."""
    b, n, d = x.shape  # x: [N, n, D]
    q, k, v = block.qkv(block.ln1(x)).view(b, n, 3, block.num_heads, d // block.num_heads).unbind(2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [N, H, n, hd]
    if rotary is not None:
        q, k = rotate(q, *rotary), rotate(k, *rotary)
    if past is not None:
        k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)  # [N, H, C + n, hd]
    p = block.dropout if block.training else 0.0
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask[:, None], dropout_p=p)
    x = x + block.drop(block.proj(a.transpose(1, 2).reshape(b, n, d)))
    return x + block.drop(block.ff(block.ln2(x))), (k, v)


class TinyBlockDDMForMaskedLM(TinyDDMForMaskedLM):
    config_class = TinyBlockDDMConfig

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: KVCache | None = None,
        use_cache: bool = False,
        **kwargs,
    ) -> TinyDDMOutput:
        """Logits [N, n, V] of ``input_ids`` [N, n] at ``position_ids`` (default: after the cached positions), each
        query attending the keys ``attention_mask`` [N, n, C + n] allows (None: all); ``labels`` adds CE."""
        cached = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        n = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(cached, cached + n, device=input_ids.device).expand(input_ids.shape[0], n)
        if attention_mask is not None and attention_mask.shape[-1] != cached + n:
            raise ValueError(
                f"attention_mask has {attention_mask.shape[-1]} keys; the cache and input hold {cached + n}"
            )
        top = int(position_ids.max()) + 1 if position_ids.numel() else 0
        if top > self.config.max_position_embeddings:
            raise ValueError(
                f"position {top - 1} exceeds max_position_embeddings {self.config.max_position_embeddings}"
            )
        x, rotary = self.tok(input_ids), None
        if self.config.position_embedding == "rope":
            head_dim = self.config.hidden_size // self.config.num_heads
            cos, sin = rotary_angles(self.config.max_position_embeddings, head_dim, self.config.rope_theta, x.device)
            rotary = cos[position_ids][:, None], sin[position_ids][:, None]  # [N, 1, n, hd / 2]
        else:
            x = x + self.pos(position_ids)
        kv = []
        for i, block in enumerate(self.blocks):
            x, layer_kv = _layer(
                block, x, rotary, None if past_key_values is None else past_key_values[i], attention_mask
            )
            kv.append(layer_kv)
        logits = self.lm_head(self.ln_f(x))  # [N, n, V]
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        return TinyDDMOutput(loss=loss, logits=logits, past_key_values=tuple(kv) if use_cache else None)

    def block_forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention: torch.Tensor,
        cache: Any | None = None,
        store: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        """The block-diffusion protocol (``ddmrl.samplers.block.BlockModel``): logits of the n given positions and
        the cache, extended by them when ``store``."""
        out = self(
            input_ids, position_ids=position_ids, attention_mask=attention, past_key_values=cache, use_cache=store
        )
        return out.logits, (out.past_key_values if store else cache)


def from_tiny(model: TinyDDMForMaskedLM, block_size: int = 4, block_align: str = "completion"):
    """A TinyBlockDDM with the weights of the TinyDDM ``model`` (the same modules and names), in its mode."""
    fields = {k: v for k, v in model.config.to_dict().items() if k not in ("model_type", "architectures")}
    block = TinyBlockDDMForMaskedLM(TinyBlockDDMConfig(**fields, block_size=block_size, block_align=block_align))
    block.load_state_dict(model.state_dict())
    return block.train(model.training)


def new_tiny_block_model(model_cfg, tok, max_positions: int, block_size: int, block_align: str = "completion"):
    """A freshly initialised TinyBlockDDM with the architecture of ``model_cfg`` over ``tok``'s vocabulary."""
    fields = config_fields(model_cfg, tok, max_positions)
    return TinyBlockDDMForMaskedLM(TinyBlockDDMConfig(block_size=block_size, block_align=block_align, **fields))


AutoConfig.register("tiny_block_ddm", TinyBlockDDMConfig)
AutoModel.register(TinyBlockDDMConfig, TinyBlockDDMForMaskedLM)
AutoModelForMaskedLM.register(TinyBlockDDMConfig, TinyBlockDDMForMaskedLM)
