"""The real ``LLaDA2MoeModelLM`` (LLaDA2.0-mini and LLaDA2.1-mini code, shared/reference/llada2, built tiny and random
here) through ddmrl: loading under transformers 5 (ddmrl.models.compat), the block-causal mask, padding, tokens,
prompts and LoRA targets for the MoE."""

from __future__ import annotations

import copy

import pytest
import torch
from float_error import forward_passes_agree, rtol_positive
from real_llada2 import EOS, MASK, VERSIONS, llada2_checkpoint, needs_llada2, tokenizer

from ddmrl.config import ConfigError
from ddmrl.models import compat
from ddmrl.models.llada2 import (
    LORA_TARGETS,
    LLaDA2Adapter,
    LLaDA2BlockModel,
    attention_inputs,
    block_logits,
    load_llada2,
)
from ddmrl.models.lora import lora_targets, peft_target_modules

pytestmark = needs_llada2


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module", params=VERSIONS)
def llada2(request, tmp_path_factory):
    """(version, checkpoint directory, the in-memory model whose weights it holds)."""
    path = tmp_path_factory.mktemp("hub") / request.param
    return request.param, path, llada2_checkpoint(path, tokenizer(request.param), request.param)


def ids(n: int = 2, length: int = 9, seed: int = 0) -> torch.Tensor:
    return torch.randint(8, 100, (n, length), generator=torch.Generator().manual_seed(seed))


def test_llada2_loads_under_transformers_5_with_its_weights(llada2):
    version, path, reference = llada2
    model, tok, adapter = load_llada2(str(path), trust_remote_code=True, dtype="float32")
    assert type(model).__name__ == "LLaDA2MoeModelLM" and isinstance(adapter, LLaDA2Adapter) and not model.training
    assert set(type(model).__dict__[compat._BRIDGED]) == {
        "ROPE_INIT_FUNCTIONS has no 'default'",
        "LLaDA2MoeModelLM._tied_weights_keys is a list",
    }
    assert (adapter.mask_token_id, adapter.pad_token_id, adapter.eos_token_id) == (MASK, EOS, EOS)
    rotary = model.model.rotary_emb.inv_freq
    assert torch.equal(rotary, reference.model.rotary_emb.inv_freq), "rebuilt after the meta-device load"
    # 4.x's default formula on half of each head (partial_rotary_factor 0.5): 1 / theta ** (arange(0, 4, 2) / 4)
    # positive, the power and the reciprocal of an exact i / d (d = 4) rounded, at most 3 roundings a side (a
    # faithful pow within an ulp): tolerance from float32's error (tests/float_error.py, rtol_positive)
    want = 1.0 / 600000.0 ** (torch.arange(0, 4, 2).float() / 4)
    assert torch.allclose(rotary, want, rtol=rtol_positive(3), atol=0)
    moe = model.model.layers[1].mlp
    assert type(moe).__name__ == "LLaDA2MoeSparseMoeBlock" and len(moe.experts) == 8
    assert torch.equal(moe.gate.expert_bias, reference.model.layers[1].mlp.gate.expert_bias)
    x = ids()
    with torch.no_grad():
        assert torch.equal(model(x).logits, reference(x).logits), "the checkpoint's weights, not a fresh init"
        assert torch.equal(block_logits(model, x), block_logits(reference, x))
    # saved again and reloaded: the same logits (save_pretrained carries the remote code and auto_map)
    again = path.parent / f"{version}-saved"
    model.save_pretrained(again)
    tok.save_pretrained(again)
    reloaded, _, _ = load_llada2(str(again), trust_remote_code=True, dtype="float32")
    with torch.no_grad():
        assert torch.equal(reloaded(x).logits, reference(x).logits)


def test_refused_without_trust_remote_code(llada2):
    with pytest.raises(ConfigError, match="modeling_llada2_moe.py"):
        load_llada2(str(llada2[1]))


