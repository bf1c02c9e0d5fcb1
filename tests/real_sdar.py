"""Tiny random instances of the real ``SDARForCausalLM`` (JetAstra SDAR, the architecture of TraDo), built at test
time from the unmodified reference copy in ``shared/reference/sdar`` (Gen-Verse/dLLM-RL's ``models/sdar/`` at
10b4fd1, the code TraceRL trains TraDo with).

Nothing of that code is copied into the repository: a test copies the modeling files into a temporary checkpoint
directory with SDAR-8B-Chat's ``config.json`` at tiny sizes (``auto_map``, as the hub ships it). Tests that need it
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
from real_models import save_weights
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parents[1]
CODE = ("configuration_sdar.py", "modeling_sdar.py")
CHECKPOINT = "SDAR-8B-Chat"


def _reference() -> Path | None:
    """``$DDMRL_SDAR_REFERENCE``, else the first ``shared/reference/sdar`` beside the repository or above it."""
    if os.environ.get("DDMRL_SDAR_REFERENCE"):
        return Path(os.environ["DDMRL_SDAR_REFERENCE"])
    found = (p / "shared" / "reference" / "sdar" for p in REPO.parents)
    return next((p for p in found if p.is_dir()), None)


REFERENCE = _reference()
SKIP_REASON = (
    "the real SDAR code is absent: expected shared/reference/sdar beside the repository (or set "
    "DDMRL_SDAR_REFERENCE to a directory holding modeling_sdar.py and SDAR-8B-Chat/config.json)"
)
needs_sdar = pytest.mark.skipif(
    REFERENCE is None
    or not all((REFERENCE / n).is_file() for n in CODE)
    or not (REFERENCE / CHECKPOINT / "config.json").is_file(),
    reason=SKIP_REASON,
)

#: SDAR's special tokens first: <|endoftext|> = pad = EOS (id 0), <|im_end|> (id 2, the chat's end of turn and
#: generation_config.json's other EOS), <|MASK|> (id 9, tokenizer_config.json's mask token), then the chat
#: template's think / tool tokens
SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<|MASK|>",
]
EOS, IM_END, MASK = 0, 2, 9
BLOCK = 4  # SDAR-8B-Chat's block_size
TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, max_position_embeddings=512, max_window_layers=2)  # fmt: skip


def tokenizer() -> PreTrainedTokenizerFast:
    """Character-level, SDAR's special tokens and its (Qwen3) chat template from the reference checkpoint; pad =
    EOS = ``<|endoftext|>``, mask ``<|MASK|>``, no BOS, as SDAR's tokenizer_config.json."""
    vocab = {t: i for i, t in enumerate([*SPECIALS, *sorted(set(string.printable))])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>", mask_token="<|MASK|>"
    )
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[1:9]})
    tok.chat_template = (REFERENCE / CHECKPOINT / "chat_template.jinja").read_text()
    return tok


def sdar_config(tok, **sizes) -> dict:
    """SDAR-8B-Chat's config.json with tiny sizes and this tokenizer's ids (everything else as released: block size
    4, ``fuse_cross_entropy``, ``attn_implementation: flex_attention``, which SDAR's attention never reads)."""
    config = json.loads((REFERENCE / CHECKPOINT / "config.json").read_text())
    config.update(TINY, vocab_size=len(tok), mask_token_id=MASK, pad_token_id=EOS, bos_token_id=EOS, eos_token_id=EOS)
    return {**config, **sizes}


def sdar_checkpoint(path: Path, tok, seed: int = 0, **sizes) -> torch.nn.Module:
    """A checkpoint directory shaped like SDAR-8B-Chat's: the real ``modeling_sdar.py`` and ``configuration_sdar.py``
    beside config.json (``auto_map``), generation_config.json, random weights, the tokenizer. Returns the in-memory
    ``SDARForCausalLM`` whose weights were saved (built from the same files by transformers' remote-code loader,
    bridged by ``ddmrl.models.compat``; eval mode)."""
    from transformers import AutoConfig

    from ddmrl.models import adapters

    path.mkdir(parents=True)
    for name in CODE:
        shutil.copyfile(REFERENCE / name, path / name)
    (path / "config.json").write_text(json.dumps(sdar_config(tok, **sizes), indent=1))
    generation = json.loads((REFERENCE / CHECKPOINT / "generation_config.json").read_text())
    generation.update(bos_token_id=EOS, eos_token_id=[IM_END, EOS], pad_token_id=EOS)
    (path / "generation_config.json").write_text(json.dumps(generation, indent=1))
    tok.save_pretrained(path)
    config = AutoConfig.from_pretrained(path, trust_remote_code=True)
    model_class, _, _ = adapters.remote_class(path, ("AutoModelForCausalLM",))
    torch.manual_seed(seed)
    model = model_class(config).eval()
    save_weights(model, path)
    return model


def sharpen(model: torch.nn.Module, scale: float = 8.0) -> None:
    """Scale the output head so that a random model's distributions are peaked (thresholds then commit several
    tokens per step, not none)."""
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
