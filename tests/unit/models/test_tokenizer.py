"""The character-level tokenizer (ddmrl.models.tokenizer)."""

from __future__ import annotations

import pytest

from ddmrl.models.tokenizer import build_tokenizer, decode_completion, encode


def test_ids_layout(tok):
    """[MASK]=0 [PAD]=1 [BOS]=2 [EOS]=3 [UNK]=4, then the words, then the sorted characters."""
    assert tok.get_vocab() == {
        "[MASK]": 0,
        "[PAD]": 1,
        "[BOS]": 2,
        "[EOS]": 3,
        "[UNK]": 4,
        "<a>": 5,
        "0": 6,
        "1": 7,
        "2": 8,
        "3": 9,
    }
    assert (tok.mask_token_id, tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2, 3)
    assert len(tok) == 10


def test_round_trip_with_special_words(tok):
    text = "<a>01<a>2"  # a word at the start and in the middle
    ids = encode(tok, text)
    assert ids == [5, 6, 7, 5, 8]
    assert tok.decode(ids) == text
    assert decode_completion(tok, ids) == text


def test_multi_character_words_are_atomic_and_not_split():
    tok = build_tokenizer("0123456789", ["<sudoku>", "<answer>", "</answer>"])
    ids = encode(tok, "<answer>12</answer>")
    assert len(ids) == 4
    assert tok.decode(ids) == "<answer>12</answer>"


def test_unknown_character_raises_naming_it(tok):
    with pytest.raises(ValueError, match=r"\['x'\]"):
        encode(tok, "01x2")
    with pytest.raises(ValueError):
        encode(tok, " ")


def test_decode_completion_stops_at_eos_and_drops_masks_pads_bos(tok):
    ids = [5, 0, 6, 1, 2, 7, 3, 8, 9]  # <a> [MASK] 0 [PAD] [BOS] 1 [EOS] 2 3
    assert decode_completion(tok, ids) == "<a>01"
    assert decode_completion(tok, [3, 6, 7]) == ""
    assert decode_completion(tok, [6, 7]) == "01"


def test_decode_completion_can_skip_every_special_token():
    tok = build_tokenizer("ab", ["<w>"])
    tok.add_special_tokens({"additional_special_tokens": ["<|eot_id|>"]})
    ids = [*encode(tok, "a<w>b"), tok.convert_tokens_to_ids("<|eot_id|>"), tok.eos_token_id, *encode(tok, "a")]
    assert decode_completion(tok, ids) == "a<w>b<|eot_id|>"  # stops at EOS; task words and specials kept
    assert decode_completion(tok, ids, skip_special_tokens=True) == "a<w>b"  # as d1 decodes LLaDA's completions
