"""MMaDA's text-to-image sequence layout around any masked diffusion model.

MMaDA (Yang et al. 2025; Gen-Verse/MMaDA ``training/prompting_utils.py``) writes one bidirectional sequence per image:
prompt tokens, ``<soi>``, the N image tokens, ``<eoi>``. The prompt is never masked, and the image positions'
logits are sliced to the image codebook's columns both when sampling and when computing log-probs (the 8192
MAGVIT-v2 codes of MMaDA-8B; the image-code tokens of geneval-mini here).

Every sampler, estimator and training loop in ddmrl works on ``[prompt | completion]`` and reads
``model(x).logits``. :class:`ImageLayout` lets them run unchanged on images: the task's prompt already ends with
``<soi>``, the completion is the N image tokens, and the wrapper appends the ``<eoi>`` suffix before the forward
pass, drops its logits, and leaves only the image codes with finite logits at the completion positions.
:class:`MMaDALayout` does the same in MMaDA-8B's own token layout (padding outside attention, the empty caption as
the unconditional form).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

import torch
from torch import nn

from ddmrl.models.checkpoint import adapter_of
from ddmrl.models.mmada import T2ILayout, attention_bias

if TYPE_CHECKING:  # a task is read, never imported: tasks sit above models
    from ddmrl.tasks.base import Task

#: the logit given to tokens outside the codebook: finite, so that p * log p stays 0 (not nan) for them
EXCLUDED_LOGIT = -1e9


class ImageLayout(nn.Module):
    """``model`` seen through the layout ``[prompt | completion | suffix]`` with completion logits restricted.

    ``forward(input_ids [N, P + L]) -> .logits [N, P + L, V]``: the logits of the wrapped model on
    ``input_ids`` followed by ``suffix_ids``, with the suffix positions dropped and, at the last ``L`` positions,
    every token outside ``code_ids`` set to :data:`EXCLUDED_LOGIT`.
    """

    def __init__(self, model: nn.Module, suffix_ids: list[int], code_ids: list[int], completion_length: int) -> None:
        super().__init__()
        self.model = model
        self.config = model.config
        self.completion_length = completion_length
        self.register_buffer("suffix", torch.tensor(suffix_ids, dtype=torch.long), persistent=False)
        codes = torch.zeros(model.config.vocab_size, dtype=torch.bool)
        codes[code_ids] = True
        self.register_buffer("codes", codes, persistent=False)

    def forward(self, input_ids: torch.Tensor, **kwargs) -> SimpleNamespace:
        n, t = input_ids.shape
        x = torch.cat([input_ids, self.suffix.expand(n, -1)], dim=1)  # [N, P + L + S]
        return self._codes_only(self.model(x).logits[:, :t])  # [N, P + L, V]

    def _codes_only(self, logits: torch.Tensor) -> SimpleNamespace:
        """[N, P + L, V] logits with every token outside the codebook excluded at the last L positions."""
        outside = torch.zeros_like(logits[0], dtype=torch.bool)  # [P + L, V]
        outside[logits.shape[1] - self.completion_length :] = ~self.codes
        return SimpleNamespace(logits=logits.masked_fill(outside, EXCLUDED_LOGIT))


class MMaDALayout(ImageLayout):
    """MMaDA-8B's own text-to-image layout (``ddmrl.models.mmada.T2ILayout``) for the samplers and trainers.

    The prompt is MMaDA's text part plus ``<|soi|>`` (:meth:`prompt_ids`: ``[iPAD].., <|t2i|>, BOS, caption, EOS,
    <|soi|>``), the completion the N image tokens (``image_offset + code``), the suffix ``<|eoi|>``. Two things
    differ from :class:`ImageLayout`, both as MMaDA's ``t2i_generate`` does them:

    * ``[iPAD]`` neither attends nor is attended: the forward pass gets MMaDA's ``attention_bias``;
    * a row whose prompt is all mask ids (the samplers' unconditional branch for guidance, and caption dropout)
      becomes MMaDA's unconditional form, the empty caption, on which MMaDA was trained (``cond_dropout_prob``).
    """

    def __init__(self, model: nn.Module, layout: T2ILayout) -> None:
        codes = range(layout.image_offset, layout.image_offset + layout.codebook_size)
        super().__init__(model, [layout.eoi_id], list(codes), layout.num_image_tokens)
        self.layout = layout
        self.register_buffer("uncond_prompt", self.prompt_ids([[]])[0], persistent=False)  # [P]

    def prompt_ids(self, caption_ids: list[list[int]]) -> torch.Tensor:
        """[B, text_len + 1] prompts (text part and ``<|soi|>``) of B captions' token ids."""
        return torch.tensor([self.layout.text_part(ids)[0] + [self.layout.soi_id] for ids in caption_ids])

    def forward(self, input_ids: torch.Tensor, **kwargs) -> SimpleNamespace:
        n, t = input_ids.shape
        p = t - self.completion_length
        prompt = input_ids[:, :p]  # [N, P]
        unconditional = (prompt == self.layout.mask_token_id).all(1, keepdim=True)  # [N, 1]
        prompt = torch.where(unconditional, self.uncond_prompt, prompt)
        x = torch.cat([prompt, input_ids[:, p:], self.suffix.expand(n, -1)], dim=1)  # [N, P + L + 1]
        bias = attention_bias(x != self.layout.pad_id)  # [N, 1, T, T]
        return self._codes_only(self.model(x, attention_bias=bias).logits[:, :t])


#: MMaDA's reserved tokens of the T2I layout (T2ILayout field -> token); their ids come from the tokenizer when it
#: has them, else T2ILayout's defaults (MMaDA-8B's reserved ids)
MMADA_TOKENS = {"t2i_id": "<|t2i|>", "soi_id": "<|soi|>", "eoi_id": "<|eoi|>", "pad_id": "[iPAD]"}


def for_task(model: nn.Module, tok, task: Task) -> nn.Module:
    """``model`` as ``task`` needs it: unchanged for text, wrapped in :class:`ImageLayout` for image tasks in the
    task's own tokens, in :class:`MMaDALayout` for MMaDA's layout (the task is then bound to the layout's prompts
    and the checkpoint's image decoder)."""
    if task.modality != "image":
        return model
    if task.image_layout == "mmada":
        return _mmada_for_task(model, tok, task)
    return ImageLayout(
        model,
        tok.convert_tokens_to_ids(list(task.completion_suffix)),
        tok.convert_tokens_to_ids(list(task.image_tokens)),
        task.completion_length,
    )


def _mmada_for_task(model: nn.Module, tok, task: Task) -> MMaDALayout:
    adapter = adapter_of(model)
    if adapter is None or adapter.kind != "mmada":
        raise ValueError(f"task {task.name} needs MMaDA (image.model.kind: mmada), not {type(unwrap(model)).__name__}")
    vocab = tok.get_vocab()
    ids = {key: vocab[token] for key, token in MMADA_TOKENS.items() if token in vocab}
    layout = adapter.t2i_layout(task.max_seq_length, task.completion_length, **ids)
    wrapped = MMaDALayout(model, layout)
    task.bind(
        lambda captions: wrapped.prompt_ids(adapter.encode_captions(captions)),
        lambda completion_ids: adapter.decode_images(layout.codes_from_tokens(completion_ids.cpu()), layout),
    )
    return wrapped


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a layout wrapper (what is saved as the checkpoint)."""
    return model.model if isinstance(model, ImageLayout) else model  # MMaDALayout is an ImageLayout
