"""Examples to tensors: [BOS prompt] left-padded to P, completion right-padded with EOS to L (LLaDA's layout)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ddmrl.models.tokenizer import encode
from ddmrl.tasks.base import Example, Task


class Encoded(NamedTuple):
    """prompt_ids [N, P]; completion_ids [N, L] (answer, then EOS padding); completion_mask [N, L] (answer and
    the first EOS)."""

    prompt_ids: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor


def prompt_length(task: Task) -> int:
    return task.prompt_length + 1  # + BOS


def encode_prompts(tok, task: Task, examples: list[Example]) -> torch.Tensor:
    """[N, P] prompt ids: BOS + prompt, left-padded with PAD to the task's fixed P. A chat task (a real checkpoint)
    is tokenised as d1 does: its chat text (``Task.chat_text``) with the tokenizer's own special tokens,
    left-padded to the longest prompt of the batch (``tokenizer(prompts, padding="longest")``). A task that lays
    out its own prompts (``Task.encode_prompts``: MMaDA's text-to-image layout) gives them itself."""
    own = task.encode_prompts(tok, examples)
    if own is not None:
        return own
    if task.chat:
        ids = tok([task.chat_text(ex, tok) for ex in examples], padding="longest", padding_side="left")["input_ids"]
        if max(map(len, ids)) > task.prompt_length:
            raise ValueError(
                f"{task.name}: a prompt has {max(map(len, ids))} tokens > prompt_length {task.prompt_length}"
            )
        return torch.tensor(ids, dtype=torch.long)
    p = prompt_length(task)
    rows = []
    for ex in examples:
        ids = [tok.bos_token_id, *encode(tok, ex.prompt)]
        if len(ids) > p:
            raise ValueError(f"{task.name} example {ex.id}: prompt has {len(ids)} tokens > prompt_length + 1 = {p}")
        rows.append([tok.pad_token_id] * (p - len(ids)) + ids)
    return torch.tensor(rows, dtype=torch.long)


def encode_examples(tok, task: Task, examples: list[Example]) -> Encoded:
    """Prompts and reference answers (for pre-training and SFT). An image answer fills the completion exactly."""
    length = task.completion_length
    rows = []
    for ex in examples:
        ids = encode(tok, ex.answer)
        if task.modality == "image" and len(ids) != length:
            raise ValueError(f"{task.name} example {ex.id}: image has {len(ids)} tokens, expected {length}")
        if task.modality != "image" and len(ids) >= length:
            raise ValueError(
                f"{task.name} example {ex.id}: answer has {len(ids)} tokens, needs < {length} (room for EOS)"
            )
        rows.append(ids + [tok.eos_token_id] * (length - len(ids)))
    completion = torch.tensor(rows, dtype=torch.long)
    return Encoded(encode_prompts(tok, task, examples), completion, completion_mask(completion, tok.eos_token_id))


def completion_mask(completion_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """[N, L] True up to and including the first EOS (d1's completion mask); all True when there is no EOS."""
    is_eos = completion_ids == eos_id
    before = is_eos.long().cumsum(1) - is_eos.long()  # EOS seen strictly before position k
    return before == 0


def drop_prompts(prompt_ids: torch.Tensor, prob: float, mask_id: int, gen: torch.Generator) -> torch.Tensor:
    """Caption dropout for classifier-free guidance (MMaDA's ``cond_dropout_prob``): each row's whole prompt is
    replaced, with probability ``prob``, by the unconditional form the samplers use (every prompt position masked;
    ``ddmrl.samplers.llada.guided_logits``). [N, P] -> [N, P]."""
    drop = torch.rand(prompt_ids.shape[0], generator=gen) < prob  # [N]
    return prompt_ids.masked_fill(drop[:, None], mask_id)
