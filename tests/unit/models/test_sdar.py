"""The real ``SDARForCausalLM`` (shared/reference/sdar, built tiny and random here) through ddmrl: loading under
transformers 5 (ddmrl.models.compat: LossKwargs, flash_attn's RMSNorm, RoPE, rotary buffers, cache indexing), the
save/load round trip, block-causal attention with SDAR's own KV cache, padding, prompts and LoRA targets."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
import transformers
from float_error import forward_passes_agree
from real_sdar import BLOCK, EOS, MASK, needs_sdar, sdar_checkpoint, tokenizer

from ddmrl.config import ConfigError
from ddmrl.likelihood import token_logps
from ddmrl.models import compat
from ddmrl.models.lora import lora_targets, peft_target_modules
from ddmrl.models.sdar import (
    LORA_TARGETS,
    SDARAdapter,
    SDARBlockModel,
    block_causal_attention,
    load_sdar,
    padded_positions,
)
from ddmrl.samplers import SAMPLERS

pytestmark = needs_sdar


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def sdar(tmp_path_factory):
    """(checkpoint directory, the in-memory model whose weights it holds)."""
    path = tmp_path_factory.mktemp("hub") / "sdar-8b-chat"
    return path, sdar_checkpoint(path, tokenizer())


def ids(n: int = 2, length: int = 9, seed: int = 0) -> torch.Tensor:
    return torch.randint(10, 100, (n, length), generator=torch.Generator().manual_seed(seed))


def test_sdar_loads_under_transformers_5_and_round_trips(sdar, tmp_path):
    path, reference = sdar
    model, tok, adapter = load_sdar(str(path), trust_remote_code=True)
    assert type(model).__name__ == "SDARForCausalLM" and isinstance(adapter, SDARAdapter) and not model.training
    assert set(type(model).__dict__[compat._BRIDGED]) == {
        "ROPE_INIT_FUNCTIONS has no 'default'",
        "SDARForCausalLM._tied_weights_keys is a list",
    }
    assert model._tied_weights_keys == {"lm_head.weight": "model.embed_tokens.weight"}
    assert not hasattr(transformers.utils, "LossKwargs"), "lent to transformers.utils only while importing"
    assert "flash_attn" not in sys.modules, "the stand-in package is taken back after the import"
    assert (adapter.mask_token_id, adapter.pad_token_id, adapter.eos_token_id, adapter.block_length) == (
        MASK,
        EOS,
        EOS,
        BLOCK,
    )
    assert model.config.fuse_cross_entropy is False, "TraceRL's setting: logits in training mode too"
    rotary = model.model.rotary_emb.inv_freq
    assert torch.equal(rotary, reference.model.rotary_emb.inv_freq), "rebuilt after the meta-device load"
    x = ids()
    with torch.no_grad():
        loaded = model(x).logits
        assert torch.equal(loaded, reference(x).logits), "the checkpoint's weights, not a fresh init"
    model.save_pretrained(tmp_path / "saved")
    tok.save_pretrained(tmp_path / "saved")
    again, _, _ = load_sdar(str(tmp_path / "saved"), trust_remote_code=True)
    with torch.no_grad():
        assert torch.equal(again(x).logits, loaded), "save / load round trip"


def test_the_loaded_model_is_a_block_model_lora_wrapped_too(sdar):
    """load_sdar's instance answers the block protocol itself: the block sampler and ``token_logps(block_length=)``
    take it as it is, and through peft's LoRA wrapper (the attribute is forwarded to the injected model)."""
    from peft import LoraConfig, get_peft_model

    model, _, adapter = load_sdar(str(sdar[0]), trust_remote_code=True)
    x = ids(2, 6, seed=11)
    kw = dict(mask_id=MASK, block_length=BLOCK, steps=2, temperature=0.0)
    plain = SAMPLERS["block"](model, x, 6, **kw)
    wrapped = SAMPLERS["block"](SDARBlockModel(sdar[1]), x, 6, **kw)
    assert torch.equal(plain.completion_ids, wrapped.completion_ids)
    view = torch.cat([x, plain.completion_ids.masked_fill(torch.arange(6) % 2 == 0, MASK)], 1)
    with torch.no_grad():
        want = token_logps(model, view, plain.completion_ids, block_length=BLOCK)
    lora = LoraConfig(r=2, target_modules=LORA_TARGETS, init_lora_weights=False)
    peft_model = get_peft_model(copy.deepcopy(model), lora)
    with torch.no_grad():
        got = token_logps(peft_model, view, plain.completion_ids, block_length=BLOCK)
        merged = token_logps(peft_model.merge_and_unload(), view, plain.completion_ids, block_length=BLOCK)
    assert not torch.allclose(got, want, atol=1e-3), "the LoRA is in the path (the copy's method is bound to it)"
    assert torch.allclose(got, merged, atol=1e-4)
    assert adapter.block_model(model).model is model


