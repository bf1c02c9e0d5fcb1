"""SDAR (Cheng et al. 2025; JetAstra, ``JetLM/SDAR-*-Chat``) and TraDo (Wang et al. 2025, TraceRL; Gen-Verse,
``Gen-Verse/TraDo-*-Instruct``, SDAR's architecture): block-diffusion LMs initialised from Qwen3.

What sets them apart, and what this module does about it:

* **Block diffusion.** Attention is bidirectional inside a block of ``block_size`` tokens (config.json: 4) and causal
  across blocks, so a finished block is cached exactly. ``SDARForCausalLM.forward`` takes the attention as a
  [N, 1, n, C + n] mask over the C cached keys then the n given ones, a ``DynamicCache`` in ``past_key_values``
  and ``store_kv`` (True appends the n positions' keys and values to the cache). :func:`block_forward` is that
  call under ddmrl's block-model protocol (``ddmrl.samplers.block``); :func:`load_sdar` gives the loaded instance
  that method, so it goes to the block sampler and the block likelihood as it is (peft's LoRA wrapper forwards the
  attribute); :class:`SDARBlockModel` wraps an instance built otherwise. :func:`block_causal_attention` is the mask
  of a whole (left-padded) canvas. No shift: the logits at position i predict the token at i (TraceRL's training
  reads them so, SDAR's sampler too).
* **Loading.** The checkpoint's own ``modeling_sdar.py`` (remote code, ``trust_remote_code: true``), run under
  transformers 5 through ``ddmrl.models.compat``: ``LossKwargs`` lent while it is imported, flash_attn's fused
  RMSNorm replaced by a pure-PyTorch stand-in where flash_attn is not installed, the ``default`` RoPE table, the
  rotary buffer rebuilt after loading, and a cache SDAR can index by layer (docs/families.md lists them).
  ``fuse_cross_entropy`` is switched off as TraceRL does (``train/train_sdar_policy.py``): with it on, the model
  returns no logits in training mode.
* **Tokens.** Mask ``<|MASK|>`` (151669, config.json's ``mask_token_id``), pad = EOS = ``<|endoftext|>`` (151643);
  a chat turn ends with ``<|im_end|>`` (151645, generation_config.json's other EOS).
* **LoRA targets** (:data:`LORA_TARGETS`): every decoder layer's attention (q, k, v, o) and SwiGLU MLP (gate, up,
  down) projections; never ``lm_head``, ``embed_tokens`` or the norms (Qwen3's ``q_norm``/``k_norm`` included).
"""

from __future__ import annotations

import importlib.util
import types
from typing import Any

import torch

from ddmrl.models import compat
from ddmrl.models.adapters import (
    ModelAdapter,
    _checked_mask_id,
    _config_json,
    remote_checkpoint,
)

__all__ = [
    "AUTO_CLASSES",
    "LORA_TARGETS",
    "SDAR_MASK_ID",
    "SDARAdapter",
    "SDARBlockModel",
    "block_causal_attention",
    "block_forward",
    "load_sdar",
    "padded_positions",
    "plan_view",
]

SDAR_MASK_ID = 151669  # <|MASK|> of SDAR-*-Chat and TraDo (config.json's mask_token_id)
#: peft's regular-expression form: the decoder layers' attention and MLP projections, by Qwen3's names
LORA_TARGETS = r".*\.layers\.\d+\.(self_attn\.(q_proj|k_proj|v_proj|o_proj)|mlp\.(gate_proj|up_proj|down_proj))"
AUTO_CLASSES = ("AutoModelForCausalLM",)  # config.json's auto_map entry of SDARForCausalLM (loader and ddmrl.plan)


def padded_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions [B, L] counted from each row's first real token (0/1 ``attention_mask`` [B, L]); pads get 1, as
    TraceRL's ``tok_idx`` (dLLM-RL ``train/rl_sdar.py``)."""
    valid = attention_mask.bool()
    return (valid.long().cumsum(-1) - 1).masked_fill_(~valid, 1)


def block_causal_attention(attention_mask: torch.Tensor, block_length: int) -> torch.Tensor:
    """[B, L, L] bool: query i may attend key j when j is real and j's block is not after i's, the blocks of
    ``block_length`` counted from each row's first real token (SDAR's ``block_diffusion_generate`` grid for a row
    alone); a pad query attends only itself (its output is never read)."""
    valid = attention_mask.bool()  # [B, L]
    block = torch.div(padded_positions(attention_mask), block_length, rounding_mode="floor")  # [B, L]
    allowed = valid[:, None, :] & valid[:, :, None] & (block[:, None, :] <= block[:, :, None])  # [B, Lq, Lk]
    eye = torch.eye(valid.shape[1], dtype=torch.bool, device=valid.device)
    return allowed | (~valid[:, :, None] & eye)


def _single_token_needs_flash(n: int, cache: Any) -> bool:
    return n == 1 and cache is not None and importlib.util.find_spec("flash_attn") is None


def block_forward(
    model: Any,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    attention: torch.Tensor,
    cache: Any | None = None,
    store: bool = False,
) -> tuple[torch.Tensor, Any]:
    """The block-model protocol of ``ddmrl.samplers.block`` on ``SDARForCausalLM``: ``(logits [N, n, V], cache)``
    for the n positions ``input_ids`` [N, n] after the C cached ones, under ``attention`` [N, n, C + n] (bool); with
    ``store`` their keys and values are appended to SDAR's own ``DynamicCache`` (``store_kv=True``, in place;
    ``cache=None`` starts one). A single position against a cache without flash_attn: :func:`_single_position`."""
    if store and cache is None:
        cache = compat.layer_indexable_cache()
    if _single_token_needs_flash(input_ids.shape[1], cache):
        return _single_position(model, input_ids, position_ids, attention, cache, store)
    out = model(
        input_ids,
        attention_mask=attention[:, None],  # [N, 1, n, C + n]: SDAR turns a bool mask into an additive one
        position_ids=position_ids,
        past_key_values=cache,
        use_cache=cache is not None,
        store_kv=store,
    )
    return out.logits, cache


