"""LLaDA 2.x (inclusionAI LLaDA2.0-mini and LLaDA2.1-mini; 16B total, 1.4B active): a mixture-of-experts masked
diffusion LM trained for block diffusion.

What sets it apart from LLaDA, and what this module does about it:

* **Block-causal attention.** The release's ``generate`` attends bidirectionally inside a block of ``block_length``
  tokens and causally across blocks, blocks counted from position 0 of the (unpadded) prompt. The class's own
  ``forward`` without a mask is bidirectional under SDPA but *causal* under eager attention
  (``_prepare_4d_causal_attention_mask``), so ddmrl always passes an explicit additive mask [B, 1, L, L]
  (:func:`attention_inputs`): block-causal for a ``block_length``, bidirectional without one. No shift: the logits
  at i predict the token at i (``LLaDA2MoeModelLM.forward``: "same label position logits").
* **Padding.** A left-padded row gets positions counted from its first real token and blocks counted from there
  (as the release runs each prompt alone, and DARE's actor compacts each row to its valid tokens); a real query
  attends real keys only. A padded row then equals the row alone (tested).
* **Tokens.** Mask ``<|mask|>`` (156895, ``generate``'s ``mask_id`` default), EOS = pad = ``<|endoftext|>``
  (156892, config.json's ``pad_token_id``). The release's config.json has no ``mask_token_id``: the tokenizer's
  ``mask_token`` is read, else 156895.
* **Loading.** The checkpoint's own ``modeling_llada2_moe.py`` (remote code, ``trust_remote_code: true``), run under
  transformers 5 through ``ddmrl.models.compat`` (the ``default`` RoPE bridge, and rebuilding the rotary buffer of a
  4.x-style rotary module after the meta-device load).
* **MoE in eval mode.** ``LLaDA2MoeSparseMoeBlock`` routes through ``moe_infer`` (``@torch.no_grad``) in eval mode:
  no gradient reaches the experts. A policy update runs in train mode (ddmrl's GRPO loop does); the two modes give
  the same logits to float tolerance (tested).
* **LoRA targets** (:data:`LORA_TARGETS`): every layer's attention (fused ``query_key_value``, output ``dense``),
  the dense first layer's MLP, every routed expert's and the shared expert's SwiGLU projections (gate, up, down).
  Not the router (``mlp.gate``, ``LLaDA2MoeGate``): it is a bare parameter read by ``F.linear`` in float32, not an
  ``nn.Linear`` that peft can wrap, and adapting it would move the expert load that the release balances with its
  fixed ``expert_bias``. Never ``lm_head`` or ``word_embeddings``.

LLaDA 2.x's sampler is the block-diffusion sampler (``SAMPLERS["block"]``, ``align: sequence``, ``parallel:
threshold``) through :class:`LLaDA2BlockModel` (``LLaDA2Adapter.block_model``), 2.1's token editing its
``editing_threshold`` option; its training view is ``ddmrl.likelihood.block`` through the same (docs/families.md).
"""

from __future__ import annotations

import types
from typing import Any

import torch
from transformers import DynamicCache

from ddmrl.models.adapters import (
    ModelAdapter,
    _checked_mask_id,
    remote_checkpoint,
)

__all__ = [
    "AUTO_CLASSES",
    "LLADA2_BLOCK_LENGTH",
    "LLADA2_EOS_ID",
    "LLADA2_MASK_ID",
    "LORA_TARGETS",
    "LLaDA2Adapter",
    "LLaDA2BlockModel",
    "attention_inputs",
    "block_logits",
    "balanced_moe_forward",
    "load_llada2",
    "plan_view",
]

LLADA2_MASK_ID = 156895  # <|mask|> (generate's mask_id default)
LLADA2_EOS_ID = 156892  # <|endoftext|> = pad (config.json's pad_token_id, generate's eos_id default)
LLADA2_BLOCK_LENGTH = 32  # the model cards' recommended block_length (generate's default)
MASK_ID = LLADA2_MASK_ID  # the family's mask id where config.json has none (ddmrl.plan)
AUTO_CLASSES = ("AutoModelForCausalLM",)  # config.json's auto_map entry of LLaDA2MoeModelLM (loader and ddmrl.plan)
_PROJ = r"(gate_proj|up_proj|down_proj)"
#: peft's regular-expression form, by LLaDA 2.x's names: attention (fused q/k/v and output), the dense layers' MLP,
#: every routed expert's and the shared expert's MLP; not the router ``mlp.gate`` (see the module docstring)
LORA_TARGETS = (
    rf".*\.layers\.\d+\.(attention\.(query_key_value|dense)|mlp\.{_PROJ}|mlp\.experts\.\d+\.{_PROJ}"
    rf"|mlp\.shared_experts\.{_PROJ})"
)