def test_refused_without_trust_remote_code(sdar):
    with pytest.raises(ConfigError, match="modeling_sdar.py"):
        load_sdar(str(sdar[0]))


def test_rms_norm_stand_in_is_the_plain_formula(sdar):
    """flash_attn's rms_norm_fn stand-in against SDARRMSNorm's own commented-out formula (float32: bit-identical, the
    same operations on the same values, its products commuted, which IEEE rounding does not see; bfloat16: the
    kernel's float32 product, cast once)."""
    norm = sdar[1].model.norm
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, norm.weight.numel()))
        x = torch.randn(3, 5, norm.weight.numel())
        plain = norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))
        assert torch.equal(norm(x), plain)
        assert norm(x.bfloat16()).dtype == torch.bfloat16
        assert torch.allclose(norm(x.bfloat16()).float(), plain, atol=2e-2, rtol=2e-2)
        norm.weight.fill_(1.0)
    with pytest.raises(NotImplementedError, match="plain RMSNorm only"):
        compat.rms_norm_fn(x, norm.weight, residual=x)


def test_what_the_import_bridges_cannot_stand_in_for_is_one_line(tmp_path):
    code = tmp_path / "modeling_x.py"
    code.write_text("from transformers.utils import NoSuchThing\n")
    with pytest.raises(compat.IncompatibleRemoteCode, match=r"imports transformers\.utils\.NoSuchThing") as e:
        with compat.import_bridges(code):
            pass
    assert "\n" not in str(e.value)
    code.write_text("try:\n    from flash_attn import flash_attn_func\nexcept ImportError:\n    pass\n")
    with compat.import_bridges(code) as bridged:
        assert bridged == [], "imports inside try are optional: nothing lent"
    code.write_text("from flash_attn.bert_padding import pad_input\n")
    with pytest.raises(compat.IncompatibleRemoteCode, match="no pure-PyTorch stand-in"):
        with compat.import_bridges(code):
            pass
    assert "flash_attn" not in sys.modules and not hasattr(transformers.utils, "NoSuchThing")


def test_block_causal_attention_and_positions():
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1]])
    assert padded_positions(mask).tolist() == [[1, 1, 0, 1, 2, 3, 4]]
    allowed = block_causal_attention(mask, 2)[0].int()
    assert allowed[2].tolist() == [0, 0, 1, 1, 0, 0, 0]  # first real token: its block (positions 0, 1)
    assert allowed[4].tolist() == [0, 0, 1, 1, 1, 1, 0]  # position 2 sees blocks 0 and 1
    assert allowed[0].tolist() == [1, 0, 0, 0, 0, 0, 0]  # a pad query attends itself only


def test_sdar_cache_is_exact(sdar):
    """SDAR's own DynamicCache through SDARBlockModel: the prompt's blocks stored, then a block evaluated against
    the cache, equals the same positions of one block-causal pass over the whole canvas (up to float32 rounding: the
    two passes in other shapes; tolerance from float32's error, tests/float_error.py: both also run on a float64 copy
    and agree there to 1e-10 of the largest |logit| S, each float32 pass within n eps32 S of its float64 logits)."""
    x = ids(2, 12, seed=5)
    x[:, 9:] = MASK
    full = torch.ones_like(x)
    attention = block_causal_attention(full, BLOCK)
    # then blocks of one token (JustGRPO's left-to-right rollouts; SDAR's own code would call flash_attn_func): each
    # position against the cache equals one pass whose rows 8 and 9 see only the positions up to their own
    mixed = attention[:, :10, :10].clone()
    mixed[:, 8:] = torch.ones(10, 10, dtype=torch.bool).tril()[8:]

    def run(network):
        model = SDARBlockModel(network)
        with torch.no_grad():
            whole, _ = model.block_forward(x, padded_positions(full), attention)
            cache = None
            for lo in (0, 4):
                _, cache = model.block_forward(
                    x[:, lo : lo + 4], padded_positions(full)[:, lo : lo + 4], attention[:, lo : lo + 4, : lo + 4],
                    cache, store=True,
                )  # fmt: skip
            assert cache.get_seq_length() == 8
            block, same = model.block_forward(x[:, 8:], padded_positions(full)[:, 8:], attention[:, 8:], cache)
            assert same is cache and cache.get_seq_length() == 8, "store=False leaves the cache as it was"
            ref, _ = model.block_forward(x[:, :10], padded_positions(full)[:, :10], mixed)
            one, cache = model.block_forward(x[:, 8:9], padded_positions(full)[:, 8:9], mixed[:, 8:9, :9], cache, True)
            two, _ = model.block_forward(x[:, 9:10], padded_positions(full)[:, 9:10], mixed[:, 9:10], cache)
        assert cache.get_seq_length() == 9, "a stored single position adds one key and value"
        return torch.cat([block, one, two], 1), torch.cat([whole[:, 8:], ref[:, 8:10]], 1)

    forward_passes_agree("the cached blocks' logits", run, sdar[1], x.shape[1])


