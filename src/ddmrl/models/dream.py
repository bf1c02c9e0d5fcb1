"""Dream-7B (Ye et al. 2025; HKUNLP, ``Dream-org/Dream-v0-Instruct-7B``): a masked diffusion LM initialised from
Qwen2.5-7B that keeps the autoregressive shift.

What sets it apart from LLaDA, and what this module does about it:

* **The shift.** ``DreamModel``'s logits at position i predict the token at i + 1, so a masked token at i is read
  from the logits at i - 1 (Dream's ``_sample`` rolls the logits right by one, position 0 keeping its own).
  :func:`aligned_logits` (and :meth:`DreamAdapter.logits`) return them rolled, so that everywhere in ddmrl the logits
  at i are the prediction for position i, as for LLaDA. :func:`token_logps` are the completion's token
  log-probabilities under that reading: the same quantity as ``ddmrl.likelihood.token_logps`` on LLaDA.
* **Padding.** Dream's ``_sample`` turns a padding mask into positions counted from the first real token and
  attention where neither query nor key is a pad (:func:`padding_inputs`). The copy of ``modeling_dream.py`` that
  dLLM-RL (and so DARE) vendors casts a boolean mask to the activations' dtype (True -> +1.0, added to the scores:
  pads are not masked) and takes a third positional argument as ``is_causal``; ddmrl therefore passes an additive
  float mask (0 or the dtype's minimum) and ``position_ids`` by keyword, which means the same under both copies.
  A left-padded row then gives the unpadded row's logits (tested).
* **Tokens.** Mask ``<|mask|>`` (151666), pad = EOS = ``<|endoftext|>`` (151643), from ``config.json``.
* **Loading.** The checkpoint's own ``modeling_dream.py`` (remote code, ``trust_remote_code: true``), run under
  transformers 5 through ``ddmrl.models.compat`` (its rotary embedding needs the ``default`` RoPE bridge).
* **LoRA targets** (:data:`LORA_TARGETS`): every decoder layer's attention (q, k, v, o) and SwiGLU MLP (gate, up,
  down) projections, never ``lm_head`` or ``embed_tokens``.

Dream's sampler is ``ddmrl.samplers.dream``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from ddmrl.models.adapters import (
    ModelAdapter,
    _checked_mask_id,
    _config_json,
    remote_checkpoint,
)

__all__ = [
    "AUTO_CLASSES",
    "DREAM_MASK_ID",
    "Aligned",
    "LORA_TARGETS",
    "DreamAdapter",
    "aligned_logits",
    "load",
    "load_dream",
    "left_padding",
    "plan_view",
    "padding_inputs",
    "shift_logits",
    "token_logps",
]

DREAM_MASK_ID = 151666  # <|mask|> of Dream-v0 (config.json's mask_token_id)
#: peft's regular-expression form: the decoder layers' attention and MLP projections, by Qwen2's names
LORA_TARGETS = r".*\.layers\.\d+\.(self_attn\.(q_proj|k_proj|v_proj|o_proj)|mlp\.(gate_proj|up_proj|down_proj))"
AUTO_CLASSES = ("AutoModel",)  # config.json's auto_map entry of DreamModel (the loader's, and ddmrl.plan's)


def shift_logits(logits: torch.Tensor) -> torch.Tensor:
    """Dream's raw logits [B, L, V] (position i predicts token i + 1) -> logits aligned with the tokens they
    predict: ``out[:, i] = logits[:, i - 1]`` for i >= 1 and ``out[:, 0] = logits[:, 0]``, as Dream's ``_sample``."""
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


