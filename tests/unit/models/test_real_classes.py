"""The real LLaDA, MMaDA and MAGVIT-v2 classes (shared/reference/mmada, built tiny and random here) through ddmrl:
loading under transformers 5 (ddmrl.models.compat), saving with their modeling files and reloading, the paper
profiles' LoRA targets (ddmrl.models.lora), and padding that never turns LLaDA's attention causal."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from accelerate import Accelerator
from float_error import forward_passes_agree
from real_models import (
    BLOCK_PROJECTIONS,
    REFERENCE,
    REPO,
    llada_checkpoint,
    magvit_dir,
    mmada_checkpoint,
    needs_reference,
    tokenizer,
)
from safetensors.torch import load_file, save_file

from ddmrl.config import ConfigError, LoraConfig
from ddmrl.models import compat
from ddmrl.models.adapters import LLaDAAdapter, MMaDAAdapter, ModelSpec, load_model
from ddmrl.models.checkpoint import save_checkpoint
from ddmrl.models.lora import lora_targets, peft_target_modules
from ddmrl.training import distributed as dist

pytestmark = needs_reference


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tok():
    return tokenizer()


@pytest.fixture(scope="module")
def llada(tmp_path_factory, tok):
    """(checkpoint directory, the in-memory model whose weights it holds)."""
    path = tmp_path_factory.mktemp("hub") / "llada-8b-instruct"
    return path, llada_checkpoint(path, tok)


def llada_spec(path) -> ModelSpec:
    return ModelSpec(kind="llada", path_or_id=str(path), trust_remote_code=True)


def ids(tok, n: int = 2, length: int = 9, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, len(tok), (n, length), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------------ loading


def test_llada_loads_under_transformers_5_saves_its_code_and_reloads(llada, tok, tmp_path):
    path, reference = llada
    model, tok2, adapter = load_model(llada_spec(path))
    assert type(model).__name__ == "LLaDAModelLM" and isinstance(adapter, LLaDAAdapter) and not model.training
    bridged = set(type(model).__dict__[compat._BRIDGED])
    assert bridged == {"tie_weights() takes no keyword arguments", "__init__ never calls post_init()"}
    assert model.config.use_cache is False
    x = ids(tok)
    with torch.no_grad():
        want = reference(x).logits
        assert torch.equal(adapter.logits(model, x), want), "the checkpoint's weights, not a fresh initialisation"

    save_checkpoint(model, tok2, tmp_path / "saved")
    saved = {p.name for p in (tmp_path / "saved").iterdir()}
    assert {"modeling_llada.py", "configuration_llada.py", "model.safetensors"} <= saved
    auto_map = json.loads((tmp_path / "saved" / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModel"] == "modeling_llada.LLaDAModelLM"
    assert auto_map["AutoConfig"] == "configuration_llada.LLaDAConfig"
    again, _, _ = load_model(llada_spec(tmp_path / "saved"))
    with torch.no_grad():
        assert torch.equal(again(x).logits, want)


def test_a_checkpoint_missing_weights_is_refused_not_left_random(llada, tmp_path):
    path, _ = llada
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in path.iterdir():
        if f.name != "model.safetensors":
            (broken / f.name).write_bytes(f.read_bytes())
    weights = load_file(path / "model.safetensors")
    del weights["model.transformer.blocks.1.up_proj.weight"]
    save_file(weights, str(broken / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(compat.IncompatibleRemoteCode) as e:
        load_model(llada_spec(broken))
    assert "1 weights of modeling_llada.py:LLaDAModelLM are not in the checkpoint" in str(e.value)
    assert "(first: model.transformer.blocks.1.up_proj.weight)" in str(e.value) and "\n" not in str(e.value)


@pytest.fixture(scope="module")
def magvit(tmp_path_factory):
    return magvit_dir(tmp_path_factory.mktemp("hub") / "magvitv2")


def test_mmada_and_magvit_load_from_the_checkout_save_and_reload(tok, magvit, tmp_path):
    reference = mmada_checkpoint(tmp_path / "mmada", tok)
    spec = ModelSpec(kind="mmada", path_or_id=str(tmp_path / "mmada"), mmada_code=str(REFERENCE),
                     vq_path_or_id=str(magvit))  # fmt: skip
    model, tok2, adapter = load_model(spec)
    assert type(model).__name__ == "MMadaModelLM" and isinstance(adapter, MMaDAAdapter)
    x = ids(tok)
    with torch.no_grad():
        assert torch.equal(model(x).logits, reference(x).logits)
    assert set(lora_targets(model, PROFILE_TARGETS)) == BLOCK_TARGETS, "MMaDA has LLaDA's module names"

    layout = adapter.t2i_layout(
        max_seq_length=8, num_image_tokens=16, **{k: tok.convert_tokens_to_ids(t) for k, t in T2I_TOKENS.items()}
    )
    assert (layout.image_offset, layout.bos_id, layout.eos_id) == (len(tok), tok.bos_token_id, tok.eos_token_id)
    input_ids, mask = layout.build(adapter.encode_captions(["a red cow", ""]))
    t2i, pad = layout.t2i_id, layout.pad_id
    assert input_ids[1, : layout.text_len].tolist() == [pad] * 6 + [t2i, tok.bos_token_id, tok.eos_token_id]
    with torch.no_grad():
        cond = adapter.t2i_logits(model, input_ids, mask, layout)
        assert cond.shape == (2, 16, 8192)
        # MMaDA's attention_bias: the [iPAD] positions are not attended (any token there gives the same logits, bit
        # for bit: the same operations in the same shapes, the pads' keys weighted by an exact 0 and every other
        # row's products independent of the pads' rows)
        other = input_ids.masked_fill(mask == 0, tok.convert_tokens_to_ids("a"))
        assert torch.equal(adapter.t2i_logits(model, other, mask, layout), cond)
        assert not torch.allclose(model(other).logits, model(input_ids).logits), "attended without the bias"
    images = adapter.decode_images(torch.tensor([[0] * 16, [8191] * 16]), layout)  # real MAGVIT-v2: 16x upsampling
    assert images.dtype == torch.uint8 and images.shape == (2, 64, 64, 3) and not torch.equal(images[0], images[1])

    save_checkpoint(model, tok2, tmp_path / "saved")
    saved = {p.name for p in (tmp_path / "saved").iterdir()}
    assert {"modeling_mmada.py", "modeling_llada.py", "configuration_llada.py", "sampling.py"} <= saved
    auto_map = json.loads((tmp_path / "saved" / "config.json").read_text())["auto_map"]
    assert auto_map == {"AutoConfig": "modeling_mmada.MMadaConfig", "AutoModel": "modeling_mmada.MMadaModelLM"}
    again, _, _ = load_model(ModelSpec(**{**spec.__dict__, "path_or_id": str(tmp_path / "saved")}))
    with torch.no_grad():
        assert torch.equal(again(x).logits, reference(x).logits)


T2I_TOKENS = {"t2i_id": "<|t2i|>", "soi_id": "<|soi|>", "eoi_id": "<|eoi|>", "pad_id": "[iPAD]"}

# ------------------------------------------------------------------------------------------------ LoRA targets


def _profile_targets(name: str, *keys: str):
    section = yaml.safe_load((REPO / "profiles" / f"{name}.yaml").read_text())
    for key in keys:
        section = section[key]
    return LoraConfig(**section["lora"]).target_modules


PROFILE_TARGETS = _profile_targets("paper_llada_math", "grpo")
BLOCK_TARGETS = {f"model.transformer.blocks.{i}.{p}" for i in range(2) for p in BLOCK_PROJECTIONS}


def test_both_paper_profiles_adapt_every_block_projection_and_nothing_else(llada):
    assert _profile_targets("paper_mmada_geneval", "image", "grpo") == PROFILE_TARGETS
    model, _, _ = load_model(llada_spec(llada[0]))
    assert set(lora_targets(model, PROFILE_TARGETS)) == BLOCK_TARGETS
    assert peft_target_modules(model, PROFILE_TARGETS) == PROFILE_TARGETS

    # the profiles' former list: ff_out also names the output head, which is refused before training
    names = ("q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out")
    assert "model.transformer.ff_out" in lora_targets(model, names)
    with pytest.raises(ConfigError) as e:
        peft_target_modules(model, names)
    msg = str(e.value)
    assert msg.startswith("lora.target_modules = [") and "\n" not in msg
    assert f"also selects the output head model.transformer.ff_out ({model.config.vocab_size} x 32)" in msg
    with pytest.raises(ConfigError, match=r"also selects the embedding model.transformer.wte"):
        peft_target_modules(model, ".*(wte|q_proj)")
    with pytest.raises(ConfigError, match="selects no module of LLaDAModelLM"):
        peft_target_modules(model, ("query",))
    # named in full, the head is meant
    assert peft_target_modules(model, (*names, "model.transformer.ff_out")) == [*names, "model.transformer.ff_out"]


def test_a_merged_lora_save_changes_the_targets_only(llada, tok, tmp_path):
    """The profiles' targets, trained and merged: every block projection moved, and the output head, the
    embeddings, the norms (every other weight) are bit-identical to the checkpoint's."""
    path, _ = llada
    model, tok2, _ = load_model(llada_spec(path))
    lora = LoraConfig(r=4, alpha=8.0, target_modules=PROFILE_TARGETS)
    policy = dist.prepare_model(model, "no", False, lora)
    opt = torch.optim.AdamW(dist.trainable(policy), lr=1e-2)
    x, y = ids(tok, 4, 12, seed=1), ids(tok, 4, 12, seed=2)
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(policy(x).logits.flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.save_policy(Accelerator(cpu=True), policy, tok2, tmp_path / "merged")

    before, after = load_file(path / "model.safetensors"), load_file(tmp_path / "merged" / "model.safetensors")
    assert set(after) == set(before)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {f"{name}.weight" for name in BLOCK_TARGETS}
    for key in ("model.transformer.ff_out.weight", "model.transformer.wte.weight", "model.transformer.ln_f.weight"):
        assert torch.equal(before[key], after[key])


# ------------------------------------------------------------------------------------------------ padding


def test_padding_never_turns_llada_causal(llada, tok):
    """LLaDA's forward makes attention causal for the whole batch as soon as attention_mask holds a 0. The adapter
    passes a padding mask as MMaDA's attention_bias instead: pads neither attend nor are attended, and with
    rotary (relative) positions a left-padded row's logits are the unpadded row's. With no mask (d1's handling,
    as every sampler and trainer calls the model) pads are attended; rows stay independent and bidirectional."""
    path, _ = llada
    model, _, adapter = load_model(llada_spec(path))
    short, long = ids(tok, 1, 5, seed=3)[0], ids(tok, 1, 9, seed=4)[0]
    batch = adapter.encode_prompts([tok.decode(short), tok.decode(long)])
    x, mask = batch["input_ids"], batch["attention_mask"]
    assert x.shape == (2, 9) and mask[0].tolist() == [0] * 4 + [1] * 5 and torch.equal(x[0, 4:], short)

    def run(network):  # the rows padded (with the mask, then without: d1's) and alone, in other shapes: tolerance
        with torch.no_grad():  # from float32's error (tests/float_error.py)
            alone_short, alone_long = network(short[None]).logits[0], network(long[None]).logits[0]
            padded, d1 = adapter.logits(network, x, mask), adapter.logits(network, x)
        return torch.cat([padded[0, 4:], padded[1], d1[1]]), torch.cat([alone_short, alone_long, alone_long])

    forward_passes_agree("the padded rows' logits", run, model, x.shape[1])
    with torch.no_grad():
        alone_short, alone_long = model(short[None]).logits[0], model(long[None]).logits[0]
        # the hazard this avoids: the same mask handed to LLaDA as attention_mask makes even the full row causal
        causal = model(x, attention_mask=mask).logits
        assert (causal[1] - alone_long).abs().max() > 1e-2
        # d1's handling: no mask, the pads (EOS) attended; the unpadded row is untouched by its neighbour
        d1 = adapter.logits(model, x)
        assert (d1[0, 4:] - alone_short).abs().max() > 1e-2
        assert torch.equal(adapter.logits(model, x, torch.ones_like(mask)), d1), "an all-ones mask changes nothing"


def test_llada_checkpoints_its_blocks_with_the_same_gradients_and_less_memory(llada, tok):
    """LLaDA's remote code lacks the transformers checkpointing API (LLaDA issue #51); ddmrl switches on its own
    whole-layer strategy: the same gradients, and the forward pass keeps fewer activations (ddmrl.plan.LiveBytes)."""
    import copy

    from ddmrl.plan import LiveBytes

    _, model = llada
    x = ids(tok, n=2, length=24)
    grads, held = [], []
    for checkpointing in (False, True):
        m = dist.prepare_model(copy.deepcopy(model), "no", checkpointing, LoraConfig())
        m.train()
        counter = LiveBytes()
        with counter:
            loss = m(x).logits.float().log_softmax(-1).mean()
            held.append(counter.live)  # what the forward pass keeps for backward
            loss.backward()
        grads.append([p.grad for p in m.parameters()])
    assert model.model.activation_checkpointing_strategy is None  # the fixture's model was left alone
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert held[1] < held[0]