def test_padded_rows_give_the_unpadded_rows_logits(sdar):
    """Left pads excluded as keys, positions and blocks from the first real token: a padded row's logits equal the
    row's alone at every real position; without the mask the pads change them."""
    _, model = sdar
    long, short = ids(1, 11, seed=3), ids(1, 6, seed=4)
    x = torch.cat([long, torch.cat([torch.full((1, 5), EOS), short], 1)])
    mask = torch.tensor([[1] * 11, [0] * 5 + [1] * 6])
    adapter = SDARAdapter(tokenizer(), MASK, BLOCK)

    def run(network):  # the padded rows' logits and the rows' alone (tolerance as in test_sdar_cache_is_exact)
        with torch.no_grad():
            both = adapter.logits(network, x, mask)
            alone = [adapter.logits(network, long), adapter.logits(network, short)]
        return torch.cat([both[0], both[1, 5:]]), torch.cat([alone[0][0], alone[1][0]])

    forward_passes_agree("the padded rows' logits", run, model, x.shape[1])
    with torch.no_grad():
        both, alone, unmasked = adapter.logits(model, x, mask), adapter.logits(model, short), adapter.logits(model, x)
    assert not torch.allclose(unmasked[1, 5:], alone[0], atol=1e-3), "the pads matter without the mask"
    assert torch.isfinite(both).all()


def test_prompt_through_sdars_chat_template():
    adapter = SDARAdapter(tokenizer(), MASK, BLOCK)
    assert adapter.build_prompt("2+2?", "Be brief.") == (
        "<|im_start|>user\nBe brief.\n\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_lora_targets_every_projection_and_never_head_embeddings_or_norms(sdar):
    _, model = sdar
    selected = lora_targets(model, LORA_TARGETS)
    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    want = [f"model.layers.{i}.{'self_attn' if n[0] in 'qkvo' else 'mlp'}.{n}" for i in range(2) for n in names]
    assert sorted(selected) == sorted(want)
    assert peft_target_modules(model, LORA_TARGETS) == LORA_TARGETS
    with pytest.raises(ConfigError, match="output head lm_head"):
        peft_target_modules(model, r".*(q_proj|lm_head)")


def test_lora_merge_leaves_head_embeddings_and_norms_bit_identical(sdar):
    from peft import LoraConfig, get_peft_model

    model = copy.deepcopy(sdar[1])  # merge_and_unload changes the model in place
    before = {k: v.clone() for k, v in model.state_dict().items()}
    peft_model = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS, init_lora_weights=False)
    )
    merged = peft_model.merge_and_unload()
    after = merged.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    norms = {k for k in before if "norm" in k}
    assert len(norms) == 2 * 4 + 1  # per layer: input, post-attention, q_norm, k_norm; the final norm
    assert {"lm_head.weight", "model.embed_tokens.weight", *norms}.isdisjoint(changed)
    assert changed == {f"{t}.weight" for t in lora_targets(merged, LORA_TARGETS)}


def test_tied_embeddings_load_and_round_trip(tmp_path):
    """With ``tie_word_embeddings`` (no released SDAR ties them; Qwen3-4B does) the list-form ``_tied_weights_keys``
    would fail the load itself; bridged, the head is the embeddings and a save / load round trip is exact."""
    reference = sdar_checkpoint(tmp_path / "tied", tokenizer(), tie_word_embeddings=True)
    model, tok, _ = load_sdar(str(tmp_path / "tied"), trust_remote_code=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    x = ids()
    with torch.no_grad():
        assert torch.equal(model(x).logits, reference(x).logits)
    model.save_pretrained(tmp_path / "saved")
    tok.save_pretrained(tmp_path / "saved")
    again, _, _ = load_sdar(str(tmp_path / "saved"), trust_remote_code=True)
    with torch.no_grad():
        assert torch.equal(again(x).logits, reference(x).logits)
