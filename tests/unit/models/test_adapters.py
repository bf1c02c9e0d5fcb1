"""Model adapters (ddmrl.models.adapters, ddmrl.models.mmada) on tiny local stand-ins built here: a checkpoint
directory with its own modeling/configuration files (remote code), a LLaDA-like checkpoint with a chat template,
and a fake MMaDA checkout (``models/`` package with MMadaModelLM and MAGVITv2)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from real_models import REFERENCE, llada_checkpoint, mmada_checkpoint, needs_reference, tokenizer
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from ddmrl.config import ConfigError
from ddmrl.hub import PINNED_REVISIONS
from ddmrl.models import mmada as mm
from ddmrl.models.adapters import (
    LLADA_MASK_ID,
    LLaDAAdapter,
    MaskedLMAdapter,
    ModelSpec,
    TinyAdapter,
    load_model,
)
from ddmrl.models.checkpoint import save_checkpoint

LLADA_REV = PINNED_REVISIONS["GSAI-ML/LLaDA-8B-Instruct"]
SPECIALS = ["<|mdm_mask|>", "<|startoftext|>", "<|endoftext|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|eot_id|>", "<reasoning>"]  # fmt: skip
#: LLaDA-8B-Instruct's chat template as ZHZisZZ/dllm's models.py writes it: BOS, then per message the role header,
#: a blank line, the trimmed content and <|eot_id|>; the generation prompt adds the assistant header + blank line
LLADA_TEMPLATE = (
    "{% for message in messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim"
    " + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

CONFIGURATION = """
from transformers import PretrainedConfig


class ToyConfig(PretrainedConfig):
    model_type = "{model_type}"

    def __init__(self, vocab_size=16, hidden_size=8, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)
"""

MODELING = """
import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput

from .{configuration_module} import ToyConfig


class {model_class}(PreTrainedModel):
    config_class = ToyConfig
    base_model_prefix = "toy"

    def __init__(self, config):
        super().__init__(config)
        self.emb = nn.Embedding(config.vocab_size, config.hidden_size)
        self.mix = nn.Linear(config.hidden_size, config.hidden_size)
        self.head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.emb

    def forward(self, input_ids, attention_mask=None, attention_bias=None, **kwargs):
        self.last_attention_bias = attention_bias
        h = self.emb(input_ids)
        h = h + self.mix(h.mean(dim=1, keepdim=True))  # every position sees the whole row (bidirectional)
        return MaskedLMOutput(logits=self.head(h))
"""


def _tokenizer(alphabet: str = "abcdefghijklmnopqrstuvwxyz ?+=0123456789.\n") -> PreTrainedTokenizerFast:
    """Character-level tokenizer with LLaDA's special tokens (mask id 0, BOS 1, EOS = pad 2) and its template."""
    vocab = {t: i for i, t in enumerate([*SPECIALS, "[UNK]", *sorted(set(alphabet))])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        mask_token="<|mdm_mask|>",
        bos_token="<|startoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token="[UNK]",
        additional_special_tokens=SPECIALS[3:],
    )
    tok.chat_template = LLADA_TEMPLATE
    return tok


def _weights(vocab: int, hidden: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "emb.weight": torch.randn(vocab, hidden, generator=g),
        "mix.weight": torch.randn(hidden, hidden, generator=g),
        "mix.bias": torch.randn(hidden, generator=g),
        "head.weight": torch.randn(vocab, hidden, generator=g),
    }


