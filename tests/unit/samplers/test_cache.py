"""The block-wise KV cache (ddmrl.samplers.cache) on TinyDDM and on LLaDA's own model class.

LLaDA's ``LLaDAModelLM`` is built as a tiny random instance from the reference checkout
(``/work/shared/reference/mmada/models``, never copied into the repository); those tests are skipped without it.
"""

from __future__ import annotations

import doctest
import importlib
import sys
import types
from pathlib import Path

import pytest
import torch
from float_error import forward_passes_agree

import ddmrl.samplers.cache as cache
from ddmrl.models.llada_cache import forward_window, is_llada
from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM
from ddmrl.samplers.cache import cached_forward, window
from ddmrl.samplers.llada import generate

MASK = 0
REFERENCE = Path("/work/shared/reference/mmada/models")


def tiny(layers: int, rope: bool = True, seed: int = 0) -> TinyDDMForMaskedLM:
    torch.manual_seed(seed)
    cfg = TinyDDMConfig(
        vocab_size=12, hidden_size=32, num_layers=layers, num_heads=4, intermediate_size=64,
        max_position_embeddings=40, position_embedding="rope" if rope else "learned", mask_token_id=MASK,
    )  # fmt: skip
    m = TinyDDMForMaskedLM(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.4)
    return m


def llada_module():
    """LLaDA's modeling module from the reference checkout, without the package __init__ (which needs MAGVIT)."""
    if not (REFERENCE / "modeling_llada.py").exists():
        pytest.skip(f"LLaDA's reference code is not at {REFERENCE}")
    if "llada_reference" not in sys.modules:
        pkg = types.ModuleType("llada_reference")
        pkg.__path__ = [str(REFERENCE)]
        sys.modules["llada_reference"] = pkg
    return importlib.import_module("llada_reference.configuration_llada"), importlib.import_module(
        "llada_reference.modeling_llada"
    )


def llada(layers: int, block_type: str = "llama", seed: int = 0, gqa: bool = True, group: int = 1):
    """A tiny random ``LLaDAModelLM`` (LLaDA-8B's layout: llama blocks, RoPE, SwiGLU through up_proj, no bias)."""
    conf, mod = llada_module()
    cfg = conf.LLaDAConfig(
        d_model=32, n_heads=4, n_kv_heads=2 if gqa else 4, n_layers=layers, mlp_hidden_size=64, mlp_ratio=2,
        vocab_size=12, embedding_size=12, max_sequence_length=64, rope=True, block_type=block_type,
        activation_type="silu" if block_type == "llama" else "swiglu", weight_tying=block_type != "llama",
        block_group_size=group, init_device="cpu", mask_token_id=MASK, pad_token_id=1, eos_token_id=2,
    )  # fmt: skip
    cfg.use_cache = False  # read by LLaDAModelLM.forward; transformers 5's PretrainedConfig no longer sets it
    torch.manual_seed(seed)
    m = mod.LLaDAModelLM(cfg, init_params=True).eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.4)
    return m


def states(seed: int = 0):
    """x_old: a 5-token prompt, block 0 (positions 5..8) decoded, the rest masked; x_new: two more tokens of block
    1 (positions 9..12) committed."""
    g = torch.Generator().manual_seed(seed)
    x_old = torch.cat([torch.randint(3, 12, (3, 9), generator=g), torch.full((3, 12), MASK)], 1)  # [3, 21]
    x_new = x_old.clone()
    x_new[:, 9:11] = torch.randint(3, 12, (3, 2), generator=g)
    return x_old, x_new


MODELS = {
    "tiny": lambda layers: tiny(layers),
    "tiny_learned": lambda layers: tiny(layers, rope=False),
    "llada": lambda layers: llada(layers),
    "llada_sequential_groups": lambda layers: llada(layers, "sequential", gqa=False, group=layers),
}


def logits(m, x):
    return m(x).logits


# Two forward passes of one network on the same inputs, in other shapes (a window and the whole sequence, the cache
# and none): they differ by float32 rounding, whose size depends on the CPU's kernels. Tolerances from float32's
# error (tests/float_error.py, forward_passes_agree): both also run on a float64 copy of the model and agree there to
# 1e-10 of the largest |logit| S (the check that they compute the same function); in float32 each is within
# n eps32 S of its float64 logits, n the longest chain of sums of the pass, and the two within 2 n eps32 S.


def test_window_doctest():
    assert doctest.testmod(cache, verbose=False).failed == 0


