"""The real ``DreamModel`` (shared/reference/dream, built tiny and random here) through ddmrl: loading under
transformers 5 (ddmrl.models.compat), the shift, token log-probabilities, padding, prompts and LoRA targets."""

from __future__ import annotations

import copy

import pytest
import torch
from float_error import forward_passes_agree, rtol_positive
from real_dream import EOS, MASK, dream_checkpoint, needs_dream, tokenizer

from ddmrl.config import ConfigError
from ddmrl.models import compat
from ddmrl.models.dream import (
    LORA_TARGETS,
    DreamAdapter,
    aligned_logits,
    load_dream,
    raw_logits,
    shift_logits,
    token_logps,
)
from ddmrl.models.lora import lora_targets, peft_target_modules

pytestmark = needs_dream


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def dream(tmp_path_factory):
    """(checkpoint directory, the in-memory model whose weights it holds)."""
    path = tmp_path_factory.mktemp("hub") / "dream-v0-instruct-7b"
    return path, dream_checkpoint(path, tokenizer())


def ids(n: int = 2, length: int = 9, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, 100, (n, length), generator=torch.Generator().manual_seed(seed))


def test_dream_loads_under_transformers_5_with_its_weights(dream):
    path, reference = dream
    model, tok, adapter = load_dream(str(path), trust_remote_code=True)
    assert type(model).__name__ == "DreamModel" and isinstance(adapter, DreamAdapter) and not model.training
    bridged = set(type(model).__dict__[compat._BRIDGED])
    assert bridged == {
        "ROPE_INIT_FUNCTIONS has no 'default'",
        "DreamGenerationConfig.validate() takes no user_set_attributes",
        "DreamModel._tied_weights_keys is a list",  # 4.x's form: save_pretrained failed without the bridge
    }
    assert model._tied_weights_keys == {"lm_head.weight": "model.embed_tokens.weight"}, "what 4.x tied it to"
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    assert "default" not in ROPE_INIT_FUNCTIONS, "transformers' own table is left as it is"
    assert (adapter.mask_token_id, adapter.pad_token_id, adapter.eos_token_id) == (MASK, EOS, EOS)
    rotary = model.model.rotary_emb.inv_freq
    assert torch.equal(rotary, reference.model.rotary_emb.inv_freq), "rebuilt after the meta-device load"
    # transformers 5's own default RoPE (Qwen2's) gives the same frequencies as the bridged 4.x formula
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

    # positive, 1 / theta ** (i / d) of an exact i / d (head size 8): the power and the reciprocal rounded, at most 3
    # roundings a side (a faithful pow within an ulp): tolerance from float32's error (float_error.rtol_positive)
    got = Qwen2RotaryEmbedding.compute_default_rope_parameters(model.config)[0]
    assert torch.allclose(got, rotary, rtol=rtol_positive(3), atol=0)
    x = ids()
    with torch.no_grad():
        assert torch.equal(model(x).logits, reference(x).logits), "the checkpoint's weights, not a fresh init"
    assert set(compat.bridge_class(type(model))) == bridged, "idempotent"


def test_refused_without_trust_remote_code(dream):
    with pytest.raises(ConfigError, match="modeling_dream.py"):
        load_dream(str(dream[0]))


def test_aligned_logits_are_dreams_shift(dream):
    """Position i's token is read from the model's logits at i - 1 (Dream's generate); position 0 keeps its own."""
    _, model = dream
    x = ids()
    with torch.no_grad():
        raw, got = model(x).logits, aligned_logits(model, x)
    assert torch.equal(got[:, 1:], raw[:, :-1]) and torch.equal(got[:, 0], raw[:, 0])
    assert torch.equal(shift_logits(raw), got)