def test_block_causal_mask_and_no_shift(llada2):
    """Inside a block every position sees every other; a block never sees a later one; no autoregressive shift."""
    model = llada2[2]
    x = ids(1, 12)
    y = x.clone()
    y[0, 9] = 7  # block 2 of 4-token blocks
    with torch.no_grad():
        a, b = block_logits(model, x, block_length=4), block_logits(model, y, block_length=4)
        full_a, full_b = block_logits(model, x, block_length=None), block_logits(model, y, block_length=None)
    # to rounding: the MoE runs each expert on the tokens routed to it, a batch that position 9's token changes.
    # Tolerance from float32's error (tests/float_error.py): the float64 copy's logits agree to 1e-10 of the largest
    # |logit| S, each float32 pass within n eps32 S of its float64 logits (n: the pass's longest chain of sums)

    def unseen(network):  # blocks 0 and 1 do not see block 2
        with torch.no_grad():
            return block_logits(network, x, block_length=4)[:, :8], block_logits(network, y, block_length=4)[:, :8]

    forward_passes_agree("blocks 0 and 1's logits", unseen, model, x.shape[1])
    assert not torch.allclose(a[:, 8:], b[:, 8:]), "block 2 sees itself (bidirectionally: position 8 sees 9)"
    assert not torch.allclose(a[0, 8], b[0, 8])
    assert not torch.allclose(full_a[0, 0], full_b[0, 0]), "bidirectional without a block length"

    # the explicit mask means the same under eager attention, whose mask-less forward is causal
    def eager_and_sdpa(network):
        eager = copy.deepcopy(network)
        eager.config._attn_implementation = "eager"
        for layer in eager.model.layers:
            layer.attention.__class__ = type(layer.attention).__mro__[1]  # LLaDA2MoeAttention, the eager class
        with torch.no_grad():
            return block_logits(eager, x, block_length=4), block_logits(network, x, block_length=4)

    forward_passes_agree("the eager attention's logits", eager_and_sdpa, model, x.shape[1])


def test_padded_rows_give_the_unpadded_rows_logits(llada2):
    """Left pads: positions and blocks count from the first real token, pads are never attended; a padded row's
    logits equal the row's alone at every real position, block-causal or not; without the mask the pads matter."""
    model = llada2[2]
    long, short = ids(1, 9, seed=3), ids(1, 5, seed=4)
    x = torch.cat([long, torch.cat([torch.full((1, 4), EOS), short], 1)])
    mask = torch.tensor([[1] * 9, [0] * 4 + [1] * 5])
    for block_length in (None, 2, 4):
        # other shapes of one network: tolerance from float32's error (tests/float_error.py)
        def run(network, block_length=block_length):
            with torch.no_grad():
                both = block_logits(network, x, mask, block_length)
                alone = [block_logits(network, r, None, block_length)[0] for r in (long, short)]
            assert torch.isfinite(both).all()
            return torch.cat([both[0], both[1, 4:]]), torch.cat(alone)

        forward_passes_agree(f"the padded rows' logits (blocks of {block_length})", run, model, x.shape[1])
    with torch.no_grad():
        alone = block_logits(model, short, None, 4)[0]
        assert not torch.allclose(block_logits(model, x)[1, 4:], alone, atol=1e-3), "pads matter unmasked"
    bias, positions = attention_inputs(mask, 2, torch.float32)
    assert positions[1].tolist() == [0, 0, 0, 0, 0, 1, 2, 3, 4]
    assert bias.shape == (2, 1, 9, 9) and bool((bias[1, 0, 4:, :4] < 0).all()), "real queries never see pads"


def test_train_mode_moe_equals_eval_mode_and_has_gradients(llada2):
    """Eval mode routes through ``moe_infer`` (no gradient); train mode gives the same logits, with gradients on the
    experts that were routed to."""
    model = copy.deepcopy(llada2[2])
    x = ids()

    def run(network):  # two codes of the MoE: tolerance from float32's error (tests/float_error.py)
        with torch.no_grad():
            return block_logits(network.train(), x), block_logits(network.eval(), x)

    forward_passes_agree("the train mode's logits", run, model, x.shape[1])
    trained = block_logits(model.train(), x)
    trained.logsumexp(-1).sum().backward()
    experts = model.model.layers[1].mlp.experts
    assert any(e.up_proj.weight.grad is not None and e.up_proj.weight.grad.abs().sum() > 0 for e in experts)


