"""A researcher's own model family, outside ddmrl: a small masked diffusion model in a checkpoint directory of its
own (TinyDDM's architecture and tokenizer, saved with ``save_pretrained``), loaded by its family's loader. A
``model:`` section names it as ``kind: "mylab.models:load"`` with ``path_or_id`` the directory; every stage that
loads the model (the download's pointer, then every save of it) goes through ``load``."""

from __future__ import annotations

from typing import Any

import torch

from ddmrl.models.adapters import ModelAdapter, ModelSpec
from ddmrl.models.tiny import load_saved


class BidirectionalAdapter(ModelAdapter):
    """The prompt strings are the model input; every position attends to every other."""

    kind = "mylab.models:load"

    def logits(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return model(input_ids).logits  # [B, L, V]


def load(spec: ModelSpec) -> tuple[Any, Any, ModelAdapter]:
    """``(model, tokenizer, adapter)`` of the checkpoint directory ``spec.path_or_id`` (eval mode, on the CPU)."""
    model, tok = load_saved(spec.path_or_id)
    return model.eval(), tok, BidirectionalAdapter(tok, tok.mask_token_id)
