"""LoRA target selection (ddmrl.models.lora) and the ``lora.target_modules`` forms, on TinyDDM (the real LLaDA's
names and the paper profiles' targets: test_real_classes.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ddmrl.config import ConfigError, LoraConfig
from ddmrl.models.lora import lora_targets, peft_target_modules, protected_modules
from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def model():
    cfg = TinyDDMConfig(vocab_size=12, hidden_size=8, num_layers=2, num_heads=2, intermediate_size=16,
                        max_position_embeddings=8)  # fmt: skip
    return TinyDDMForMaskedLM(cfg)


def test_target_modules_take_names_or_one_regular_expression():
    assert LoraConfig(target_modules=["qkv", "proj"]).target_modules == ("qkv", "proj")
    assert LoraConfig(target_modules=r".*\.blocks\.\d+\.qkv").target_modules == r".*\.blocks\.\d+\.qkv"
    with pytest.raises(ConfigError, match=r"target_modules = '\(qkv': not a regular expression") as e:
        LoraConfig(target_modules="(qkv")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="target_modules = 3: must be a list of module names or one regular"):
        LoraConfig(target_modules=3)


def test_the_paper_profiles_target_every_block_projection_by_full_name():
    for name, keys in (("paper_llada_math", ("grpo",)), ("paper_mmada_geneval", ("image", "grpo"))):
        section = yaml.safe_load((REPO / "profiles" / f"{name}.yaml").read_text())
        for key in keys:
            section = section[key]
        targets = LoraConfig(**section["lora"]).target_modules
        assert isinstance(targets, str), name
        for p in ("q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out"):
            assert re.fullmatch(targets, f"model.transformer.blocks.31.{p}"), (name, p)
        for other in ("model.transformer.ff_out", "model.transformer.wte", "model.transformer.blocks.0.attn_norm"):
            assert not re.fullmatch(targets, other), (name, other)


def test_targets_follow_peft_matching(model):
    assert protected_modules(model) == {"tok": "embedding tok (12 x 8)", "pos": "embedding pos (8 x 8)",
                                        "lm_head": "output head lm_head (12 x 8)"}  # fmt: skip
    assert lora_targets(model, ("qkv",)) == ["blocks.0.qkv", "blocks.1.qkv"]
    assert lora_targets(model, r"blocks\.1\.(qkv|proj)") == ["blocks.1.qkv", "blocks.1.proj"]  # full names only
    assert lora_targets(model, r"qkv") == []
    linear = lora_targets(model, ("all-linear",))
    assert "lm_head" not in linear and {"blocks.0.qkv", "blocks.0.ff.0", "blocks.1.ff.2"} <= set(linear)
    assert peft_target_modules(model, ("all-linear",)) == "all-linear"
    assert peft_target_modules(model, ("qkv", "proj")) == ["qkv", "proj"]


def test_a_target_reaching_the_head_or_an_embedding_is_refused_unless_named_in_full(model):
    with pytest.raises(ConfigError, match=r"also selects the output head lm_head \(12 x 8\)") as e:
        peft_target_modules(model, r".*(qkv|head)")
    assert str(e.value).startswith("lora.target_modules = '.*(qkv|head)':") and "\n" not in str(e.value)
    assert peft_target_modules(model, ("qkv", "lm_head")) == ["qkv", "lm_head"], "the head's full name: meant"
    with pytest.raises(ConfigError, match=r"also selects the embedding tok \(12 x 8\)"):
        peft_target_modules(model, r"(tok|blocks\.\d+\.qkv)")
    with pytest.raises(ConfigError, match="selects no module of TinyDDMForMaskedLM"):
        peft_target_modules(model, r"qkv")