def test_prompt_through_llada2s_chat_template(llada2):
    version = llada2[0]
    adapter = LLaDA2Adapter(tokenizer(version), MASK)
    text = adapter.build_prompt("2+2?", "Be brief.")
    assert text == (
        "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Be brief.\n\n2+2?<|role_end|>"
        "<role>ASSISTANT</role>"
    )
    encoded = adapter.encode_prompts([text, "hi"])
    assert encoded["input_ids"][1, 0].item() == EOS and encoded["attention_mask"][1].sum() == 2


def test_lora_targets_attention_experts_shared_expert_not_router_head_or_embeddings(llada2):
    model = llada2[2]
    selected = lora_targets(model, LORA_TARGETS)
    mlp = ("gate_proj", "up_proj", "down_proj")
    want = [f"model.layers.{i}.attention.{n}" for i in range(2) for n in ("query_key_value", "dense")]
    want += [f"model.layers.0.mlp.{n}" for n in mlp]  # first_k_dense_replace = 1: layer 0 is dense
    want += [f"model.layers.1.mlp.experts.{e}.{n}" for e in range(8) for n in mlp]
    want += [f"model.layers.1.mlp.shared_experts.{n}" for n in mlp]
    assert sorted(selected) == sorted(want)
    assert "model.layers.1.mlp.gate" not in selected, "the router is not a Linear peft could wrap"
    # DARE's LLaDA2 LoRA recipe targets peft's all-linear: the same modules
    from peft import LoraConfig, get_peft_model

    wrapped = get_peft_model(copy.deepcopy(model), LoraConfig(r=2, target_modules="all-linear"))
    prefix = "base_model.model."
    all_linear = [n[len(prefix) : -len(".lora_A")] for n, _ in wrapped.named_modules() if n.endswith(".lora_A")]
    assert sorted(all_linear) == sorted(want)
    assert peft_target_modules(model, LORA_TARGETS) == LORA_TARGETS
    with pytest.raises(ConfigError, match="output head lm_head"):
        peft_target_modules(model, r".*(query_key_value|lm_head)")


def test_lora_merge_leaves_head_embeddings_and_router_bit_identical(llada2):
    from peft import LoraConfig, get_peft_model

    model = copy.deepcopy(llada2[2])  # merge_and_unload changes the model in place
    before = {k: v.clone() for k, v in model.state_dict().items()}
    peft_model = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS, init_lora_weights=False)
    )
    merged = peft_model.merge_and_unload()
    after = merged.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    untouched = {"lm_head.weight", "model.word_embeddings.weight", "model.norm.weight"}
    untouched |= {"model.layers.1.mlp.gate.weight", "model.layers.1.mlp.gate.expert_bias"}
    assert untouched.isdisjoint(changed)
    assert changed == {f"{t}.weight" for t in lora_targets(merged, LORA_TARGETS)}


def test_block_forward_with_a_kv_cache_equals_recomputing(llada2):
    """The block-diffusion protocol over the real class: a block read against the cached earlier blocks gives the
    logits of the whole prefix recomputed; a pass with ``store=False`` leaves the cache as it was."""
    x = ids(2, 12)
    pos = torch.arange(12)[None].expand(2, -1)
    blocks = torch.arange(12) // 4
    att = (blocks[None, :] <= blocks[:, None])[None].expand(2, -1, -1)  # [2, 12, 12]

    def run(network):  # the cached block and the block model's full pass against the recomputed logits, in other
        model = LLaDA2BlockModel(network)  # shapes and codes: tolerance from float32's error (tests/float_error.py)
        with torch.no_grad():
            full, none = model.block_forward(x, pos, att)
            _, cache = model.block_forward(x[:, :8], pos[:, :8], att[:, :8, :8], None, True)
            step, same = model.block_forward(x[:, 8:], pos[:, 8:], att[:, 8:], cache, False)
            again, _ = model.block_forward(x[:, 8:], pos[:, 8:], att[:, 8:], cache, False)
            recomputed = block_logits(network, x, block_length=4)
        assert none is None and same is cache and cache.get_seq_length() == 8
        assert torch.equal(step, again), "the same code on the same inputs and cache: bit-identical"
        return torch.cat([step, full], 1), torch.cat([full[:, 8:], recomputed], 1)

    forward_passes_agree("the cached block's logits", run, llada2[2], x.shape[1])
    with pytest.raises(ValueError, match="kv_cache: false"):
        LLaDA2BlockModel(llada2[2], released_21_mask=True).block_forward(x, pos, att, None, True)
