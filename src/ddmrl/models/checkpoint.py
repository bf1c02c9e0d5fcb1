"""Loading and saving a policy with its tokenizer, the Hugging Face way (safetensors only).

Every stage passes models around as directories. Two kinds exist:

* a ``save_pretrained`` directory of the embedded TinyDDM or TinyBlockDDM (``config.json``, ``model.safetensors``,
  tokenizer);
* a directory holding :data:`POINTER` (``ddmrl_model.json``): the ``ddmrl.models.adapters.ModelSpec`` of a real
  checkpoint (LLaDA, MMaDA, any HF masked LM). The download stage writes one that points into ``download.hub_dir``
  (the 16 GB of weights are never copied), and :func:`save_checkpoint` writes one next to the weights of a trained
  real model (``path_or_id`` empty: this directory), so that the next stage loads it with the same adapter.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import torch

from ddmrl.io import atomic_path, file_digest, read_json, write_json
from ddmrl.models import tiny_block  # noqa: F401  registers TinyBlockDDM with the Auto classes (loads like TinyDDM)
from ddmrl.models.tiny import load_saved  # its module registers TinyDDM with the Auto classes

POINTER = "ddmrl_model.json"
#: the subdirectory of a saved model that holds its auxiliary policy (ddmrl.aux_policies.base)
AUX_DIR = "aux_policy"
#: the subdirectory of a saved model that holds its value model (TraceRL's; ddmrl.objectives.value.ValueModel)
VALUE_DIR = "value_model"
_SPEC_ATTR = "_ddmrl_spec"  # set on a model loaded through a pointer: how to load what is saved from it
_ADAPTER_ATTR = "_ddmrl_adapter"  # and its ddmrl.models.adapters.ModelAdapter (MMaDA: layout, image decoding)


def load_checkpoint(path: str | Path, device: str = "cpu"):
    """(model, tokenizer) from a local ``save_pretrained`` directory or a pointer directory; the model is in eval
    mode on ``device`` (``auto``: the GPU when there is one). The tokenizer's ``mask_token`` is the model's mask id
    and it has a pad token (EOS when it had none), so every sampler and trainer reads both from it."""
    path = Path(path)
    model, tok = _load_pointer(path) if (path / POINTER).exists() else load_saved(path)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return model.to(device).eval(), tok


def _load_pointer(path: Path):
    # a real model's code, only where a pointer is loaded: the stages of a real model name the module in their
    # ``uses`` (ddmrl.pipeline.dag), the others neither import nor depend on it
    from ddmrl.models.adapters import ModelSpec, load_model

    fields = {k: v for k, v in read_json(path / POINTER).items() if k in ModelSpec.__dataclass_fields__}
    model, tok, adapter = load_model(ModelSpec(**{**fields, "path_or_id": fields.get("path_or_id") or str(path)}))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token  # d1 pads prompts with EOS
    if tok.mask_token_id != adapter.mask_token_id:
        tok.mask_token = tok.convert_ids_to_tokens(adapter.mask_token_id)
    model = adapter.view(model)  # Dream: its logits aligned with the tokens they predict, its padding
    setattr(model, _SPEC_ATTR, {k: v for k, v in fields.items() if k not in ("path_or_id", "revision")})
    setattr(model, _ADAPTER_ATTR, adapter)
    return model, tok


def adapter_of(model) -> Any:
    """The adapter of a model loaded through a pointer (also through peft's wrappers), else ``None``."""
    return getattr(model, _ADAPTER_ATTR, None)


def save_checkpoint(model, tok, path: str | Path, aux_policy=None, value_model=None) -> None:
    """Write model + tokenizer to ``path`` atomically (a killed save leaves the old directory or nothing); a model
    loaded through a pointer gets one too (its adapter kind, dtype and remote-code flag; weights here). An
    ``aux_policy`` (``ddmrl.aux_policies``) is saved with them, in ``path/aux_policy/``, a ``value_model`` in
    ``path/value_model/``."""
    spec = getattr(model, _SPEC_ATTR, None)
    with atomic_path(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        if spec is not None:
            write_pointer(tmp, {**spec, "path_or_id": ""})
        if aux_policy is not None:
            aux_policy.save_pretrained(Path(tmp) / AUX_DIR)
        if value_model is not None:
            value_model.save_pretrained(Path(tmp) / VALUE_DIR)


def write_pointer(path: str | Path, spec: dict[str, Any]) -> None:
    """``path/ddmrl_model.json`` with ``spec`` (ModelSpec fields) and a fresh ``weights_id``, so that a new
    save never fingerprints like an old one (:func:`checkpoint_digest`)."""
    write_json(Path(path) / POINTER, {**spec, "weights_id": uuid.uuid4().hex})


def checkpoint_digest(path: str | Path) -> str:
    """What identifies a model directory in a resume fingerprint: the sha256 of ``model.safetensors`` (TinyDDM),
    else of the pointer (which holds the download manifest's digest, or the ``weights_id`` of a save)."""
    path = Path(path)
    return file_digest(path / POINTER if (path / POINTER).exists() else path / "model.safetensors")