def _single_position(
    model: Any, input_ids: torch.Tensor, position_ids: torch.Tensor, attention: torch.Tensor, cache: Any, store: bool
) -> tuple[torch.Tensor, Any]:
    """One position [N, 1] against the cache without flash_attn. SDAR's modeling code sends a query of length 1 with
    a cache to ``flash_attn_func`` (every key visible, the mask unused); its other branch is plain SDPA under the mask.
    So the position is evaluated as the first of two, the second a copy it cannot see, and the copy's key and value
    are cropped from the cache after a ``store``: the first position's logits and stored keys are exactly those of
    the one position under ``attention`` [N, 1, C + 1] (blocks of one token: JustGRPO's left-to-right rollouts)."""
    hidden = torch.zeros_like(attention[..., :1])  # [N, 1, 1]: the copy, unseen by the position
    pair = torch.cat([torch.cat([attention, hidden], -1), torch.cat([attention, ~hidden], -1)], 1)  # [N, 2, C + 2]
    logits, cache = block_forward(model, input_ids.repeat(1, 2), position_ids.repeat(1, 2), pair, cache, store)
    if store:
        cache.crop(-1)  # the copy's key and value (transformers 5: a negative count removes that many)
    return logits[:, :1], cache


class SDARBlockModel:
    """``SDARForCausalLM`` as a block model (``ddmrl.samplers.block.BlockModel``): :func:`block_forward`."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def block_forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention: torch.Tensor,
        cache: Any | None = None,
        store: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        return block_forward(self.model, input_ids, position_ids, attention, cache, store)


class SDARAdapter(ModelAdapter):
    """SDAR / TraDo: mask id from config.json, prompts through its (Qwen3) chat template, logits of a canvas under
    block-causal attention with ``block_length`` = config.json's ``block_size``."""

    kind = "sdar"

    def __init__(self, tokenizer: Any, mask_token_id: int, block_length: int = 4) -> None:
        super().__init__(tokenizer, mask_token_id)
        self.block_length = int(block_length)

    def build_prompt(self, question: str, system_prompt: str | None = None) -> str:
        """One user turn ``system_prompt + "\\n\\n" + question`` (as for LLaDA) through SDAR's chat template with
        ``add_generation_prompt=True`` (no system turn; thinking left to the model, as SDAR's ``generate.py``)."""
        content = super().build_prompt(question, system_prompt)
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )

    def block_model(self, model: Any) -> SDARBlockModel:
        """``model`` under the block-model protocol: what ``SAMPLERS["block"]`` and ``ddmrl.likelihood.block`` take."""
        return SDARBlockModel(model)

    def logits(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """[B, L] -> [B, L, V]: one pass over the canvas, block-causal from each row's first real token
        (:func:`block_causal_attention`), positions from it; no cache. A left-padded row gives the row's logits."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        attention = block_causal_attention(attention_mask, self.block_length)
        logits, _ = SDARBlockModel(model).block_forward(input_ids, padded_positions(attention_mask), attention)
        return logits


def plan_view(model: Any, config: dict[str, Any] | None = None) -> Any:
    """``SDARForCausalLM`` as the stages use it (the loader's and ``ddmrl.plan``'s): logits in training mode too
    (``fuse_cross_entropy`` off, TraceRL's setting), and itself a block model (``block_forward`` bound to the
    instance, so ``SAMPLERS["block"]`` and ``token_logps(block_length=)`` take it as it is)."""
    model.config.fuse_cross_entropy = False
    model.block_forward = types.MethodType(block_forward, model)
    return model


def load_sdar(
    path_or_id: str, revision: str | None = None, trust_remote_code: bool = False, dtype: str = "float32"
) -> tuple[Any, Any, SDARAdapter]:
    """``(model, tokenizer, adapter)`` of an SDAR or TraDo checkpoint directory (or a hub id in the HF cache), in
    eval mode on the CPU, under ddmrl's remote-code policy (``ddmrl.models.adapters``): ``SDARForCausalLM`` is the
    checkpoint's own code, run only with ``trust_remote_code`` (a hub id also needs a pinned commit), bridged by
    ``ddmrl.models.compat``. Pads with EOS when the tokenizer has no pad token."""
    why = " (SDARForCausalLM lives in the checkpoint's modeling_sdar.py)"
    auto = ("AutoModelForCausalLM",)
    model, tok, local = remote_checkpoint(path_or_id, revision, trust_remote_code, dtype, auto, why)
    model = plan_view(model)
    raw = _config_json(local)
    mask_id = _checked_mask_id(raw.get("mask_token_id", tok.mask_token_id), model, str(local))
    return model.eval(), tok, SDARAdapter(tok, mask_id, raw.get("block_size", 4))


def load(spec: Any) -> tuple[Any, Any, SDARAdapter]:
    """The family's loader (``ddmrl.models.FAMILIES["sdar"]``): :func:`load_sdar` of a ``model:`` spec."""
    return load_sdar(spec.path_or_id, spec.revision, spec.trust_remote_code, spec.dtype)
