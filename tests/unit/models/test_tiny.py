"""TinyDDM (ddmrl.models.tiny): a bidirectional transformer with the LLaDA model interface."""

from __future__ import annotations

import pytest
import torch
from float_error import Float64Kept, agree, forward_passes_agree
from transformers import AutoConfig, AutoModelForMaskedLM

from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM


def test_logits_shape_and_bidirectional_attention(make_model):
    """Changing the LAST token changes the logits at position 0: attention is not causal."""
    model = make_model(max_positions=8)
    x = torch.tensor([[5, 6, 7, 8, 9, 6, 7, 8]])
    y = x.clone()
    y[0, -1] = 9
    lx, ly = model(x).logits, model(y).logits
    assert lx.shape == (1, 8, 10)
    assert not torch.allclose(lx[0, 0], ly[0, 0])
    # and every position sees every other one: changing position 0 moves the last position too
    z = x.clone()
    z[0, 0] = 9
    assert not torch.allclose(lx[0, -1], model(z).logits[0, -1])


def test_rows_are_independent_and_the_forward_is_deterministic_in_eval(make_model):
    model = make_model(max_positions=6)
    x = torch.randint(0, 10, (3, 6), generator=torch.Generator().manual_seed(0))
    full = model(x).logits
    # a row alone and in the batch: other shapes of the products, tolerance from float32's error (tests/float_error.py)
    forward_passes_agree("a row's logits", lambda m: (m(x).logits[1:2], m(x[1:2]).logits), model, x.shape[1])
    assert torch.equal(full, model(x).logits)


def test_output_embedding_is_tied_to_the_input_embedding(make_model):
    model = make_model()
    assert model.lm_head.weight is model.tok.weight
    assert model.lm_head.weight.data_ptr() == model.tok.weight.data_ptr()
    assert model.get_output_embeddings() is model.lm_head and model.get_input_embeddings() is model.tok


def test_too_long_input_is_refused(make_model):
    with pytest.raises(ValueError, match="max_position_embeddings"):
        make_model(max_positions=4)(torch.zeros(1, 5, dtype=torch.long))


def test_labels_give_the_masked_lm_cross_entropy(make_model):
    model = make_model(max_positions=4)
    x = torch.tensor([[5, 6, 7, 8]])
    labels = torch.tensor([[-100, 6, -100, 8]])

    def run(m):  # the cross-entropy and its formula from the same logits: tolerance from float32's error
        out = m(x, labels=labels)
        logp = torch.log_softmax(out.logits[0].float(), -1)
        return out.loss, -(logp[1, 6] + logp[3, 8]) / 2

    forward_passes_agree("the loss", run, model, x.shape[1])  # (tests/float_error.py)


def test_registered_with_the_auto_classes():
    cfg = AutoConfig.for_model(
        "tiny_ddm",
        vocab_size=12,
        hidden_size=8,
        num_layers=1,
        num_heads=2,
        intermediate_size=16,
        max_position_embeddings=8,
    )
    assert isinstance(cfg, TinyDDMConfig) and cfg.tie_word_embeddings is True
    model = AutoModelForMaskedLM.from_config(cfg)
    assert isinstance(model, TinyDDMForMaskedLM)


def test_dropout_is_active_only_in_train_mode(tok):
    torch.manual_seed(0)
    cfg = TinyDDMConfig(
        vocab_size=len(tok),
        hidden_size=16,
        num_layers=1,
        num_heads=2,
        intermediate_size=32,
        max_position_embeddings=6,
        dropout=0.5,
    )
    model = TinyDDMForMaskedLM(cfg)
    x = torch.tensor([[5, 6, 7, 8, 9, 5]])
    model.train()
    assert not torch.equal(model(x).logits, model(x).logits)
    model.eval()
    assert torch.equal(model(x).logits, model(x).logits)


def test_rotary_attention_depends_only_on_relative_positions():
    """RoPE (RoFormer Eq. 34): q_m . k_n after rotation depends on n - m only."""
    from ddmrl.models.tiny import rotary_angles, rotate

    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def run(q, k):  # [the dots at each offset and the rotated norms], [what they equal]
        cos, sin = rotary_angles(12, 8, 10000.0)
        qs, ks = rotate(q.expand(1, 1, 12, 8), cos, sin), rotate(k.expand(1, 1, 12, 8), cos, sin)
        dots = qs[0, 0] @ ks[0, 0].T  # [12, 12]
        diags = [torch.diagonal(dots, offset) for offset in (0, 1, 3)]
        ours = torch.cat([*diags, qs[0, 0].norm(dim=-1)])
        return ours, torch.cat([*(d[0].expand_as(d) for d in diags), q.norm().expand(12)])  # rotations keep norms

    a32, b32 = run(q, k)
    with Float64Kept():  # the angles too in float64
        a64, b64 = run(q.double(), k.double())
    # tolerance from float32's error (tests/float_error.py): S = |q| |k| + |q| bounds every dot and norm; n: the
    # 8 products of a dot, the rotation's product and sum, the angle m theta_i rounded twice relative to itself (an
    # absolute error up to 2 * 11 eps32 at position 11: 22 roundings of size S) and its cos / sin
    s = float(q.norm() * k.norm() + q.norm())
    agree("the rotated dots and norms", (a32, a64), (b32, b64), s, 8 + 2 + 2 * 11 + 1)