def attention_inputs(
    attention_mask: torch.Tensor, block_length: int | None, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(additive mask [B, 1, L, L], position_ids [B, L])`` for a 0/1 padding mask [B, L]: positions count from each
    row's first real token (pads get 0); a real query attends the real keys of its own and earlier blocks
    (block = position // ``block_length``; every real key when ``block_length`` is None). A pad query attends every
    key (its output is never read; a row with no key left would give NaN that reaches real positions)."""
    valid = attention_mask.bool()  # [B, L]
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)  # [B, L]
    allowed = valid[:, None, :].expand(-1, valid.shape[1], -1)  # [B, Lq, Lk] key real
    if block_length is not None:
        block = position_ids // block_length  # [B, L]
        allowed = allowed & (block[:, None, :] <= block[:, :, None])
    allowed = allowed | ~valid[:, :, None]  # a pad query attends every key
    bias = torch.zeros(allowed.shape, dtype=dtype, device=attention_mask.device)
    return bias.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None], position_ids


def block_logits(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    block_length: int | None = LLADA2_BLOCK_LENGTH,
) -> torch.Tensor:
    """``LLaDA2MoeModelLM``'s logits [B, L, V] (float32, position i predicting token i) under the block-causal mask
    of :func:`attention_inputs` (bidirectional when ``block_length`` is None), whatever the attention kernel."""
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    bias, position_ids = attention_inputs(attention_mask, block_length, model.get_input_embeddings().weight.dtype)
    return model(input_ids, attention_mask=bias, position_ids=position_ids, use_cache=False).logits


class LLaDA2Adapter(ModelAdapter):
    """LLaDA 2.x: mask id from the tokenizer, prompts through its chat template, logits under its block-causal
    attention (:func:`block_logits`, ``block_length`` as the sampler's)."""

    kind = "llada2"

    def __init__(self, tokenizer: Any, mask_token_id: int, block_length: int | None = LLADA2_BLOCK_LENGTH) -> None:
        super().__init__(tokenizer, mask_token_id)
        self.block_length = block_length

    def build_prompt(self, question: str, system_prompt: str | None = None) -> str:
        """One user turn ``system_prompt + "\\n\\n" + question`` (as for LLaDA) through LLaDA 2.x's chat template
        with ``add_generation_prompt=True`` (as the model cards call it; the template opens with its own system turn,
        ``detailed thinking off``)."""
        content = super().build_prompt(question, system_prompt)
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )

    def block_model(self, model: Any, released_21_mask: bool = False) -> LLaDA2BlockModel:
        """``model`` under the block-diffusion protocol (``SAMPLERS["block"]``, ``ddmrl.likelihood.block``)."""
        return LLaDA2BlockModel(model, released_21_mask)

    def logits(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return block_logits(model, input_ids, attention_mask, self.block_length)


class _Cache(DynamicCache):
    """transformers 5's ``DynamicCache`` with 4.x's ``get_usable_length`` (the cached length), which
    ``LLaDA2MoeSdpaAttention`` calls; nothing of transformers is patched."""

    def get_usable_length(self, new_seq_length: int, layer_idx: int = 0) -> int:
        return self.get_seq_length(layer_idx)


class LLaDA2BlockModel:
    """``LLaDA2MoeModelLM`` under the block-diffusion protocol (``ddmrl.samplers.block.BlockModel``):
    ``block_forward(input_ids [N, n], position_ids [N, n], attention [N, n, C + n] bool, cache, store)`` ->
    ``(logits [N, n, V], cache)``. The cache is a real KV cache of the C stored positions (block-causal attention
    makes a finished block's keys and values final); a pass with ``store=False`` is cropped back off it.

    ``released_21_mask`` (a released-code quirk, off by default): LLaDA 2.1's ``generate`` passes its block mask as
    1.0 / 0.0 added to the attention scores (2.0 passes ``log`` of it: 0 / -inf), through the eager fallback
    (``output_attentions=True``), so earlier blocks attend the current one with weight e^-1 relative to their own
    keys instead of not at all. On, the allowed keys get +1 and the others 0, as there; it needs the sampler's
    ``kv_cache: false`` (what an earlier block computes then depends on the later ones, no cache is exact).
    """

    def __init__(self, model: Any, released_21_mask: bool = False) -> None:
        self.model = model
        self.released_21_mask = released_21_mask

    def block_forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention: torch.Tensor,
        cache: Any | None = None,
        store: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        dtype = self.model.get_input_embeddings().weight.dtype
        extra = {}
        if self.released_21_mask:
            if cache is not None or store:
                raise ValueError(
                    "released_21_mask: LLaDA 2.1's mask has no exact cache (set sampler.options.block.kv_cache: false)"
                )
            bias, extra = attention.to(dtype)[:, None], {"output_attentions": True}  # [N, 1, n, C + n]
        else:
            bias = torch.zeros(attention.shape, dtype=dtype, device=attention.device)
            bias = bias.masked_fill_(~attention, torch.finfo(dtype).min)[:, None]  # [N, 1, n, C + n]
        kv = cache if cache is not None else (_Cache() if store else None)
        cached = kv.get_seq_length() if kv is not None else 0
        out = self.model(
            input_ids, attention_mask=bias, position_ids=position_ids, past_key_values=kv, use_cache=kv is not None,
            **extra,
        )  # fmt: skip
        if kv is not None and not store:
            kv.crop(cached - kv.get_seq_length())  # the pass's keys and values off again
        return out.logits, (kv if store else cache)


def load_llada2(
    path_or_id: str,
    revision: str | None = None,
    trust_remote_code: bool = False,
    dtype: str = "bfloat16",
    block_length: int | None = LLADA2_BLOCK_LENGTH,
) -> tuple[Any, Any, LLaDA2Adapter]:
    """``(model, tokenizer, adapter)`` of a LLaDA 2.x checkpoint directory (2.0 or 2.1; or a hub id in the HF cache),
    in eval mode on the CPU, under ddmrl's remote-code policy (``ddmrl.models.adapters``): ``LLaDA2MoeModelLM`` is
    the checkpoint's own code, run only with ``trust_remote_code`` (a hub id also needs a pinned commit), bridged by
    ``ddmrl.models.compat``. Pads with EOS when the tokenizer has no pad token."""
    why = " (LLaDA2MoeModelLM lives in the checkpoint's modeling_llada2_moe.py)"
    model, tok, local = remote_checkpoint(path_or_id, revision, trust_remote_code, dtype, AUTO_CLASSES, why)
    mask_id = tok.mask_token_id if tok.mask_token_id is not None else LLADA2_MASK_ID
    mask_id = _checked_mask_id(mask_id, model, str(local))
    # the loaded instance is itself a block model (SAMPLERS["block"], token_logps(block_length=) take it as it is)
    model.block_forward = types.MethodType(_block_forward, model)
    return model.eval(), tok, LLaDA2Adapter(tok, mask_id, block_length)


def _block_forward(model: Any, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    return LLaDA2BlockModel(model).block_forward(*args, **kwargs)


def balanced_moe_forward(block: Any, hidden_states: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """``LLaDA2MoeSparseMoeBlock.forward`` under perfectly balanced routing: the [T k] token-expert pairs split into
    equal shares, one per routed expert, whatever the router chose (its weights still weigh the outputs), then the
    shared expert. The release selects each expert's tokens by value (``flat_topk_idx == i``, ``moe_infer``), which
    fake tensors cannot follow; this has the same parameters and, for a balanced router, the same FLOPs and
    activation shapes: ``ddmrl.plan``'s stand-in (:func:`plan_view`), never used to train or sample."""
    bsz, seq_len, h = hidden_states.shape
    topk_idx, topk_weight, router_logits = block.gate(hidden_states)
    pairs = hidden_states.reshape(-1, h).repeat_interleave(block.num_experts_per_tok, dim=0)  # [T k, h]
    shares = pairs.chunk(len(block.experts))
    y = torch.cat([expert(x) for expert, x in zip(block.experts, shares, strict=False)])  # [T k, h]
    y = (y.view(*topk_weight.shape, -1) * topk_weight.unsqueeze(-1)).sum(dim=1).to(hidden_states.dtype)
    y = y.view(bsz, seq_len, h)
    if block.config.num_shared_experts is not None:
        y = y + block.shared_experts(hidden_states)
    return y, (router_logits.view(bsz, seq_len, -1), topk_idx.view(bsz, seq_len, -1))


def plan_view(model: Any, config: dict[str, Any] | None = None) -> Any:
    """A freshly built ``LLaDA2MoeModelLM`` as ``ddmrl.plan`` traces it: a block model (``block_forward`` bound, as
    :func:`load_llada2` binds it) whose MoE blocks route in balance (:func:`balanced_moe_forward`)."""
    model.block_forward = types.MethodType(_block_forward, model)
    for module in model.modules():
        if type(module).__name__ == "LLaDA2MoeSparseMoeBlock":
            module.forward = types.MethodType(balanced_moe_forward, module)
    return model


def load(spec: Any) -> tuple[Any, Any, LLaDA2Adapter]:
    """The family's loader (``ddmrl.models.FAMILIES["llada2"]``): :func:`load_llada2` of a ``model:`` spec."""
    return load_llada2(spec.path_or_id, spec.revision, spec.trust_remote_code, spec.dtype)
