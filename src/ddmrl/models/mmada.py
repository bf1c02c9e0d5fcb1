"""MMaDA text-to-image: the token layout, code-column logits, CFG, and MAGVIT-v2 decoding (Yang et al. 2025,
MMaDA; Gen-Verse/MMaDA ``training/prompting_utils.py`` ``t2i_gen``, ``models/modeling_mmada.py``
``t2i_generate``, ``inference_t2i.py``), restated, not copied.

One T2I sequence, B rows of ``text_len + num_image_tokens + 2`` tokens::

    [iPAD] * left_pad, <|t2i|>, BOS, text..., EOS, <|soi|>, image_1 ... image_N, <|eoi|>
    |<------------------- text_len = max_seq_length + 1 ------------------>|

* The text part always has ``text_len`` tokens: left-padded with ``[iPAD]`` (attention 0 there), or, when too
  long, cut to ``text_len - 1`` tokens and EOS appended (as MMaDA does).
* An image position holds the mask id or ``image_offset + code`` (code in [0, codebook_size)); the model's
  logits are sliced to those positions and to the ``codebook_size`` code columns.
* The unconditional branch for classifier-free guidance is the same builder with an empty caption
  (``<|t2i|>, BOS, EOS`` left-padded); at every step its text part is joined to the *current* image tokens of the
  conditional rows (:meth:`T2ILayout.uncond_like`). Guided logits = (1 + w) cond - w uncond.
* The attention mask becomes MMaDA's ``attention_bias`` = outer product of the 0/1 mask: pads neither attend nor
  are attended.

MMaDA's model class and MAGVIT-v2 are not part of ddmrl: they come from the user's checkout of
github.com/Gen-Verse/MMaDA (``model.mmada_code``), see :func:`import_mmada`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "MMADA_REPO_URL",
    "T2ILayout",
    "attention_bias",
    "cfg_logits",
    "decode_images",
    "import_mmada",
    "load_magvit",
    "to_uint8_images",
]

MMADA_REPO_URL = "https://github.com/Gen-Verse/MMaDA"
_PKG_NAME = "ddmrl_mmada_models"  # the checkout's models/ package is imported under this private name


@dataclass(frozen=True)
class T2ILayout:
    """Token ids and sizes of MMaDA's T2I sequence. Defaults: MMaDA-8B-Base (the module's sources above)."""

    max_seq_length: int = 512  # MMaDA config dataset.preprocessing.max_seq_length; text part = this + 1
    num_image_tokens: int = 1024  # 512 px with MAGVIT-v2 f=16 (32 x 32); 256 for 256 px
    image_offset: int = 126349  # token id of code 0 = len(text tokenizer)
    codebook_size: int = 8192
    mask_token_id: int = 126336
    t2i_id: int = 126088
    soi_id: int = 126084
    eoi_id: int = 126085
    pad_id: int = 126093  # [iPAD]
    bos_id: int = 126080
    eos_id: int = 126081

    def __post_init__(self) -> None:
        for key in ("max_seq_length", "num_image_tokens", "codebook_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"T2ILayout.{key} = {getattr(self, key)}: must be >= 1")
        code_ids = range(self.image_offset, self.image_offset + self.codebook_size)
        for key in ("mask_token_id", "t2i_id", "soi_id", "eoi_id", "pad_id", "bos_id", "eos_id"):
            if getattr(self, key) in code_ids:
                raise ValueError(f"T2ILayout.{key} = {getattr(self, key)}: collides with the image code ids")

    @property
    def text_len(self) -> int:
        """Tokens in the text part (``max_seq_length + 1``, as MMaDA's ``UniversalPrompting``)."""
        return self.max_seq_length + 1

    @property
    def seq_len(self) -> int:
        return self.text_len + self.num_image_tokens + 2

    @property
    def image_positions(self) -> slice:
        """Sequence positions of the N image tokens (between ``<|soi|>`` and ``<|eoi|>``)."""
        return slice(self.text_len + 1, self.text_len + 1 + self.num_image_tokens)

    def text_part(self, text_ids: Sequence[int]) -> tuple[list[int], list[int]]:
        """(ids, 0/1 attention) of the text part for one caption's token ids (BOS added if missing)."""
        ids = list(text_ids)
        if not ids or ids[0] != self.bos_id:
            ids = [self.bos_id, *ids]
        ids = [self.t2i_id, *ids, self.eos_id]
        if len(ids) > self.text_len:  # too long: cut and end with EOS again
            ids = [*ids[: self.text_len - 1], self.eos_id]
        pad = self.text_len - len(ids)
        return [self.pad_id] * pad + ids, [0] * pad + [1] * len(ids)

    def build(
        self, text_ids: Sequence[Sequence[int]], image_tokens: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input_ids, attention_mask)``, both [B, seq_len] (long), for B captions' token ids.

        ``image_tokens`` [B, N] are token ids (``tokens_from_codes``) or the mask id; ``None`` = all masked.
        """
        b = len(text_ids)
        if b < 1:
            raise ValueError("T2ILayout.build needs at least one caption")
        if image_tokens is None:
            image_tokens = torch.full((b, self.num_image_tokens), self.mask_token_id, dtype=torch.long)
        if tuple(image_tokens.shape) != (b, self.num_image_tokens):
            raise ValueError(
                f"image_tokens has shape {tuple(image_tokens.shape)}, expected ({b}, {self.num_image_tokens})"
            )
        parts = [self.text_part(t) for t in text_ids]
        text = torch.tensor([p[0] for p in parts], dtype=torch.long).view(b, self.text_len)  # [B, text_len]
        text_mask = torch.tensor([p[1] for p in parts], dtype=torch.long).view(b, self.text_len)
        soi = torch.full((b, 1), self.soi_id, dtype=torch.long)
        eoi = torch.full((b, 1), self.eoi_id, dtype=torch.long)
        ids = torch.cat([text, soi, image_tokens.long().cpu(), eoi], dim=1)  # [B, seq_len]
        mask = torch.cat([text_mask, torch.ones(b, self.num_image_tokens + 2, dtype=torch.long)], dim=1)
        return ids.to(image_tokens.device), mask.to(image_tokens.device)

    def unconditional(self, batch_size: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """The empty-caption rows for CFG (``<|t2i|>, BOS, EOS`` left-padded, image fully masked): [B, seq_len]."""
        image = torch.full((batch_size, self.num_image_tokens), self.mask_token_id, dtype=torch.long, device=device)
        return self.build([[] for _ in range(batch_size)], image)

    def uncond_like(
        self, cond_ids: torch.Tensor, uncond_ids: torch.Tensor, uncond_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Unconditional rows holding the *current* image tokens of ``cond_ids`` [B, seq_len]: the text part
        (``text_len`` tokens, not MMaDA's ``resolution + 1``, issue MMaDA#64) of ``uncond_ids`` + the rest of
        ``cond_ids``."""
        t = self.text_len
        ids = torch.cat([uncond_ids[:, :t].expand(cond_ids.shape[0], t), cond_ids[:, t:]], dim=1)
        mask = torch.cat([uncond_mask[:, :t].expand(cond_ids.shape[0], t), torch.ones_like(cond_ids[:, t:])], dim=1)
        return ids, mask

    def code_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """[B, seq_len, V] -> [B, N, codebook_size]: image positions, code columns only."""
        if logits.shape[1] != self.seq_len:
            raise ValueError(f"logits have {logits.shape[1]} positions, the T2I layout has {self.seq_len}")
        if logits.shape[2] < self.image_offset + self.codebook_size:
            raise ValueError(
                f"logits have {logits.shape[2]} columns, fewer than image_offset + codebook_size = "
                f"{self.image_offset + self.codebook_size}"
            )
        return logits[:, self.image_positions, self.image_offset : self.image_offset + self.codebook_size]

    def tokens_from_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Codebook indices [B, N] -> token ids (``image_offset + code``); -1 (unknown) -> the mask id."""
        return torch.where(codes < 0, self.mask_token_id, codes + self.image_offset)

    def codes_from_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Image token ids [B, N] -> codebook indices; the mask id -> -1."""
        return torch.where(tokens == self.mask_token_id, -1, tokens - self.image_offset)


def attention_bias(attention_mask: torch.Tensor) -> torch.Tensor:
    """MMaDA's ``attention_bias`` [B, 1, L, L] (bool) from a 0/1 mask [B, L]: i and j see each other iff both 1."""
    m = attention_mask.bool()
    return (m[:, :, None] & m[:, None, :]).unsqueeze(1)


def cfg_logits(cond: torch.Tensor, uncond: torch.Tensor, guidance_scale: float) -> torch.Tensor:
    """MMaDA / MUSE guidance: (1 + w) cond - w uncond (= LLaDA's u + (w + 1)(c - u))."""
    return (1.0 + guidance_scale) * cond - guidance_scale * uncond


def to_uint8_images(pixels: torch.Tensor) -> torch.Tensor:
    """Decoder output [B, 3, H, W] in [-1, 1] -> uint8 [B, H, W, 3] (MMaDA ``inference_t2i.py``)."""
    x = torch.clamp((pixels.float() + 1.0) / 2.0, 0.0, 1.0) * 255.0
    return x.permute(0, 2, 3, 1).to(torch.uint8)


@torch.no_grad()
def decode_images(vq: Any, codes: torch.Tensor, codebook_size: int = 8192) -> torch.Tensor:
    """MAGVIT-v2 decode: codes [B, N] (clamped to [0, codebook_size), as MMaDA does) -> uint8 [B, H, W, 3]."""
    codes = torch.clamp(codes.long(), 0, codebook_size - 1)
    return to_uint8_images(vq.decode_code(codes))


# ------------------------------------------------------------------------------------------------ MMaDA code


def _missing(what: str) -> RuntimeError:
    return RuntimeError(
        f"{what}: MMaDA's model code and MAGVITv2 are not part of ddmrl; clone {MMADA_REPO_URL} (git clone "
        f"{MMADA_REPO_URL}.git, pin a commit) and set model.mmada_code to that checkout (the directory holding "
        "models/), or put the checkout on PYTHONPATH so that `models.MMadaModelLM` imports"
    )


def import_mmada(mmada_code: str | Path | None) -> Any:
    """The ``models`` package of a Gen-Verse/MMaDA checkout (``MMadaModelLM``, ``MAGVITv2``).

    ``mmada_code``: the checkout (holding ``models/__init__.py``) or its ``models`` directory; the package is
    imported under a private name so that it cannot shadow another ``models``. ``None``: an importable top-level
    ``models`` package that has ``MMadaModelLM`` (MMaDA's own scripts run from the checkout's root). Raises
    ``RuntimeError`` naming ``model.mmada_code`` and where to get the code, or the package MMaDA itself needs.
    """
    if mmada_code is None:
        if importlib.util.find_spec("models") is None:
            raise _missing("model.mmada_code is not set and no `models` package is importable")
        module = _exec_import(lambda: importlib.import_module("models"))
        if not hasattr(module, "MMadaModelLM"):
            where = getattr(module, "__file__", None) or "?"
            raise _missing(f"model.mmada_code is not set and `models` ({where}) is not MMaDA's")
        return module
    root = Path(mmada_code).expanduser()
    pkg = root / "models" if (root / "models" / "__init__.py").is_file() else root
    init = pkg / "__init__.py"
    if not init.is_file():
        raise _missing(f"model.mmada_code = {str(mmada_code)!r}: no models/__init__.py there")
    init = init.resolve()
    loaded = sys.modules.get(_PKG_NAME)
    if loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == init:
        return loaded
    spec = importlib.util.spec_from_file_location(_PKG_NAME, init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    for name in [n for n in sys.modules if n == _PKG_NAME or n.startswith(_PKG_NAME + ".")]:
        del sys.modules[name]  # another checkout was imported before: drop it and its submodules
    sys.modules[_PKG_NAME] = module

    def run() -> Any:
        spec.loader.exec_module(module)
        return module

    try:
        return _exec_import(run)
    except BaseException:
        sys.modules.pop(_PKG_NAME, None)
        raise


def _exec_import(run) -> Any:
    try:
        return run()
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "diffusers":
            raise RuntimeError(
                "MMaDA's MAGVITv2 needs the diffusers package: pip install diffusers==0.32.2 (MMaDA's pin), or "
                'pip install -e ".[mmada]" for everything MMaDA\'s models/ imports'
            ) from None
        raise RuntimeError(
            f'importing MMaDA\'s code failed: module {e.name!r} is missing (pip install -e ".[mmada]" installs what '
            "MMaDA's models/ imports)"
        ) from None


def load_magvit(path: str | Path, mmada_code: str | Path | None) -> Any:
    """MAGVIT-v2 (``showlab/magvitv2``) from a local directory, frozen and in eval mode.

    ``path`` is a local directory (``ddmrl.hub.resolve_local`` turns a cached hub id into one); the class comes
    from MMaDA's code (:func:`import_mmada`). Missing code raises an error naming ``model.mmada_code``.
    """
    package = import_mmada(mmada_code)
    cls = getattr(package, "MAGVITv2", None)
    if cls is None:
        raise _missing(f"{getattr(package, '__file__', 'models')}: has no MAGVITv2")
    vq = cls.from_pretrained(str(path))
    vq.requires_grad_(False)
    return vq.eval()