def padding_inputs(attention_mask: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(attention_mask [B, 1, L, L] additive float, position_ids [B, L])`` for a 0/1 padding mask [B, L], as
    Dream's ``_sample`` builds them: positions count from each row's first real token (pads get 1), and a real
    query attends real keys only. A pad query attends every key (its output is never read; a row with no key left
    would give NaN that then reaches real positions through 0 * NaN)."""
    valid = attention_mask.bool()  # [B, L]
    position_ids = attention_mask.long().cumsum(-1) - 1
    position_ids.masked_fill_(~valid, 1)
    allowed = valid[:, None, None, :] | ~valid[:, None, :, None]  # [B, 1, L, L] key real, or query a pad
    bias = torch.zeros(allowed.shape, dtype=dtype, device=attention_mask.device)
    return bias.masked_fill_(~allowed, torch.finfo(dtype).min), position_ids


def raw_logits(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``DreamModel``'s own logits [B, L, V] (unshifted), pads handled as :func:`padding_inputs`, no KV cache."""
    if attention_mask is None or bool(attention_mask.all()):
        return model(input_ids, use_cache=False).logits
    bias, position_ids = padding_inputs(attention_mask, model.get_input_embeddings().weight.dtype)
    return model(input_ids, attention_mask=bias, position_ids=position_ids, use_cache=False).logits


def aligned_logits(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """[B, L] -> [B, L, V], the logits at i predicting the token at i (:func:`shift_logits` of the model's)."""
    return shift_logits(raw_logits(model, input_ids, attention_mask))


def token_logps(
    model: Any, input_ids: torch.Tensor, completion_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """One-step token log-probabilities log p(o_k | x^t) [N, L] of the clean completion ``completion_ids`` [N, L]
    under the view ``input_ids`` [N, P + L] (P >= 1): completion position P + k is read from the logits at
    P + k - 1. The meaning of ``ddmrl.likelihood.token_logps`` on LLaDA (callers weight the masked positions); the
    log-softmax in float32."""
    length = completion_ids.shape[1]
    if input_ids.shape[1] <= length:
        raise ValueError("Dream reads position i from the logits at i - 1: the view needs at least one prompt token")
    logits = raw_logits(model, input_ids, attention_mask)[:, -length - 1 : -1]  # [N, L, V]
    return torch.log_softmax(logits.float(), -1).gather(-1, completion_ids[..., None]).squeeze(-1)


def left_padding(input_ids: torch.Tensor, pad_id: int | None) -> torch.Tensor | None:
    """The 0/1 padding mask [B, L] of left-padded rows: 0 on each row's leading run of ``pad_id`` (Dream pads
    with EOS, which never starts a prompt: its chat template opens with ``<|im_start|>``), 1 from the first other
    token on; None when no row starts with a pad."""
    if pad_id is None or not bool((input_ids[:, 0] == pad_id).any()):
        return None
    return (input_ids != pad_id).long().cummax(dim=1).values  # [B, L]


class Aligned(nn.Module):
    """A ``DreamModel`` as every ddmrl consumer reads a model: ``forward(input_ids).logits[:, i]`` predicts the
    token at i (:func:`aligned_logits`), and left pads are handled as Dream's own sampler handles them
    (:func:`padding_inputs`), found from the ids (:func:`left_padding`) unless an ``attention_mask`` [B, L] is
    given. So LLaDA's samplers, the likelihoods and the GRPO views run on Dream unchanged, and sampling and
    training see the same padding. ``save_pretrained`` and gradient checkpointing are the wrapped model's (a save
    is a plain Dream checkpoint); peft's LoRA wraps this module and targets the projections inside it."""

    def __init__(self, model: nn.Module, pad_token_id: int | None) -> None:
        super().__init__()
        self.model = model
        self.config = model.config
        self.pad_token_id = pad_token_id

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **_: Any):
        if attention_mask is None:
            attention_mask = left_padding(input_ids, self.pad_token_id)
        return SimpleNamespace(logits=aligned_logits(self.model, input_ids, attention_mask))

    def get_input_embeddings(self) -> nn.Module:
        return self.model.get_input_embeddings()

    def get_output_embeddings(self) -> nn.Module:
        """Dream's ``lm_head``: what LoRA's ``all-linear`` leaves out and ``ddmrl.models.lora`` protects."""
        return self.model.get_output_embeddings()

    def save_pretrained(self, *args: Any, **kwargs: Any) -> None:
        self.model.save_pretrained(*args, **kwargs)

    @property
    def supports_gradient_checkpointing(self) -> bool:
        return bool(getattr(self.model, "supports_gradient_checkpointing", False))

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None) -> None:
        self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs)


class DreamAdapter(ModelAdapter):
    """Dream-v0: mask id from config.json, prompts through its (Qwen2.5) chat template, logits aligned with the
    tokens they predict (:func:`aligned_logits`) and padding as Dream's own sampler handles it."""

    kind = "dream"

    def build_prompt(self, question: str, system_prompt: str | None = None) -> str:
        """One user turn ``system_prompt + "\\n\\n" + question`` (as for LLaDA) through Dream's chat template with
        ``add_generation_prompt=True`` (its template adds Qwen's default system turn)."""
        content = super().build_prompt(question, system_prompt)
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )

    def logits(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return aligned_logits(model, input_ids, attention_mask)

    def view(self, model: nn.Module) -> Aligned:
        """The raw ``DreamModel`` seen with aligned logits and Dream's padding (:class:`Aligned`)."""
        return Aligned(model, self.pad_token_id)


def plan_view(model: nn.Module, config: dict[str, Any]) -> Aligned:
    """A freshly built ``DreamModel`` as the stages train and sample it (:class:`Aligned`, padded with
    ``config``'s ``pad_token_id``): ``ddmrl.plan`` plans this."""
    return Aligned(model, config.get("pad_token_id"))


def load_dream(
    path_or_id: str, revision: str | None = None, trust_remote_code: bool = False, dtype: str = "float32"
) -> tuple[Any, Any, DreamAdapter]:
    """``(model, tokenizer, adapter)`` of a Dream checkpoint directory (or a hub id in the HF cache), in eval mode on
    the CPU, under ddmrl's remote-code policy (``ddmrl.models.adapters``): ``DreamModel`` is the checkpoint's own
    code, run only with ``trust_remote_code`` (a hub id also needs a pinned commit), bridged by
    ``ddmrl.models.compat``. Pads with EOS when the tokenizer has no pad token."""
    why = " (DreamModel lives in the checkpoint's modeling_dream.py)"
    model, tok, local = remote_checkpoint(path_or_id, revision, trust_remote_code, dtype, ("AutoModel",), why)
    mask_id = _checked_mask_id(_config_json(local).get("mask_token_id", tok.mask_token_id), model, str(local))
    return model.eval(), tok, DreamAdapter(tok, mask_id)


def load(spec: Any) -> tuple[Any, Any, DreamAdapter]:
    """The family's loader (``ddmrl.models.FAMILIES["dream"]``): :func:`load_dream` of a ``model:`` spec."""
    return load_dream(spec.path_or_id, spec.revision, spec.trust_remote_code, spec.dtype)
