"""Shared fixtures for the unit tests: a tiny tokenizer and a tiny random TinyDDM (CPU, milliseconds)."""

from __future__ import annotations

import pytest
import torch

from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM
from ddmrl.models.tokenizer import build_tokenizer

# Tiny tensors: one intra-op thread is fastest, and avoids thread spinning against other jobs on a 2-core machine
# (with 2 threads a 16-wide forward pass can take 0.3 s instead of 2 ms when another process holds a core).
torch.set_num_threads(1)


def tiny_model(tok, max_positions: int = 16, seed: int = 0, hidden: int = 16) -> TinyDDMForMaskedLM:
    """A 1-layer TinyDDM over ``tok``'s vocabulary, initialised from ``seed`` (eval mode)."""
    torch.manual_seed(seed)
    cfg = TinyDDMConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_layers=1,
        num_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=max_positions,
        mask_token_id=tok.mask_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    return TinyDDMForMaskedLM(cfg).eval()


@pytest.fixture(scope="session")
def tok():
    """Ids: [MASK]=0 [PAD]=1 [BOS]=2 [EOS]=3 [UNK]=4 <a>=5 '0'=6 '1'=7 '2'=8 '3'=9."""
    return build_tokenizer("0123", ["<a>"])


@pytest.fixture
def make_model(tok):
    """Factory: ``make_model(max_positions=16, seed=0, tokenizer=None)`` -> a fresh tiny random TinyDDM over
    ``tokenizer`` (default: the session's ``tok``)."""

    def make(max_positions: int = 16, seed: int = 0, hidden: int = 16, tokenizer=None) -> TinyDDMForMaskedLM:
        return tiny_model(tokenizer if tokenizer is not None else tok, max_positions, seed, hidden)

    return make


@pytest.fixture
def sharp_model(make_model):
    """A tiny random TinyDDM over 16 positions whose weights are drawn wider (std 0.5) than the 0.02-std init, so
    that confidences spread over (0, 1): samplers revise tokens under RCR and propose EOS."""
    model = make_model(max_positions=16)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(p.numel()))
    return model


class Out:
    """The part of a model output the code under test reads: ``.logits``."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits


class FixedLogits(torch.nn.Module):
    """A stub model whose logits ignore the input: ``table`` [T, V] is returned for every row.

    ``calls`` records each input it was given (to count forward passes and inspect states).
    """

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table
        self.calls: list[torch.Tensor] = []

    def forward(self, input_ids: torch.Tensor) -> Out:
        self.calls.append(input_ids.clone())
        n, t = input_ids.shape
        return Out(self.table[-t:].expand(n, t, self.table.shape[-1]).clone())


@pytest.fixture
def fixed_logits_model():
    """Factory for :class:`FixedLogits`."""
    return FixedLogits
