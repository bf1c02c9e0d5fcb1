"""Tiny random instances of the real LLaDA and MMaDA classes (Gen-Verse/MMaDA's ``models/``, which carries LLaDA's
``modeling_llada.py``), built at test time from the unmodified reference copy in ``shared/reference/mmada``.

Nothing of that code is copied into the repository: a test copies the modeling files into a temporary checkpoint
directory (``auto_map``, as LLaDA-8B-Instruct ships them) or imports the checkout in place (MMaDA). Tests that need it
skip with :data:`SKIP_REASON` where the reference copy is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import string
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parents[1]


def _reference() -> Path | None:
    """``$DDMRL_MMADA_REFERENCE``, else the first ``shared/reference/mmada`` beside the repository or above it."""
    if os.environ.get("DDMRL_MMADA_REFERENCE"):
        return Path(os.environ["DDMRL_MMADA_REFERENCE"])
    found = (p / "shared" / "reference" / "mmada" for p in REPO.parents)
    return next((p for p in found if p.is_dir()), None)


REFERENCE = _reference()  # the MMaDA checkout: REFERENCE / "models" holds MMaDA's (and LLaDA's) modeling files
SKIP_REASON = (
    "the real LLaDA/MMaDA code is absent: expected shared/reference/mmada/models beside the repository "
    "(or set DDMRL_MMADA_REFERENCE to a Gen-Verse/MMaDA checkout)"
)
needs_reference = pytest.mark.skipif(REFERENCE is None or not (REFERENCE / "models").is_dir(), reason=SKIP_REASON)

#: LLaDA-8B-Instruct's config.json with tiny sizes (d_model 4096 -> 32, 32 layers -> 2, mlp 12288 -> 64,
#: vocabulary 126464 -> the test tokenizer's); every other key as the checkpoint has it
LLADA_CONFIG = {
    "activation_type": "silu", "alibi": False, "alibi_bias_max": 8.0, "architectures": ["LLaDAModelLM"],
    "attention_dropout": 0.0, "attention_layer_norm": False, "attention_layer_norm_with_affine": True,
    "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModel": "modeling_llada.LLaDAModelLM",
                 "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM"},
    "bias_for_layer_norm": False, "block_group_size": 1, "block_type": "llama", "d_model": 32,
    "embedding_dropout": 0.0, "flash_attention": False, "include_bias": False, "include_qkv_bias": False,
    "init_cutoff_factor": None, "init_device": "meta", "init_fn": "mitchell", "init_std": 0.02,
    "input_emb_norm": False, "layer_norm_type": "rms", "layer_norm_with_affine": True, "max_sequence_length": 4096,
    "mlp_hidden_size": 64, "mlp_ratio": 4, "model_type": "llada", "multi_query_attention": None, "n_heads": 4,
    "n_kv_heads": 4, "n_layers": 2, "precision": "amp_bf16", "residual_dropout": 0.0, "rms_norm_eps": 1e-05,
    "rope": True, "rope_full_precision": True, "rope_theta": 500000.0, "scale_logits": False, "use_cache": False,
    "weight_tying": False,
}  # fmt: skip
#: the projections of every block, by LLaDA's names (attention q/k/v_proj, attn_out; SwiGLU ff_proj, up_proj, ff_out)
BLOCK_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out")

TEMPLATE = (
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
SPECIALS = ["<|mdm_mask|>", "<|startoftext|>", "<|endoftext|>", "<|eot_id|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|t2i|>", "<|soi|>", "<|eoi|>", "[iPAD]", "[UNK]"]  # fmt: skip
TAGS = ["<reasoning>", "</reasoning>", "<answer>", "</answer>"]


def tokenizer() -> PreTrainedTokenizerFast:
    """Character-level, with LLaDA's and MMaDA's special tokens (mask id 0, BOS 1, EOS 2), d1's tags as single tokens
    and a LLaDA-style chat template. No pad token: the loader pads with EOS, as d1."""
    vocab = {t: i for i, t in enumerate([*SPECIALS, *sorted(set(string.printable))])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<|startoftext|>", eos_token="<|endoftext|>", unk_token="[UNK]"
    )
    tok.add_tokens(TAGS)
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[3:10]})
    tok.chat_template = TEMPLATE
    return tok


def random_llada(config: dict, model_class: type, config_class: type, seed: int = 0) -> torch.nn.Module:
    """``model_class(config_class(**config))`` with LLaDA's own initialisation from ``seed`` (eval mode)."""
    cfg = config_class(**config)
    cfg.use_cache = False  # transformers 5 drops it from the keyword arguments; LLaDA's forward reads it
    torch.manual_seed(seed)
    return model_class(cfg).eval()


