"""Saving and loading a policy with its tokenizer (ddmrl.models.checkpoint), the Hugging Face way."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForMaskedLM

from ddmrl.models.checkpoint import load_checkpoint, save_checkpoint
from ddmrl.models.tiny import TinyDDMForMaskedLM
from ddmrl.models.tokenizer import decode_completion, encode


def test_round_trip_is_exact(tmp_path, make_model, tok):
    model = make_model(max_positions=8)
    with torch.no_grad():
        model.blocks[0].ff[0].bias.normal_()  # a non-default value somewhere that init would not reproduce
    save_checkpoint(model, tok, tmp_path / "ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"], "no temporary leftovers next to the checkpoint"
    assert (tmp_path / "ck" / "model.safetensors").exists() and (tmp_path / "ck" / "tokenizer.json").exists()
    loaded, tok2 = load_checkpoint(tmp_path / "ck")
    assert isinstance(loaded, TinyDDMForMaskedLM) and not loaded.training
    x = torch.randint(0, len(tok), (3, 8), generator=torch.Generator().manual_seed(0))
    assert (model(x).logits - loaded(x).logits).abs().max().item() == 0.0
    assert loaded.lm_head.weight.data_ptr() == loaded.tok.weight.data_ptr(), "tying lost on load"
    assert loaded.config.mask_token_id == tok.mask_token_id
    # the tokenizer comes back with the same vocabulary and special ids
    assert tok2.get_vocab() == tok.get_vocab()
    assert (tok2.mask_token_id, tok2.pad_token_id, tok2.bos_token_id, tok2.eos_token_id) == (0, 1, 2, 3)
    assert encode(tok2, "<a>0123") == encode(tok, "<a>0123")
    assert decode_completion(tok2, encode(tok, "<a>01")) == "<a>01"
    # the plain Auto class loads it too
    assert isinstance(AutoModelForMaskedLM.from_pretrained(tmp_path / "ck"), TinyDDMForMaskedLM)


def test_saving_over_an_existing_checkpoint_replaces_it(tmp_path, make_model, tok):
    save_checkpoint(make_model(seed=0), tok, tmp_path / "ck")
    second = make_model(seed=1)
    save_checkpoint(second, tok, tmp_path / "ck")
    loaded, _ = load_checkpoint(tmp_path / "ck")
    assert torch.equal(loaded.tok.weight, second.tok.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_loading_a_missing_checkpoint_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nothing")


def test_a_pointer_directory_loads_through_its_adapter_and_saves_one_back(tmp_path, make_model, tok):
    from ddmrl.io import read_json
    from ddmrl.models.checkpoint import POINTER, checkpoint_digest, write_pointer

    model = make_model(max_positions=8)
    save_checkpoint(model, tok, tmp_path / "weights")
    write_pointer(tmp_path / "base", {"kind": "hf_masked_lm", "path_or_id": str(tmp_path / "weights")})
    loaded, tok2 = load_checkpoint(tmp_path / "base")  # the adapter of a generic masked LM, the weights elsewhere
    x = torch.randint(0, len(tok), (2, 8), generator=torch.Generator().manual_seed(1))
    assert torch.equal(model(x).logits, loaded(x).logits) and tok2.mask_token_id == tok.mask_token_id
    save_checkpoint(loaded, tok2, tmp_path / "trained")
    pointer = read_json(tmp_path / "trained" / POINTER)
    assert pointer["kind"] == "hf_masked_lm" and pointer["path_or_id"] == ""  # "": the weights are next to it
    again, _ = load_checkpoint(tmp_path / "trained")
    assert torch.equal(again(x).logits, model(x).logits)
    save_checkpoint(loaded, tok2, tmp_path / "trained2")
    assert checkpoint_digest(tmp_path / "trained") != checkpoint_digest(tmp_path / "trained2"), "a new save, a new id"
    assert checkpoint_digest(tmp_path / "weights") == checkpoint_digest(tmp_path / "weights")