def _expected_logits(w: dict[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    h = w["emb.weight"][ids]
    h = h + (h.mean(dim=1, keepdim=True) @ w["mix.weight"].T + w["mix.bias"])
    return h @ w["head.weight"].T


def _remote_code_dir(path, tok, mask_token_id: int | None = None, prefix: str = "toy") -> dict[str, torch.Tensor]:
    """A checkpoint directory that ships its own ``modeling_<prefix>.py`` / ``configuration_<prefix>.py`` and
    names them in config.json's ``auto_map`` (as LLaDA-8B-Instruct on the hub); returns its weights."""
    path.mkdir(parents=True)
    (path / f"configuration_{prefix}.py").write_text(CONFIGURATION.format(model_type=prefix))
    (path / f"modeling_{prefix}.py").write_text(
        MODELING.format(configuration_module=f"configuration_{prefix}", model_class="ToyModelLM")
    )
    cfg = {
        "model_type": prefix,
        "architectures": ["ToyModelLM"],
        "auto_map": {
            "AutoConfig": f"configuration_{prefix}.ToyConfig",
            "AutoModel": f"modeling_{prefix}.ToyModelLM",
            "AutoModelForMaskedLM": f"modeling_{prefix}.ToyModelLM",
        },
        "vocab_size": len(tok),
        "hidden_size": 8,
    }
    if mask_token_id is not None:
        cfg["mask_token_id"] = mask_token_id
    (path / "config.json").write_text(json.dumps(cfg))
    w = _weights(len(tok))
    save_file(w, str(path / "model.safetensors"), metadata={"format": "pt"})
    tok.save_pretrained(path)
    return w


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# ------------------------------------------------------------------------------------------------ ModelSpec


def test_spec_validation_names_the_key():
    with pytest.raises(ConfigError, match="model.kind = 'gpt'"):
        ModelSpec(kind="gpt", path_or_id="x")
    with pytest.raises(ConfigError, match="model.path_or_id"):
        ModelSpec(kind="llada", path_or_id="")
    with pytest.raises(ConfigError, match="model.dtype = 'fp8'"):
        ModelSpec(kind="llada", path_or_id="x", dtype="fp8")
    with pytest.raises(ConfigError, match="model.trust_remote_code = 'yes'"):
        ModelSpec(kind="llada", path_or_id="x", trust_remote_code="yes")
    with pytest.raises(ConfigError, match="model.mmada_code = 'm': only used with model.kind: mmada"):
        ModelSpec(kind="llada", path_or_id="x", mmada_code="m")
    # remote code at a branch is refused whatever the path (its code can change under the same name)
    with pytest.raises(ConfigError, match=r"model.revision = 'main': remote code .* 40-hex commit") as e:
        ModelSpec(kind="llada", path_or_id="GSAI-ML/LLaDA-8B-Instruct", revision="main", trust_remote_code=True)
    assert "\n" not in str(e.value)
    spec = ModelSpec(kind="llada", path_or_id="GSAI-ML/LLaDA-8B-Instruct", revision=LLADA_REV, trust_remote_code=True)
    assert spec.torch_dtype is torch.float32
    assert ModelSpec(kind="llada", path_or_id="x", dtype="bfloat16").torch_dtype is torch.bfloat16


def test_hub_id_with_remote_code_needs_a_pinned_commit_and_is_never_downloaded():
    hub_id = "GSAI-ML/LLaDA-8B-Instruct"
    unpinned = ModelSpec(kind="llada", path_or_id=hub_id, trust_remote_code=True)
    with pytest.raises(ConfigError, match="model.revision = None: remote code from the hub runs only at a pinned"):
        load_model(unpinned)
    pinned = ModelSpec(kind="llada", path_or_id=hub_id, revision=LLADA_REV, trust_remote_code=True)
    with pytest.raises(RuntimeError) as e:
        load_model(pinned)
    msg = str(e.value)
    assert "not a local directory and not in the Hugging Face cache" in msg and "\n" not in msg
    assert f"hf download GSAI-ML/LLaDA-8B-Instruct --revision {LLADA_REV} --local-dir <dir>/LLaDA-8B-Instruct" in msg


# ------------------------------------------------------------------------------------------------ (a) remote code


def test_local_remote_code_dir_is_refused_without_the_flag_and_loads_with_it(tmp_path, modules_cache):
    tok = _tokenizer()
    w = _remote_code_dir(tmp_path / "ckpt_flag", tok)
    copied = lambda: [p for p in Path(modules_cache).rglob("*") if "ckpt_flag" in p.parts]  # noqa: E731
    with pytest.raises(ConfigError) as e:
        load_model(ModelSpec(kind="hf_masked_lm", path_or_id=str(tmp_path / "ckpt_flag")))
    msg = str(e.value)
    assert msg.startswith("model.trust_remote_code = false:") and "\n" not in msg
    assert "modeling_toy.ToyModelLM" in msg and "set model.trust_remote_code: true" in msg
    assert not copied(), "no remote code may be copied or run before the opt-in"

    model, tok2, adapter = load_model(
        ModelSpec(kind="hf_masked_lm", path_or_id=str(tmp_path / "ckpt_flag"), trust_remote_code=True)
    )
    assert copied(), "transformers ran the directory's own modeling file"
    assert type(model).__name__ == "ToyModelLM" and not model.training
    assert isinstance(adapter, MaskedLMAdapter) and adapter.mask_token_id == tok.mask_token_id == 0
    ids = torch.tensor([[1, 9, 10, 11, 2], [1, 12, 13, 2, 2]])
    logits = adapter.logits(model, ids)
    assert logits.shape == (2, 5, len(tok))
    torch.testing.assert_close(logits, _expected_logits(w, ids))  # the saved weights, not a fresh init


def test_masked_lm_without_a_mask_token_is_refused(tmp_path):
    tok = _tokenizer()
    _remote_code_dir(tmp_path / "ckpt", tok)
    cfg = json.loads((tmp_path / "ckpt" / "tokenizer_config.json").read_text())
    cfg.pop("mask_token", None)
    (tmp_path / "ckpt" / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(RuntimeError, match="no mask token id"):
        load_model(ModelSpec(kind="hf_masked_lm", path_or_id=str(tmp_path / "ckpt"), trust_remote_code=True))


def test_tiny_kind_loads_a_saved_tinyddm(tmp_path, make_model, tok):
    save_checkpoint(make_model(max_positions=8), tok, tmp_path / "ck")
    model, tok2, adapter = load_model(ModelSpec(kind="tiny", path_or_id=str(tmp_path / "ck")))
    assert isinstance(adapter, TinyAdapter) and adapter.mask_token_id == tok.mask_token_id
    assert adapter.build_prompt("<a>01") == "<a>01"
    assert adapter.logits(model, torch.zeros(2, 8, dtype=torch.long)).shape == (2, 8, len(tok))
    with pytest.raises(RuntimeError, match="no such directory"):
        load_model(ModelSpec(kind="tiny", path_or_id=str(tmp_path / "missing")))


# ------------------------------------------------------------------------------------------------ (b) LLaDA
# the real LLaDAModelLM (shared/reference/mmada), tiny and random, in a checkpoint directory with auto_map


def _llada_dir(path, tok=None, **config):
    """(directory, in-memory model) of a real tiny LLaDA checkpoint over ``tok`` (default: LLaDA's specials)."""
    return path, llada_checkpoint(path, tok or _tokenizer(), **config)


@needs_reference
def test_llada_needs_the_remote_code_opt_in(tmp_path, modules_cache):
    _llada_dir(tmp_path / "llada")  # (building it ran the code once: compare the module cache before and after)
    cached = lambda: sorted(Path(modules_cache).rglob("*"))  # noqa: E731
    before = cached()
    with pytest.raises(ConfigError, match=r"model.trust_remote_code = false: .*modeling_llada.LLaDAModelLM"):
        load_model(ModelSpec(kind="llada", path_or_id=str(tmp_path / "llada")))
    assert cached() == before, "no remote code may be copied or run before the opt-in"


@needs_reference
def test_llada_prompt_is_d1s_chat_template_plus_reasoning_prefill(tmp_path):
    tok = _tokenizer()
    mask_id = tok.convert_tokens_to_ids("<|mdm_mask|>")
    path, reference = _llada_dir(tmp_path / "llada", tok, mask_token_id=mask_id)
    model, tok2, adapter = load_model(ModelSpec(kind="llada", path_or_id=str(path), trust_remote_code=True))
    assert isinstance(adapter, LLaDAAdapter) and adapter.mask_token_id == mask_id
    assert adapter.pad_token_id == adapter.eos_token_id == tok.eos_token_id != mask_id

    system, question = "answer in tags.", "what is 2+3? "
    prompt = adapter.build_prompt(question, system)
    # d1 eval: one user turn system + blank line + question, generation prompt, then the literal <reasoning>
    assert prompt == (
        "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\n"
        "answer in tags.\n\nwhat is 2+3?<|eot_id|>"  # the template trims the content
        "<|start_header_id|>assistant<|end_header_id|>\n\n<reasoning>"
    )
    assert adapter.build_prompt(question, system, add_reasoning=False) == prompt.removesuffix("<reasoning>")
    assert adapter.build_prompt("hi").endswith("user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>"
                                               "assistant<|end_header_id|>\n\n<reasoning>")  # fmt: skip

    batch = adapter.encode_prompts([prompt, adapter.build_prompt("a longer question?", system)])
    ids, att = batch["input_ids"], batch["attention_mask"]
    n_short = int(att[0].sum())
    assert ids.shape[0] == 2 and ids.shape[1] > n_short and att[1].all()
    assert (ids[0, : ids.shape[1] - n_short] == tok.pad_token_id).all(), "left padding with the pad (EOS) id"
    assert tok2.decode(ids[0, ids.shape[1] - n_short :]) == prompt
    assert ids[0, -1].item() == tok.convert_tokens_to_ids("<reasoning>") and mask_id not in ids.tolist()[0]

    with torch.no_grad():
        logits = adapter.logits(model, ids)
        assert logits.shape == (*ids.shape, len(tok))
        assert torch.equal(logits, reference(ids).logits)  # the saved weights, not a fresh init


@needs_reference
def test_a_checkpoint_transformers_cannot_load_is_one_line(tmp_path):
    path, _ = _llada_dir(tmp_path / "llada")
    (path / "model.safetensors").unlink()
    with pytest.raises(RuntimeError, match=r"llada: cannot load the model \(OSError: ") as e:
        load_model(ModelSpec(kind="llada", path_or_id=str(path), trust_remote_code=True))
    assert "\n" not in str(e.value)


@needs_reference
def test_llada_mask_id_defaults_to_126336_and_must_fit_the_vocabulary(tmp_path):
    path, _ = _llada_dir(tmp_path / "llada")
    config = json.loads((path / "config.json").read_text())
    del config["mask_token_id"]  # LLaDAConfig would fill in its ModelConfig default 50256, an ordinary token
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(RuntimeError, match=f"mask token id {LLADA_MASK_ID} is outside the model's vocabulary"):
        load_model(ModelSpec(kind="llada", path_or_id=str(path), trust_remote_code=True))


# ------------------------------------------------------------------------------------------------ (c) MMaDA layout

#: fake ids: text tokens < 20, codes 0..7 at 20..27
LAYOUT = mm.T2ILayout(
    max_seq_length=7, num_image_tokens=4, image_offset=20, codebook_size=8, mask_token_id=3,
    t2i_id=10, soi_id=11, eoi_id=12, pad_id=13, bos_id=1, eos_id=2,
)  # fmt: skip


def test_real_mmada_layout_constants():
    real = mm.T2ILayout()
    assert (real.text_len, real.seq_len) == (513, 513 + 1024 + 2)
    assert real.image_positions == slice(514, 1538)
    assert (real.image_offset, real.codebook_size, real.mask_token_id) == (126349, 8192, 126336)
    assert (real.t2i_id, real.soi_id, real.eoi_id, real.pad_id, real.bos_id, real.eos_id) == (
        126088, 126084, 126085, 126093, 126080, 126081,
    )  # fmt: skip


def test_t2i_sequence_positions_and_left_padding():
    ids, mask = LAYOUT.build([[1, 5, 6], [7]])  # caption 1 already starts with BOS, caption 2 does not
    assert ids.shape == mask.shape == (2, LAYOUT.seq_len) == (2, 8 + 4 + 2)
    assert ids[0].tolist() == [13, 13, 13, 10, 1, 5, 6, 2, 11, 3, 3, 3, 3, 12]
    assert mask[0].tolist() == [0, 0, 0] + [1] * 11
    assert ids[1].tolist() == [13, 13, 13, 13, 10, 1, 7, 2, 11, 3, 3, 3, 3, 12]
    assert mask[1].tolist() == [0] * 4 + [1] * 10
    assert (ids[:, LAYOUT.image_positions] == 3).all() and (ids[:, LAYOUT.text_len] == 11).all()
    # exactly full, and too long: cut to text_len - 1 tokens and EOS re-appended, no padding
    full, _ = LAYOUT.build([[1, 4, 5, 6, 7]])
    assert full[0, : LAYOUT.text_len].tolist() == [13, 10, 1, 4, 5, 6, 7, 2]
    long, long_mask = LAYOUT.build([[1, 4, 5, 6, 7, 8, 9, 4]])
    assert long[0, : LAYOUT.text_len].tolist() == [10, 1, 4, 5, 6, 7, 8, 2] and long_mask.all()
    # given image tokens land between <|soi|> and <|eoi|>
    codes = torch.tensor([[0, 7, -1, 2]])
    tokens = LAYOUT.tokens_from_codes(codes)
    assert tokens.tolist() == [[20, 27, 3, 22]]
    assert LAYOUT.codes_from_tokens(tokens).tolist() == codes.tolist()
    with_img, _ = LAYOUT.build([[1]], tokens)
    assert with_img[0, -6:].tolist() == [11, 20, 27, 3, 22, 12]
    with pytest.raises(ValueError, match=r"image_tokens has shape \(1, 3\), expected \(1, 4\)"):
        LAYOUT.build([[1]], tokens[:, :3])


def test_unconditional_form_and_its_join_with_current_image_tokens():
    u_ids, u_mask = LAYOUT.unconditional(2)
    assert u_ids[0].tolist() == [13] * 5 + [10, 1, 2] + [11, 3, 3, 3, 3, 12]  # <|t2i|>, BOS, EOS left-padded
    assert u_mask[0].tolist() == [0] * 5 + [1] * 9 and torch.equal(u_ids[0], u_ids[1])
    cond, _ = LAYOUT.build([[1, 5], [1, 6, 7]], LAYOUT.tokens_from_codes(torch.tensor([[1, 2, -1, 4], [5, -1, 6, 7]])))
    joined, j_mask = LAYOUT.uncond_like(cond, u_ids[:1], u_mask[:1])
    assert torch.equal(joined[:, : LAYOUT.text_len], u_ids[:, : LAYOUT.text_len])
    assert torch.equal(joined[:, LAYOUT.text_len :], cond[:, LAYOUT.text_len :])
    assert torch.equal(j_mask, u_mask)


def test_code_logits_slice_and_cfg():
    logits = torch.arange(2 * LAYOUT.seq_len * 30, dtype=torch.float).view(2, LAYOUT.seq_len, 30)
    sliced = LAYOUT.code_logits(logits)
    assert sliced.shape == (2, 4, 8)
    assert torch.equal(sliced, logits[:, 9:13, 20:28])
    assert torch.equal(sliced, logits[:, -(4 + 1) : -1, 20:28]), "MMaDA slices the N positions before <|eoi|>"
    with pytest.raises(ValueError, match="columns"):
        LAYOUT.code_logits(logits[..., :27])
    c, u = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0])
    assert mm.cfg_logits(c, u, 3.5).tolist() == [4.5 * 2 - 3.5, -3.5]
    assert torch.equal(mm.cfg_logits(c, u, 3.5), u + 4.5 * (c - u))  # LLaDA's form, same thing
    m = torch.tensor([[0, 1, 1]])
    assert mm.attention_bias(m)[0, 0].tolist() == [[False] * 3, [False, True, True], [False, True, True]]


def test_layout_rejects_ids_inside_the_code_range():
    with pytest.raises(ValueError, match="T2ILayout.mask_token_id = 21: collides"):
        mm.T2ILayout(image_offset=20, codebook_size=8, mask_token_id=21)


# ------------------------------------------------------------------------------------------------ (c) MMaDA code
# loading the real MMadaModelLM and MAGVITv2: tests/unit/models/test_real_classes.py; here what is missing or broken


def _broken_checkout(root, failing_import: str):
    """A checkout whose ``models/__init__.py`` imports ``failing_import`` first (a dependency not installed)."""
    (root / "models").mkdir(parents=True)
    (root / "models" / "__init__.py").write_text(f"import {failing_import}\nfrom .modeling_mmada import *\n")


def test_missing_mmada_code_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "mmada").mkdir()
    (tmp_path / "mmada" / "config.json").write_text(json.dumps({"model_type": "mmada"}))
    with pytest.raises(RuntimeError) as e:
        load_model(ModelSpec(kind="mmada", path_or_id=str(tmp_path / "mmada")))
    assert "model.mmada_code" in str(e.value) and "github.com/Gen-Verse/MMaDA" in str(e.value)
    with pytest.raises(RuntimeError, match=r"model.mmada_code = '.*nowhere': no models/__init__.py there"):
        mm.load_magvit(tmp_path / "magvit", tmp_path / "nowhere")

    _broken_checkout(tmp_path / "MMaDA2", "diffusers")
    monkeypatch.setitem(sys.modules, "diffusers", None)  # as if not installed
    with pytest.raises(RuntimeError, match=r"needs the diffusers package: pip install diffusers==0.32.2 .*\[mmada\]"):
        mm.import_mmada(tmp_path / "MMaDA2")
    _broken_checkout(tmp_path / "MMaDA3", "ddmrl_no_such_module_x")
    with pytest.raises(RuntimeError, match=r"'ddmrl_no_such_module_x' is missing \(pip install -e \"\.\[mmada\]"):
        mm.import_mmada(tmp_path / "MMaDA3")


@needs_reference
def test_magvit_weights_not_set_is_a_clear_error(tmp_path):
    mmada_checkpoint(tmp_path / "mmada", tokenizer())
    _, _, adapter = load_model(ModelSpec(kind="mmada", path_or_id=str(tmp_path / "mmada"),
                                         mmada_code=str(REFERENCE)))  # fmt: skip
    with pytest.raises(RuntimeError, match=r"model.vq_path_or_id is not set: .*hf download showlab/magvitv2"):
        adapter.decode_images(torch.zeros(1, 4, dtype=torch.long), LAYOUT)