def favour(model: torch.nn.Module, token_ids: list[int], strength: float = 3.0) -> None:
    """Make ``token_ids`` likely everywhere: a constant on hidden dimension 0 of every embedding, read by the output
    head's rows of those tokens (LLaDA has no biases). Sampled completions then mix those tokens with others."""
    inner = model.model.transformer
    with torch.no_grad():
        inner.wte.weight[:, 0] = 4.0
        inner.ff_out.weight[token_ids, 0] = strength


def save_weights(model: torch.nn.Module, path: Path) -> dict[str, torch.Tensor]:
    """``path/model.safetensors`` with ``model``'s state dict; returns a copy of it."""
    weights = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return weights


def llada_checkpoint(path: Path, tok, seed: int = 0, favoured: list[int] = (), **sizes) -> torch.nn.Module:
    """A checkpoint directory shaped like LLaDA-8B-Instruct's: the real ``modeling_llada.py`` and
    ``configuration_llada.py`` beside config.json (``auto_map``), random weights, the tokenizer. Returns the
    in-memory model whose weights were saved (built from the same files, by ``transformers``' remote-code loader)."""
    from transformers import AutoConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    path.mkdir(parents=True)
    for name in ("configuration_llada.py", "modeling_llada.py"):
        shutil.copyfile(REFERENCE / "models" / name, path / name)
    config = {**LLADA_CONFIG, "vocab_size": len(tok), "embedding_size": len(tok), "mask_token_id": 0,
              "eos_token_id": tok.eos_token_id, "pad_token_id": tok.eos_token_id, **sizes}  # fmt: skip
    (path / "config.json").write_text(json.dumps(config, indent=1))
    tok.save_pretrained(path)
    config_class = type(AutoConfig.from_pretrained(path, trust_remote_code=True))
    model_class = get_class_from_dynamic_module("modeling_llada.LLaDAModelLM", path)
    model = random_llada(config, model_class, config_class, seed)
    if favoured:
        favour(model, list(favoured))
    save_weights(model, path)
    return model


CODEBOOK = 8192  # MAGVIT-v2's codebook (2 ** 13 lookup-free codes), MMaDA's image tokens


def mmada_package():
    """The reference checkout's ``models`` package (``MMadaModelLM``, ``MAGVITv2``), imported as ddmrl does."""
    from ddmrl.models.mmada import import_mmada

    return import_mmada(REFERENCE)


def mmada_checkpoint(path: Path, tok, seed: int = 0, num_vq_tokens: int = 16) -> torch.nn.Module:
    """A checkpoint directory shaped like MMaDA-8B-Base's (LLaDA's config keys, ``model_type: mmada``, the image
    codes after the text vocabulary, code 0 at ``len(tok)``), random weights of the real ``MMadaModelLM``, the
    tokenizer; no modeling files (MMaDA's class comes from the checkout, ``model.mmada_code``). Returns the model."""
    package = mmada_package()
    vocab = len(tok) + CODEBOOK
    config = {**{k: v for k, v in LLADA_CONFIG.items() if k != "auto_map"}, "architectures": ["MMadaModelLM"],
              "model_type": "mmada", "vocab_size": vocab, "embedding_size": vocab, "llm_vocab_size": len(tok),
              "new_vocab_size": vocab, "codebook_size": CODEBOOK, "num_vq_tokens": num_vq_tokens,
              "num_new_special_tokens": 0, "mask_token_id": 0, "eos_token_id": tok.eos_token_id,
              "pad_token_id": tok.eos_token_id}  # fmt: skip
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    tok.save_pretrained(path)
    model = random_llada(config, package.MMadaModelLM, package.MMadaConfig, seed)
    save_weights(model, path)
    return model


def magvit_dir(path: Path, seed: int = 0) -> Path:
    """``save_pretrained`` of the real ``MAGVITv2`` (its only configuration: 4 x 4 codes decode to 64 x 64 pixels),
    randomly initialised from ``seed``: about 95 M parameters, 365 MB."""
    torch.manual_seed(seed)
    mmada_package().MAGVITv2().save_pretrained(str(path))
    return path
