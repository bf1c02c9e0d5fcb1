"""A tiny TinyMAR for the tests of ddmrl.mar."""

from __future__ import annotations

import pytest
import torch

from ddmrl.mar.model import TinyMAR, new_tiny_mar
from ddmrl.tasks.geneval_mini import WORDS

SIZES = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
SIZES |= {"head_width": 16, "head_depth": 1}


def make_tiny(seed: int = 0, random_head: bool = True, position_embedding: str = "learned") -> TinyMAR:
    """A 1-layer TinyMAR over geneval-mini's words (10-word prompts); ``random_head``: a head whose zero-initialised
    layers (MAR's adaLN modulations and output) are made random, so that it depends on the condition z."""
    torch.manual_seed(seed)
    model = new_tiny_mar(list(WORDS), 10, 64, position_embedding=position_embedding, **SIZES)
    if random_head:
        with torch.no_grad():
            for p in model.head.parameters():
                if not p.any():
                    p.normal_(std=0.05)
    return model


@pytest.fixture
def tiny():
    return make_tiny