def test_token_logps_read_position_i_from_logits_at_i_minus_1(dream):
    """Against direct computation with the real class: log softmax(logits[:, P + k - 1])[o_k] for each completion
    position k, with masked positions in the view."""
    _, model = dream
    prompt, completion = ids(2, 6, seed=1), ids(2, 5, seed=2)
    view = torch.cat([prompt, completion], 1)
    view[:, [6, 8, 9]] = MASK  # completion positions 0, 2, 3 masked

    def run(network):  # other shapes of one log-softmax: tolerance from float32's error (tests/float_error.py)
        with torch.no_grad():
            got = token_logps(network, view, completion)
            logits = network(view).logits.float()
        want = torch.stack(
            [
                torch.stack([torch.log_softmax(logits[n, 6 + k - 1], -1)[completion[n, k]] for k in range(5)])
                for n in range(2)
            ]
        )
        assert got.shape == (2, 5)
        return got, want

    forward_passes_agree("the token log-probs", run, model, view.shape[1])
    with pytest.raises(ValueError, match="at least one prompt token"):
        token_logps(model, completion, completion)


def test_padded_rows_give_the_unpadded_rows_logits(dream):
    """Left pads masked as Dream's sampler masks them (positions from the first real token): a padded row's logits
    equal the row's alone at every real position (raw), and aligned from its second real position on (the first real
    token's aligned logits are the pad's before it; a prompt token, never predicted); without the mask the pads
    change them."""
    _, model = dream
    long, short = ids(1, 9, seed=3), ids(1, 5, seed=4)
    x = torch.cat([long, torch.cat([torch.full((1, 4), EOS), short], 1)])
    mask = torch.tensor([[1] * 9, [0] * 4 + [1] * 5])
    adapter = DreamAdapter(tokenizer(), MASK)

    def run(network):  # the padded rows' logits and the rows' alone, in other shapes: tolerance from float32's error
        with torch.no_grad():  # (tests/float_error.py; the float64 copy's agree to 1e-10 of the largest |logit|)
            both = adapter.logits(network, x, mask)
            alone = [adapter.logits(network, long), adapter.logits(network, short)]
            raw_both, raw_short = raw_logits(network, x, mask), network(short).logits
        ours = torch.cat([both[0], raw_both[1, 4:], both[1, 5:]])
        return ours, torch.cat([alone[0][0], raw_short[0], alone[1][0, 1:]])

    forward_passes_agree("the padded rows' logits", run, model, x.shape[1])
    with torch.no_grad():
        both, alone, unmasked = adapter.logits(model, x, mask), adapter.logits(model, short), adapter.logits(model, x)
    assert not torch.allclose(unmasked[1, 5:], alone[0, 1:], atol=1e-3), "the pads matter without the mask"
    assert torch.isfinite(both).all()


def test_prompt_through_dreams_chat_template(dream):
    adapter = DreamAdapter(tokenizer(), MASK)
    text = adapter.build_prompt("2+2?", "Be brief.")
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nBe brief.\n\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_lora_targets_every_projection_and_never_head_or_embeddings(dream):
    _, model = dream
    selected = lora_targets(model, LORA_TARGETS)
    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    want = [f"model.layers.{i}.{'self_attn' if n[0] in 'qkvo' else 'mlp'}.{n}" for i in range(2) for n in names]
    assert sorted(selected) == sorted(want)
    assert peft_target_modules(model, LORA_TARGETS) == LORA_TARGETS
    with pytest.raises(ConfigError, match="output head lm_head"):
        peft_target_modules(model, r".*(q_proj|lm_head)")


def test_lora_merge_leaves_head_and_embeddings_bit_identical(dream):
    from peft import LoraConfig, get_peft_model

    model = copy.deepcopy(dream[1])  # merge_and_unload changes the model in place
    before = {k: v.clone() for k, v in model.state_dict().items()}
    peft_model = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS, init_lora_weights=False)
    )
    merged = peft_model.merge_and_unload()
    after = merged.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert {"lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"}.isdisjoint(changed)
    assert changed == {f"{t}.weight" for t in lora_targets(merged, LORA_TARGETS)}
