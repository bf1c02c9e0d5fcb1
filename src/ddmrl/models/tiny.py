"""TinyDDM: the embedded masked diffusion model, a small bidirectional transformer.

It has the interface of LLaDA's ``LLaDAModelLM`` that the rest of ddmrl relies on: ``model(input_ids).logits``
of shape [B, L, V] from a full, non-causal forward pass over the whole sequence, and ``config.mask_token_id``.
It is a transformers ``PreTrainedModel`` registered with the Auto classes, so ``save_pretrained`` /
``AutoModelForMaskedLM.from_pretrained`` work (safetensors), like any hub model.

For the samplers' block-wise approximate KV cache (Fast-dLLM, Wu et al. 2025) the forward pass can also run on a
window of the sequence against cached keys and values of the other positions (``past_key_values``,
``window_start``); without them it is the plain forward pass, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import MaskedLMOutput

#: per layer (keys, values), each [B, H, T, head_dim], keys after the rotary embedding
KVCache = tuple[tuple[torch.Tensor, torch.Tensor], ...]


@dataclass
class TinyDDMOutput(MaskedLMOutput):
    """``MaskedLMOutput`` plus the keys and values every layer attended to (all T positions; see ``forward``)."""

    past_key_values: KVCache | None = None


class TinyDDMConfig(PretrainedConfig):
    model_type = "tiny_ddm"

    def __init__(
        self,
        vocab_size: int = 64,
        hidden_size: int = 128,
        num_layers: int = 4,
        num_heads: int = 4,
        intermediate_size: int = 512,
        max_position_embeddings: int = 64,
        dropout: float = 0.0,
        position_embedding: str = "learned",
        rope_theta: float = 10000.0,
        mask_token_id: int = 0,
        pad_token_id: int = 1,
        bos_token_id: int = 2,
        eos_token_id: int = 3,
        **kwargs,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.max_position_embeddings = max_position_embeddings
        self.dropout = dropout
        if position_embedding not in ("learned", "rope"):
            raise ValueError(f"position_embedding = {position_embedding!r}: choose learned or rope")
        self.position_embedding = position_embedding  # rope: rotary positions in attention (LLaDA's choice)
        self.rope_theta = rope_theta
        self.mask_token_id = mask_token_id
        # transformers 5 has no default for tie_word_embeddings: say it (else the head is silently untied)
        kwargs.setdefault("tie_word_embeddings", True)
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)


class _Block(GradientCheckpointingLayer):
    """Pre-LN transformer block with full (bidirectional) self-attention.

    A ``GradientCheckpointingLayer``: after ``model.activation_checkpointing_enable()`` (transformers), a block in
    training mode keeps only its input and recomputes its activations in the backward pass (torch.utils.checkpoint).
    """

    def __init__(self, cfg: TinyDDMConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.dropout = cfg.dropout
        self.ln1 = nn.LayerNorm(cfg.hidden_size)
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.ln2 = nn.LayerNorm(cfg.hidden_size)
        self.ff = nn.Sequential(
            nn.Linear(cfg.hidden_size, cfg.intermediate_size),
            nn.GELU(),
            nn.Linear(cfg.intermediate_size, cfg.hidden_size),
        )
        self.drop = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
        start: int = 0,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``x`` [B, n, D] the hidden states of positions start..start + n - 1. ``past``: cached (keys, values)
        [B, H, T, D/H] of all T positions, of which the window's are replaced by its own. Returns the new hidden
        states and the (keys, values) attended to."""
        b, n, d = x.shape  # x: [B, L, D]
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.num_heads, d // self.num_heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, L, D/H]
        if rotary is not None:
            q, k = rotate(q, *rotary), rotate(k, *rotary)
        if past is not None:
            end = start + n
            k = torch.cat([past[0][:, :, :start], k, past[0][:, :, end:]], 2)  # [B, H, T, D/H]
            v = torch.cat([past[1][:, :, :start], v, past[1][:, :, end:]], 2)
        p = self.dropout if self.training else 0.0
        a = F.scaled_dot_product_attention(q, k, v, is_causal=False, dropout_p=p)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, n, d)))
        return x + self.drop(self.ff(self.ln2(x))), (k, v)


def rotary_angles(length: int, head_dim: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) [L, head_dim / 2] of rotary position embeddings (Su et al. 2021, RoFormer Eq. 34; LLaDA uses
    them): position m rotates feature pair i by m * theta^(-2i / head_dim)."""
    half = head_dim // 2
    freqs = theta ** (-torch.arange(half, dtype=torch.float32, device=device) / half)  # [half]
    angles = torch.arange(length, dtype=torch.float32, device=device)[:, None] * freqs  # [L, half]
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of queries or keys ``x`` [B, H, L, head_dim] (halves rotated as pairs), ``cos``, ``sin``
    [L, head_dim / 2]: ``[x1 cos - x2 sin, x1 sin + x2 cos]`` for the halves x1, x2 of x.

    Computed as ``x [cos, cos] + [x2, x1] [-sin, sin]`` (the "rotate half" form): the same two rounded products and
    one rounded sum per element, so the same floats, forward and backward, in half the element-wise passes over
    whole rows (1.3x faster on the main job's shapes here; tests/unit/models/test_tiny.py checks the identity)."""
    half = x.shape[-1] // 2
    swapped = torch.cat([x[..., half:], x[..., :half]], -1)  # [B, H, L, head_dim]: [x2, x1]
    return (x * torch.cat([cos, cos], -1) + swapped * torch.cat([-sin, sin], -1)).to(x.dtype)


