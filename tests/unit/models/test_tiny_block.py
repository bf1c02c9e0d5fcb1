"""TinyBlockDDM (``ddmrl.models.tiny_block``): TinyDDM's transformer under the caller's attention mask with an exact
KV cache; its block-diffusion pre-training / SFT loss (``ddmrl.training.mdm`` with ``block_length``); the config's
checks of a block model's samplers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from float_error import forward_passes_agree

from ddmrl import config
from ddmrl.config import ConfigError
from ddmrl.likelihood.block import sequence_logits
from ddmrl.models.checkpoint import load_checkpoint, save_checkpoint
from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM
from ddmrl.models.tiny_block import TinyBlockDDMConfig, TinyBlockDDMForMaskedLM, from_tiny
from ddmrl.training.mdm import mdm_loss

ARCH = dict(vocab_size=12, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_position_embeddings=16)


@pytest.mark.parametrize("pe", ["learned", "rope"])
def test_without_a_mask_it_is_tinyddm(pe):
    torch.manual_seed(0)
    plain = TinyDDMForMaskedLM(TinyDDMConfig(**ARCH, position_embedding=pe)).eval()
    x = torch.randint(0, 12, (2, 9))
    # from_tiny: the same modules and names (a TinyDDM checkpoint loads); two codes of one network, tolerance from
    # float32's error (tests/float_error.py)
    forward_passes_agree("the logits", lambda m: (from_tiny(m)(x).logits, m(x).logits), plain, x.shape[1])


def test_cache_grows_by_appending_and_saves_round_trip(tmp_path, tok):
    torch.manual_seed(0)
    model = TinyBlockDDMForMaskedLM(TinyBlockDDMConfig(**{**ARCH, "vocab_size": len(tok)}, block_size=2)).eval()
    x = torch.randint(0, len(tok), (2, 6))
    causal = torch.ones(6, 6).tril().bool().expand(2, 6, 6)

    def run(m):  # the tail with the cache of the head, and the whole sequence at once
        out = m(x[:, :4], attention_mask=causal[:, :4, :4], use_cache=True)
        tail = m(x[:, 4:], attention_mask=causal[:, 4:], past_key_values=out.past_key_values).logits
        return tail, m(x, attention_mask=causal).logits[:, 4:]

    # two forward passes in other shapes: tolerance from float32's error (tests/float_error.py), the float64 copy's
    # logits agree to 1e-10 of the largest |logit| S, each float32 pass within n eps32 S of its float64 logits
    forward_passes_agree("the tail's logits", run, model, x.shape[1])
    full = model(x, attention_mask=causal).logits
    out = model(x[:, :4], attention_mask=causal[:, :4, :4], use_cache=True)
    assert out.past_key_values[0][0].shape[2] == 4
    save_checkpoint(model, tok, tmp_path / "m")
    loaded, _ = load_checkpoint(tmp_path / "m")
    assert isinstance(loaded, TinyBlockDDMForMaskedLM) and loaded.config.block_size == 2
    assert torch.equal(loaded(x, attention_mask=causal).logits, full), "the same weights and code: bit for bit"


def test_block_loss_reads_the_noised_blocks_against_clean_context():
    """The ELBO with the block input: finite, differentiable, and a prompt's positions never carry loss."""
    torch.manual_seed(0)
    model = TinyBlockDDMForMaskedLM(TinyBlockDDMConfig(**ARCH)).train()
    x = torch.randint(4, 12, (3, 10))
    maskable = torch.zeros_like(x, dtype=torch.bool)
    maskable[:, 4:] = True
    fn = lambda noised, clean: sequence_logits(model, noised, clean, 4, block_length=3)  # noqa: E731
    loss = mdm_loss(model, x, maskable, 0, torch.Generator().manual_seed(0), logits_fn=fn)
    loss.backward()
    assert torch.isfinite(loss) and model.tok.weight.grad.abs().sum() > 0


def load(tmp_path, overlay: dict):
    """params.yaml with each top-level section of ``overlay`` updated (its keys replaced whole)."""
    path = tmp_path / "p.yaml"
    raw = yaml.safe_load((Path(__file__).resolve().parents[3] / "params.yaml").read_text())
    for key, value in overlay.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    path.write_text(yaml.safe_dump(raw))
    return config.load(path)


BLOCK = {"name": "block", "block_length": 4, "kv_cache": "none"}


def test_config_ties_a_block_model_to_the_block_sampler(tmp_path):
    ok = {"model": {"kind": "tiny_block"}, "rollout": {"sampler": BLOCK}, "evaluate": {"sampler": BLOCK},
          "grpo": {"sampler": BLOCK}}  # fmt: skip
    cfg = load(tmp_path, ok)
    assert cfg.model.kind == "tiny_block" and not cfg.model.pretrained
    assert all(cfg.methods[m].sampler.name == "block" for m in cfg.grpo.methods)
    with pytest.raises(ConfigError, match="evaluate.sampler"):
        load(tmp_path, {**ok, "evaluate": {"sampler": {"name": "llada"}}})
    with pytest.raises(ConfigError, match="block_size"):
        load(tmp_path, {**ok, "model": {"kind": "tiny_block", "block_size": 8}})
    with pytest.raises(ConfigError, match="remasking"):
        load(tmp_path, {**ok, "grpo": {"sampler": {**BLOCK, "remasking": "random"}}})
    with pytest.raises(ConfigError, match="parallel"):
        load(tmp_path, {**ok, "grpo": {"sampler": {**BLOCK, "parallel": "factor"}}})
