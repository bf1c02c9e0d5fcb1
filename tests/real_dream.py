"""Tiny random instances of the real ``DreamModel`` (Dream-v0, HKUNLP), built at test time from the unmodified
reference copy in ``shared/reference/dream`` (Gen-Verse/dLLM-RL's ``models/dream/``, Dream-org's hub code).

Nothing of that code is copied into the repository: a test copies the modeling files into a temporary checkpoint
directory with Dream-v0-Instruct-7B's ``config.json`` at tiny sizes (``auto_map``, as the hub ships it). Tests that
need it skip with :data:`SKIP_REASON` where the reference copy is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import string
from pathlib import Path

import pytest
import torch
from real_models import save_weights
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parents[1]
CODE = ("configuration_dream.py", "modeling_dream.py", "generation_utils.py")


def _reference() -> Path | None:
    """``$DDMRL_DREAM_REFERENCE``, else the first ``shared/reference/dream`` beside the repository or above it."""
    if os.environ.get("DDMRL_DREAM_REFERENCE"):
        return Path(os.environ["DDMRL_DREAM_REFERENCE"])
    found = (p / "shared" / "reference" / "dream" for p in REPO.parents)
    return next((p for p in found if p.is_dir()), None)


REFERENCE = _reference()
SKIP_REASON = (
    "the real Dream code is absent: expected shared/reference/dream beside the repository "
    "(or set DDMRL_DREAM_REFERENCE to a directory holding Dream-v0's modeling_dream.py and config.json)"
)
needs_dream = pytest.mark.skipif(
    REFERENCE is None or not all((REFERENCE / n).is_file() for n in CODE), reason=SKIP_REASON
)

#: Dream's special tokens first: <|endoftext|> = pad = EOS (id 0), <|mask|> (id 1), <|beginoftext|> = BOS (id 2)
SPECIALS = ["<|endoftext|>", "<|mask|>", "<|beginoftext|>", "<|im_start|>", "<|im_end|>"]
EOS, MASK, BOS = 0, 1, 2
TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=512, max_window_layers=2)  # fmt: skip


def tokenizer() -> PreTrainedTokenizerFast:
    """Character-level, Dream's special tokens and its (Qwen2.5) chat template from the reference
    tokenizer_config.json; pad = EOS = ``<|endoftext|>``, mask ``<|mask|>`` as Dream's tokenizer."""
    vocab = {t: i for i, t in enumerate([*SPECIALS, *sorted(set(string.printable))])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|beginoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        mask_token="<|mask|>",
    )
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[3:]})
    tok.chat_template = json.loads((REFERENCE / "tokenizer_config.json").read_text())["chat_template"]
    return tok


def dream_config(tok, **sizes) -> dict:
    """Dream-v0-Instruct-7B's config.json with tiny sizes and this tokenizer's ids (attention: SDPA, not flash)."""
    config = json.loads((REFERENCE / "config.json").read_text())
    config.pop("attn_implementation")  # flash_attention_2: no CPU kernel; the class's own SDPA attention runs
    config.update(TINY, vocab_size=len(tok), mask_token_id=MASK, pad_token_id=EOS, bos_token_id=BOS, eos_token_id=EOS)
    return {**config, **sizes}


def dream_checkpoint(path: Path, tok, seed: int = 0, favoured: list[int] = (), **sizes) -> torch.nn.Module:
    """A checkpoint directory shaped like Dream-v0-Instruct-7B's: the real ``modeling_dream.py``,
    ``configuration_dream.py`` and ``generation_utils.py`` beside config.json (``auto_map``), generation_config.json,
    random weights (``favoured`` tokens made likely everywhere), the tokenizer. Returns the in-memory model whose
    weights were saved (built from the same files by transformers' remote-code loader, bridged by
    ``ddmrl.models.compat``; eval mode)."""
    from transformers import AutoConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    from ddmrl.models import compat

    path.mkdir(parents=True)
    for name in CODE:
        shutil.copyfile(REFERENCE / name, path / name)
    (path / "config.json").write_text(json.dumps(dream_config(tok, **sizes), indent=1))
    generation = json.loads((REFERENCE / "generation_config.json").read_text())
    generation.update(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=EOS, mask_token_id=MASK)
    (path / "generation_config.json").write_text(json.dumps(generation, indent=1))
    tok.save_pretrained(path)
    config = AutoConfig.from_pretrained(path, trust_remote_code=True)
    model_class = get_class_from_dynamic_module("modeling_dream.DreamModel", path)
    compat.bridge_class(model_class)
    torch.manual_seed(seed)
    model = model_class(config).eval()
    if favoured:  # a constant on hidden dimension 0 of every embedding, read by the head's rows of those tokens
        with torch.no_grad():
            model.model.embed_tokens.weight[:, 0] = 4.0
            model.lm_head.weight[list(favoured), 0] = 3.0
    save_weights(model, path)
    return model


def sharpen(model: torch.nn.Module, scale: float = 8.0) -> None:
    """Scale the output head so that a random model's distributions are peaked (top-p, top-k and the confidence
    rules then act on distinct values, not on near-uniform ones)."""
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
