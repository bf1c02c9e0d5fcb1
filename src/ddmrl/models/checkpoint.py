"""Loading and saving a policy with its tokenizer, the Hugging Face way (safetensors only)."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoModelForMaskedLM, AutoTokenizer

import ddmrl.models.tiny  # noqa: F401  (registers TinyDDM with the Auto classes)
from ddmrl.io import atomic_path


def load_checkpoint(path: str | Path):
    """(model, tokenizer) from a local ``save_pretrained`` directory; the model is in eval mode."""
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path}: no checkpoint here (expected config.json from save_pretrained)")
    model = AutoModelForMaskedLM.from_pretrained(path, use_safetensors=True)
    tok = AutoTokenizer.from_pretrained(path)
    return model.eval(), tok


def save_checkpoint(model, tok, path: str | Path) -> None:
    """Write model + tokenizer to ``path`` atomically (a killed save leaves the old directory or nothing)."""
    with atomic_path(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
