"""Every real model family's tiny random instance, by ``model.kind``: a checkpoint directory of the family's real
class built from ``../shared/reference`` (``tests/real_models.py``, ``real_dream.py``, ``real_sdar.py``,
``real_llada2.py``), and the mark that skips a test, with the reason, where that reference code is absent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import real_dream
import real_llada2
import real_models
import real_sdar
import torch

#: model.kind -> (build a checkpoint directory at a path, returning the in-memory model; skip mark)
BUILDERS: dict[str, tuple[Callable[[Path], torch.nn.Module], pytest.MarkDecorator]] = {
    "llada": (lambda path: real_models.llada_checkpoint(path, real_models.tokenizer()), real_models.needs_reference),
    "mmada": (lambda path: real_models.mmada_checkpoint(path, real_models.tokenizer()), real_models.needs_reference),
    "dream": (lambda path: real_dream.dream_checkpoint(path, real_dream.tokenizer()), real_dream.needs_dream),
    "sdar": (lambda path: real_sdar.sdar_checkpoint(path, real_sdar.tokenizer()), real_sdar.needs_sdar),
    "llada2": (lambda path: real_llada2.llada2_checkpoint(path, real_llada2.tokenizer()), real_llada2.needs_llada2),
}


def missing(kind: str) -> str | None:
    """Why family ``kind``'s reference code is absent here, or None."""
    mark = BUILDERS[kind][1].mark
    return mark.kwargs["reason"] if mark.args[0] else None


def place_model(root: Path, spec) -> torch.nn.Module:
    """The tiny instance of ``spec``'s family (a ``model:`` section) where the download stage puts the real one,
    ``root / spec.path_or_id``, and for MMaDA its checkout at ``root / spec.mmada_code`` (a link to the reference)."""
    model = BUILDERS[spec.kind][0](root / spec.path_or_id)
    if spec.kind == "mmada":
        (root / spec.mmada_code).parent.mkdir(parents=True, exist_ok=True)
        (root / spec.mmada_code).symlink_to(real_models.REFERENCE)
    return model
