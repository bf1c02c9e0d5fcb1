"""Tiny random instances of the real ``LLaDA2MoeModelLM`` (inclusionAI LLaDA2.0-mini and LLaDA2.1-mini, MoE block
diffusion), built at test time from the unmodified reference copies in ``shared/reference/llada2`` (yjyddq/DARE's
``models/LLaDA2.*-mini/`` at 83ae8a3, the hub's code).

Nothing of that code is copied into the repository: a test copies the modeling files into a temporary checkpoint
directory with the release's ``config.json`` at tiny sizes (``auto_map``, as the hub ships it). Tests that need it
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
CODE = ("configuration_llada2_moe.py", "modeling_llada2_moe.py")
VERSIONS = ("LLaDA2.0-mini", "LLaDA2.1-mini")


def _reference() -> Path | None:
    """``$DDMRL_LLADA2_REFERENCE``, else the first ``shared/reference/llada2`` beside the repository or above it."""
    if os.environ.get("DDMRL_LLADA2_REFERENCE"):
        return Path(os.environ["DDMRL_LLADA2_REFERENCE"])
    found = (p / "shared" / "reference" / "llada2" for p in REPO.parents)
    return next((p for p in found if p.is_dir()), None)


REFERENCE = _reference()
SKIP_REASON = (
    "the real LLaDA 2.x code is absent: expected shared/reference/llada2/LLaDA2.{0,1}-mini beside the repository "
    "(or set DDMRL_LLADA2_REFERENCE to a directory holding them, each with modeling_llada2_moe.py and config.json)"
)
needs_llada2 = pytest.mark.skipif(
    REFERENCE is None or not all((REFERENCE / v / n).is_file() for v in VERSIONS for n in CODE), reason=SKIP_REASON
)

#: LLaDA 2.x's special tokens first: <|endoftext|> = pad = EOS (id 0; 156892 in the release), <|mask|> (id 1;
#: 156895), <|startoftext|> = BOS (id 2), then the others of special_tokens_map.json and the chat template's roles
SPECIALS = ["<|endoftext|>", "<|mask|>", "<|startoftext|>", "[CLS]", "[gMASK]", "<role>", "</role>", "<|role_end|>"]
EOS, MASK, BOS = 0, 1, 2
#: the release's MoE at tiny sizes: layer 0 dense (first_k_dense_replace 1), layer 1 a sparse MoE block of 8 routed
#: experts in 4 groups (2 groups, then 2 experts per token) and 1 shared expert; 4 heads / 2 KV heads of 8, RoPE on
#: half of each head (partial_rotary_factor 0.5), QK norm, sigmoid routing with expert bias, as LLaDA2.0-mini
TINY = dict(hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, num_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2,
            rotary_dim=4, max_position_embeddings=512)  # fmt: skip


def tokenizer(version: str = "LLaDA2.0-mini") -> PreTrainedTokenizerFast:
    """Character-level, LLaDA 2.x's special tokens and its chat template from the reference tokenizer_config.json;
    pad = EOS = ``<|endoftext|>``, mask ``<|mask|>``, BOS ``<|startoftext|>`` as LLaDA 2.x's tokenizer."""
    vocab = {t: i for i, t in enumerate([*SPECIALS, *sorted(set(string.printable))])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"<role>|</role>|<\|role_end\|>|[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|startoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        mask_token="<|mask|>",
        cls_token="[CLS]",
    )
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[4:]})
    tok.chat_template = json.loads((REFERENCE / version / "tokenizer_config.json").read_text())["chat_template"]
    return tok


def llada2_config(tok, version: str = "LLaDA2.0-mini", **sizes) -> dict:
    """The release's config.json with tiny sizes and this tokenizer's ids (no ``mask_token_id``: the release has
    none; its ``generate`` takes ``mask_id`` as an argument)."""
    config = json.loads((REFERENCE / version / "config.json").read_text())
    config.update(TINY, vocab_size=len(tok), pad_token_id=EOS, bos_token_id=BOS, eos_token_id=EOS)
    return {**config, **sizes}


def llada2_checkpoint(path: Path, tok, version: str = "LLaDA2.0-mini", seed: int = 0, **sizes) -> torch.nn.Module:
    """A checkpoint directory shaped like the release's: the real ``modeling_llada2_moe.py`` and
    ``configuration_llada2_moe.py`` beside config.json (``auto_map``), generation_config.json, random weights, the
    tokenizer. Returns the in-memory ``LLaDA2MoeModelLM`` whose weights were saved (built from the same files by
    transformers' remote-code loader, bridged by ``ddmrl.models.compat``; eval mode)."""
    from transformers import AutoConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    from ddmrl.models import compat

    path.mkdir(parents=True)
    for name in CODE:
        shutil.copyfile(REFERENCE / version / name, path / name)
    (path / "config.json").write_text(json.dumps(llada2_config(tok, version, **sizes), indent=1))
    (path / "generation_config.json").write_text(json.dumps({"pad_token_id": EOS}, indent=1))
    tok.save_pretrained(path)
    config = AutoConfig.from_pretrained(path, trust_remote_code=True)
    model_class = get_class_from_dynamic_module("modeling_llada2_moe.LLaDA2MoeModelLM", path)
    compat.bridge_class(model_class)
    torch.manual_seed(seed)
    model = model_class(config).eval()
    save_weights(model, path)
    return model


def sharpen(model: torch.nn.Module, scale: float = 8.0) -> None:
    """Scale the output head so that a random model's distributions are peaked (the confidence thresholds then
    commit several tokens at a step, not one)."""
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
