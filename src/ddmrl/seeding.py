"""Deterministic seeds per unit of work (after nanochat's ``hash((step, example, chunk))``).

A leaf: torch is imported by the two functions that need it, so ``derive_seed`` costs nothing to import."""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any parts, e.g. ``derive_seed(seed, "grpo", run, step)``; stable across processes."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def generator(*parts: object) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by ``derive_seed(*parts)``; never touches the global RNG."""
    import torch

    return torch.Generator().manual_seed(derive_seed(*parts))


def seed_everything(seed: int) -> None:
    """Seed the global RNGs (model initialisation); every sampling draw uses its own generator instead."""
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