def test_rotate_computes_the_pairwise_rotation_in_the_same_floats_forward_and_backward():
    """``rotate``'s "rotate half" form rounds the same two products and one sum per element as the pairwise formula
    ``[x1 cos - x2 sin, x1 sin + x2 cos]`` (negation is exact, addition commutes): equal bit for bit, values and
    gradients, on the non-contiguous queries the model passes it."""
    from ddmrl.models.tiny import rotary_angles, rotate

    def pairwise(x, cos, sin):  # the RoFormer formula, term by term
        x1, x2 = x[..., :16], x[..., 16:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)

    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(3, 7, 3, 2, 32, generator=g)  # [B, L, 3, H, head_dim] as the block's qkv projection
    cos, sin = rotary_angles(7, 32, 10_000.0)
    upstream = torch.randn(3, 2, 7, 32, generator=g)
    results = []
    for f in (rotate, pairwise):
        leaf = qkv.clone().requires_grad_()
        q = leaf.unbind(2)[0].transpose(1, 2)  # [B, H, L, head_dim], non-contiguous
        out = f(q, cos, sin)
        out.backward(upstream)
        results.append((out.detach(), leaf.grad))
    bits = [tuple(t.view(torch.int32) for t in r) for r in results]  # bits: -0.0 and 0.0 differ too
    assert torch.equal(bits[0][0], bits[1][0]) and torch.equal(bits[0][1], bits[1][1])


def test_rope_model_has_no_position_table(tok):
    cfg = TinyDDMConfig(vocab_size=len(tok), hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                        max_position_embeddings=16, position_embedding="rope")  # fmt: skip
    model = TinyDDMForMaskedLM(cfg).eval()
    assert model.pos is None
    x = torch.tensor([[6, 7, 8, 9, 6, 7]])
    with torch.no_grad():
        logits = model(x).logits
    assert logits.shape == (1, 6, len(tok)) and torch.isfinite(logits).all()
    with pytest.raises(ValueError, match="position_embedding"):
        TinyDDMConfig(position_embedding="alibi")


# --------------------------------------------------------------------------- windows against a KV cache


def manual_forward(model, x: torch.Tensor) -> torch.Tensor:
    """TinyDDM's forward written out with plain tensor ops (learned positions): pre-LN blocks, softmax attention."""
    h = model.tok(x) + model.pos(torch.arange(x.shape[1]))
    for blk in model.blocks:
        b, n, d = h.shape
        q, k, v = blk.qkv(blk.ln1(h)).view(b, n, 3, blk.num_heads, d // blk.num_heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // blk.num_heads) ** 0.5, -1) @ v
        h = h + blk.proj(att.transpose(1, 2).reshape(b, n, d))
        h = h + blk.ff(blk.ln2(h))
    return model.lm_head(model.ln_f(h))


def test_without_a_cache_the_forward_is_the_plain_transformer(make_model):
    """The cache arguments leave the plain forward alone: it is the written-out transformer, ``use_cache`` returns
    the same logits plus every layer's keys and values of all positions, and no cache is returned by default."""
    model = make_model(max_positions=10)
    x = torch.randint(0, 10, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out, cached = model(x), model(x, use_cache=True)
        # two codes of one network: tolerance from float32's error (tests/float_error.py)
        forward_passes_agree("the logits", lambda m: (m(x).logits, manual_forward(m, x)), model, x.shape[1])
    assert out.past_key_values is None and torch.equal(cached.logits, out.logits)
    ((k, v),) = cached.past_key_values
    assert k.shape == v.shape == (2, 2, 10, 8)


def test_a_window_against_its_own_cache_is_the_full_forward_and_bad_windows_are_refused(make_model):
    model = make_model(max_positions=12)
    x = torch.randint(0, 10, (2, 12), generator=torch.Generator().manual_seed(1))
    windows = ((0, 12), (4, 12), (4, 8), (11, 12))

    def run(m):  # the windows against the cache and the full pass, in other shapes: tolerance from float32's error
        with torch.no_grad():  # (tests/float_error.py)
            full = m(x, use_cache=True)
            ws = [m(x[:, lo:hi], past_key_values=full.past_key_values, window_start=lo).logits for lo, hi in windows]
        return torch.cat(ws, 1), torch.cat([full.logits[:, lo:hi] for lo, hi in windows], 1)

    forward_passes_agree("the windows' logits", run, model, x.shape[1])
    with torch.no_grad():
        full = model(x, use_cache=True)
    with pytest.raises(ValueError, match="outside the 12 positions"):
        model(x[:, :4], past_key_values=full.past_key_values, window_start=10)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(x[:, :4], window_start=10)