@pytest.mark.parametrize("name", list(MODELS))
def test_without_a_cache_the_cached_forward_is_the_model_forward(name):
    m = MODELS[name](2)
    x, _ = states()
    out, kv = cached_forward(m, "prefix")(x, None, 0)
    assert torch.equal(out, logits(m, x))
    assert len(kv) == 2 and kv[0][0].shape[2] == x.shape[1]


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("kind", ["prefix", "dual"])
def test_a_cache_of_the_current_sequence_is_exact(name, kind):
    """Keys and values cached from the same sequence: the window's logits are the full forward pass's (any depth)."""
    x, _ = states()
    a, z = window(kind, 9, 13, x.shape[1])

    def run(m):
        fwd = cached_forward(m, kind)
        full, kv = fwd(x, None, 0)
        return fwd(x[:, a:z], kv, a)[0], full[:, a:z]

    forward_passes_agree("the window's logits", run, MODELS[name](3), x.shape[1])


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("kind", ["prefix", "dual"])
def test_one_layer_cache_is_exact_after_tokens_change(name, kind):
    """One layer: a position's keys and values depend only on its own token, so a cache from before two tokens of
    the block were committed still gives the new sequence's logits."""
    x_old, x_new = states()
    a, z = window(kind, 9, 13, x_new.shape[1])

    def run(m):
        fwd = cached_forward(m, kind)
        _, kv = fwd(x_old, None, 0)
        return fwd(x_new[:, a:z], kv, a)[0], logits(m, x_new)[:, a:z]

    forward_passes_agree("the window's logits", run, MODELS[name](1), x_new.shape[1])


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("kind", ["prefix", "dual"])
def test_deeper_cache_error_is_real_and_smaller_than_not_recomputing(name, kind):
    """Two or more layers: Fast-dLLM's approximation. Over seeds and depths, its error on the block's logits is not 0
    (the approximation is real) and is always below the error of not recomputing at all (the logits of the sequence
    the cache came from): recomputing the window with its new tokens recovers part of the change; random weights of
    std 0.4 make this model far more sensitive than a trained one (benchmarks/ measures the effect on accuracy)."""
    for layers in (2, 3):
        for seed in range(3):
            m = MODELS[name](layers)
            x_old, x_new = states(seed)
            fwd = cached_forward(m, kind)
            old, kv = fwd(x_old, None, 0)
            a, z = window(kind, 9, 13, x_new.shape[1])
            got = fwd(x_new[:, a:z], kv, a)[0][:, : 13 - a]  # the block's positions
            exact = logits(m, x_new)[:, 9:13]
            err, stale = (got - exact).abs().max(), (old[:, 9:13] - exact).abs().max()
            assert 1e-4 < err < stale, (layers, seed, float(err), float(stale))


def test_llada_structure_is_recognised_and_a_window_needs_a_cache():
    m = llada(1)
    assert is_llada(m) and not is_llada(tiny(1))
    x, _ = states()
    with pytest.raises(ValueError, match="needs past_key_values"):
        forward_window(m, x[:, 5:], None, 5)


@pytest.mark.parametrize("kv_cache", ["prefix", "dual"])
def test_llada_sampler_with_a_one_layer_cache_is_the_plain_sampler(kv_cache):
    """The whole sampler on LLaDA's own class: with one layer the cache is exact, so greedy and CFG-guided samples
    with the cache are the plain sampler's."""
    m = llada(1)
    prompt = torch.randint(3, 12, (3, 5), generator=torch.Generator().manual_seed(0))
    for kw in ({"temperature": 0.0}, {"temperature": 0.0, "cfg_scale": 1.0}):
        plain = generate(m, prompt, 8, mask_id=MASK, block_length=4, steps=8, **kw)
        cached = generate(m, prompt, 8, mask_id=MASK, block_length=4, steps=8, kv_cache=kv_cache, **kw)
        assert torch.equal(plain.completion_ids, cached.completion_ids)
        assert torch.equal(plain.reveal_step, cached.reveal_step)


def test_lora_adapters_take_part_in_the_cached_forward():
    """peft wraps the model; the cache drives the model inside, whose layers carry the adapters: with a non-zero
    LoRA update the cached forward is the adapted model's, and with adapters disabled the base model's."""
    peft = pytest.importorskip("peft")
    base = tiny(2)
    x, _ = states()
    plain = logits(base, x)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["qkv", "proj"]))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    assert not torch.allclose(model(x).logits, plain)

    def run(m, adapters: bool = True):
        if not adapters:
            with m.disable_adapter():
                return run(m)
        return cached_forward(m, "dual")(x, None, 0)[0], m(x).logits

    forward_passes_agree("the adapted logits", run, model, x.shape[1])
    forward_passes_agree("the base logits", lambda m: run(m, adapters=False), model, x.shape[1])
