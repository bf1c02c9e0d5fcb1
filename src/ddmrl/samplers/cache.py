"""Fast-dLLM's block-wise approximate KV cache (Wu et al. 2025, section 3.1) as the samplers use it.

At the first step of each semi-autoregressive block the whole sequence is evaluated and every layer's keys and
values are kept. The block's later steps evaluate only a window and read the cache for the other positions:

* ``prefix``: the window is the current block and everything after it; the keys and values of the positions before
  the block (prompt and earlier blocks) come from the cache;
* ``dual``: the window is the current block only; the positions before *and* after it come from the cache.

Approximate, because the cached keys and values of a layer above the first were computed before this block's
latest tokens were committed (every position attends to every other one). Exact for the block's first step (the
refresh), for the first layer (a position's keys depend only on its own token), and whenever no token changed since
the refresh. Which models have a cached forward: TinyDDM (``past_key_values`` / ``window_start``) and LLaDA's
``LLaDAModelLM`` (driven module by module, ``ddmrl.models.llada_cache``), also inside peft (LoRA) or DDP wrappers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ddmrl.models.llada_cache import forward_window, is_llada

KV_CACHES = ("none", "prefix", "dual")

#: (input_ids [B, n], past_key_values or None, window_start) -> (logits [B, n, V], past_key_values)
CachedForward = Callable[[torch.Tensor, tuple | None, int], tuple[torch.Tensor, tuple]]


def _inner(model: nn.Module) -> nn.Module:
    """The model under DDP and peft wrappers (peft's LoRA layers stay in place inside it)."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        model = model.module
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def cached_forward(model: nn.Module, kind: str) -> CachedForward:
    """The cached forward pass of ``model`` for ``sampler.kv_cache = kind``; a clear error for a model without one."""
    inner = _inner(model)
    if getattr(getattr(inner, "config", None), "model_type", None) == "tiny_ddm":  # TinyDDMForMaskedLM

        def tiny(ids: torch.Tensor, past: tuple | None, start: int) -> tuple[torch.Tensor, tuple]:
            out = inner(ids, past_key_values=past, window_start=start, use_cache=True)
            return out.logits, out.past_key_values

        return tiny
    if is_llada(inner):
        return lambda ids, past, start: forward_window(inner, ids, past, start)
    raise ValueError(
        f"sampler.kv_cache = {kind!r}: {type(inner).__name__} has no cached forward pass "
        "(TinyDDM and LLaDA's LLaDAModelLM have one); use kv_cache: none"
    )


def window(kind: str, lo: int, hi: int, total: int) -> tuple[int, int]:
    """Positions evaluated at a block's later steps: the block and all after it (``prefix``) or the block (``dual``).

    >>> window("prefix", 10, 14, 30), window("dual", 10, 14, 30)
    ((10, 30), (10, 14))
    """
    if kind == "prefix":
        return lo, total
    if kind == "dual":
        return lo, hi
    raise ValueError(f"unknown kv_cache {kind!r}; choose one of {KV_CACHES}")