class TinyDDMForMaskedLM(PreTrainedModel):
    config_class = TinyDDMConfig
    base_model_prefix = "tiny_ddm"
    _tied_weights_keys = {"lm_head.weight": "tok.weight"}  # a dict in transformers 5
    supports_gradient_checkpointing = True  # per block (_Block is a GradientCheckpointingLayer)
    _no_split_modules = ["_Block"]  # the block FSDP shards one by one (ddmrl.training.distributed.fsdp_wrap_classes)

    def __init__(self, config: TinyDDMConfig) -> None:
        super().__init__(config)
        self.tok = nn.Embedding(config.vocab_size, config.hidden_size)
        learned = config.position_embedding == "learned"
        self.pos = nn.Embedding(config.max_position_embeddings, config.hidden_size) if learned else None
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.num_layers))
        self.ln_f = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.tok

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        past_key_values: KVCache | None = None,
        window_start: int = 0,
        use_cache: bool = False,
        **kwargs,
    ) -> TinyDDMOutput:
        """Logits for every position of ``input_ids`` [B, L] -> [B, L, V]; ``labels`` (-100 = ignore) adds CE.

        Cached (Fast-dLLM's block-wise KV cache): ``input_ids`` [B, n] are the tokens at positions ``window_start``
        .. ``window_start + n - 1`` of a sequence of T positions, and ``past_key_values`` holds every layer's keys
        and values of all T positions (from an earlier call with ``use_cache``); the window attends to its own fresh
        keys and values and to the cached ones of the other positions. ``use_cache`` returns the keys and values
        each layer attended to in ``past_key_values``. The result is the plain forward pass of the whole sequence
        exactly when the cached positions' keys and values are those of the current sequence (always true for the
        first layer, whose keys depend only on each position's own token).
        """
        n = input_ids.shape[1]
        total = window_start + n if past_key_values is None else past_key_values[0][0].shape[2]
        if total > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {total} exceeds max_position_embeddings {self.config.max_position_embeddings}"
            )
        if window_start + n > total:
            raise ValueError(f"window {window_start}..{window_start + n - 1} lies outside the {total} positions")
        x, rotary = self.tok(input_ids), None
        if self.config.position_embedding == "rope":
            head_dim = self.config.hidden_size // self.config.num_heads
            cos, sin = rotary_angles(total, head_dim, self.config.rope_theta, input_ids.device)
            rotary = cos[window_start : window_start + n], sin[window_start : window_start + n]
        else:
            x = x + self.pos(torch.arange(window_start, window_start + n, device=input_ids.device))
        kv = []
        for i, block in enumerate(self.blocks):
            x, layer_kv = block(x, rotary, None if past_key_values is None else past_key_values[i], window_start)
            kv.append(layer_kv)
        logits = self.lm_head(self.ln_f(x))  # [B, n, V]
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        return TinyDDMOutput(loss=loss, logits=logits, past_key_values=tuple(kv) if use_cache else None)


def new_tiny_model(model_cfg, tok, max_positions: int) -> TinyDDMForMaskedLM:
    """A freshly initialised TinyDDM with the architecture of ``model_cfg`` (``ddmrl.config.ModelConfig``) over
    the vocabulary and special tokens of ``tok``, for sequences up to ``max_positions`` tokens."""
    return TinyDDMForMaskedLM(TinyDDMConfig(**config_fields(model_cfg, tok, max_positions)))


def config_fields(model_cfg, tok, max_positions: int) -> dict:
    """The config keywords of a tiny model (TinyDDM, TinyBlockDDM) with ``model_cfg``'s architecture over ``tok``'s
    vocabulary and special tokens, for sequences up to ``max_positions`` tokens."""
    m = model_cfg
    return dict(
        vocab_size=len(tok),
        hidden_size=m.hidden_size,
        num_layers=m.num_layers,
        num_heads=m.num_heads,
        intermediate_size=m.intermediate_size,
        dropout=m.dropout,
        position_embedding=m.position_embedding,
        max_position_embeddings=max_positions,
        mask_token_id=tok.mask_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )


AutoConfig.register("tiny_ddm", TinyDDMConfig)
AutoModel.register(TinyDDMConfig, TinyDDMForMaskedLM)
AutoModelForMaskedLM.register(TinyDDMConfig, TinyDDMForMaskedLM)


def load_saved(path: str | Path):
    """(model, tokenizer) of a ``save_pretrained`` directory (a TinyDDM, or any masked LM the Auto classes know),
    safetensors only; ``FileNotFoundError`` where there is no ``config.json``."""
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path}: no checkpoint here (expected config.json from save_pretrained)")
    return AutoModelForMaskedLM.from_pretrained(path, use_safetensors=True), AutoTokenizer.from_pretrained(path)
