"""A character-level tokenizer the project builds itself (no download), saved and loaded the Hugging Face way.

Every character is one token, except the atomic special tokens the tasks declare (``<answer>``, ...). It is a
``PreTrainedTokenizerFast`` over a ``tokenizers`` WordLevel model, so ``save_pretrained`` writes
``tokenizer.json`` and ``AutoTokenizer.from_pretrained`` loads it back.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

MASK, PAD, BOS, EOS, UNK = "[MASK]", "[PAD]", "[BOS]", "[EOS]", "[UNK]"
CONTROL_TOKENS = (MASK, PAD, BOS, EOS, UNK)  # ids 0..4, in this order


def build_tokenizer(alphabet: Iterable[str], words: Iterable[str] = ()) -> PreTrainedTokenizerFast:
    """A tokenizer over the characters of ``alphabet`` plus atomic ``words``.

    Ids: [MASK]=0, [PAD]=1, [BOS]=2, [EOS]=3, [UNK]=4, then ``words`` in order, then the sorted characters.
    """
    words = list(dict.fromkeys(words))
    chars = sorted(set("".join(alphabet)) - set(words))
    vocab = {tok: i for i, tok in enumerate([*CONTROL_TOKENS, *words, *chars])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # one token per character
    core.decoder = decoders.Fuse()  # join tokens without spaces
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        mask_token=MASK,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
    )
    tok.add_tokens(words)  # matched before the per-character split; kept when decoding
    return tok


def encode(tok: PreTrainedTokenizerFast, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens; raises if a character is unknown to the tokenizer."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if tok.unk_token_id in ids:
        bad = sorted({c for c in text if tok.convert_tokens_to_ids(c) == tok.unk_token_id})
        raise ValueError(f"characters {bad} are not in the tokenizer's vocabulary (text {text!r})")
    return ids


def decode_completion(tok: PreTrainedTokenizerFast, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
    """Text of a completion: everything before the first [EOS], with any leftover [MASK]/[PAD] dropped; with
    ``skip_special_tokens`` every special token too (d1 decodes a real checkpoint's completions that way)."""
    out = []
    for i in ids:
        if i == tok.eos_token_id:
            break
        if i not in (tok.mask_token_id, tok.pad_token_id, tok.bos_token_id):
            out.append(i)
    return tok.decode(out, skip_special_tokens=skip_special_tokens)
