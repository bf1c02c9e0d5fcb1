"""Every text method on Dream (the family x method matrix of docs/families.md): one GRPO rollout batch on a tiny
random instance of the real ``DreamModel``, loaded as ddmrl loads a Dream checkpoint (``load_checkpoint`` of a
pointer: the model seen through ``ddmrl.models.dream.Aligned``), on sudoku4 with a reward that varies across samples.
TRL's test: the loss is finite and every parameter moved. Also: what the view means on Dream (logits aligned, padding
found from the ids) and Dream's own sampler inside the loop."""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import pytest
import torch
from fake_rewards import varied_reward
from float_error import forward_passes_agree
from test_grpo import TEXT, config  # the tiny model's matrix: the same methods, budgets and own keys

from ddmrl.config import SamplerConfig
from ddmrl.models.checkpoint import load_checkpoint, write_pointer
from ddmrl.models.dream import Aligned, raw_logits, shift_logits
from ddmrl.tasks import make_task
from ddmrl.training.grpo import train_grpo

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from real_dream import EOS, dream_checkpoint, needs_dream, tokenizer  # noqa: E402

pytestmark = needs_dream


@pytest.fixture(scope="module")
def dream_dir(tmp_path_factory):
    """A pointer directory to a tiny random Dream checkpoint (kind dream), as the download stage writes one."""
    path = tmp_path_factory.mktemp("hub") / "dream"
    dream_checkpoint(path, tokenizer())
    write_pointer(path, {"kind": "dream", "path_or_id": str(path), "trust_remote_code": True})
    return path


@pytest.fixture
def setup(dream_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    monkeypatch.setattr(task, "prompt_length", 32)  # Dream's test tokenizer has one token per character
    policy, tok = load_checkpoint(dream_dir)
    return task, tok, policy.train(), copy.deepcopy(policy)


def test_loaded_dream_reads_as_every_consumer_expects(setup):
    """Logits at i predict the token at i; a left-padded row (EOS pads) gives the unpadded row's logits."""
    task, tok, policy, _ = setup
    assert isinstance(policy, Aligned)
    x = torch.randint(5, 90, (1, 9), generator=torch.Generator().manual_seed(0))
    raw = raw_logits(policy.model, x)
    assert torch.equal(policy(x).logits, shift_logits(raw))
    padded = torch.cat([torch.full((1, 3), EOS), x], 1)
    # other shapes of one network: tolerance from float32's error (tests/float_error.py)
    run = lambda m: (m(padded).logits[:, 3 + 1 :], m(x).logits[:, 1:])  # noqa: E731
    forward_passes_agree("the padded row's logits", run, policy, padded.shape[1])


@pytest.mark.parametrize("method", TEXT)
def test_every_method_runs_a_grpo_batch_on_dream(setup, method):
    task, tok, policy, ref = setup
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    curve, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=100 + it), config(method), 0)
    assert curve[-1]["step"] == 2 and all(math.isfinite(row["loss"]) for row in curve)
    unchanged = [n for n, p in policy.named_parameters() if torch.equal(p, before[n])]
    assert unchanged == [], f"{method}: parameters that did not move on Dream: {unchanged}"


def test_dreams_own_sampler_runs_in_the_loop(setup):
    task, tok, policy, ref = setup
    sampler = SamplerConfig(name="dream", steps=4, temperature=1.0, kv_cache="none",
                            options={"dream": {"alg": "entropy", "top_p": 0.95}})  # fmt: skip
    curve, _ = train_grpo(
        policy, ref, tok, task, lambda it: task.generate(2, seed=7), config("diffu_grpo", sampler=sampler), 0
    )
    assert math.isfinite(curve[-1]["loss"])


def test_lora_on_the_loaded_dream_saves_a_plain_checkpoint_with_only_its_targets_moved(setup, tmp_path):
    """LoRA through the aligned view: peft finds Dream's projections inside it, and the merged save is a plain Dream
    checkpoint (with its pointer) where the head, embeddings and norms are bit-identical."""
    from safetensors.torch import load_file

    from ddmrl.config import LoraConfig
    from ddmrl.models.dream import LORA_TARGETS
    from ddmrl.training import distributed as dist

    task, tok, policy, _ = setup
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    policy = dist.prepare_model(policy, "no", False, LoraConfig(r=4, alpha=8.0, target_modules=LORA_TARGETS))
    cfg = config("diffu_grpo", lora=LoraConfig(r=4, alpha=8.0, target_modules=LORA_TARGETS))
    acc = dist.make_accelerator("no", 1)
    train_grpo(policy, None, tok, task, lambda it: task.generate(2, seed=3), cfg, 0, accelerator=acc)
    dist.save_policy(acc, policy, tok, tmp_path / "out")
    after = load_file(tmp_path / "out" / "model.safetensors")
    assert set(after) == set(before) and (tmp_path / "out" / "ddmrl_model.json").exists()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all("_proj." in k for k in moved), sorted(moved)
    assert torch.equal(after["lm_head.weight"], before["lm_head.weight"])
    assert torch.equal(after["model.embed_tokens.weight"], before["model.embed_tokens.weight"])
    reloaded, _ = load_checkpoint(tmp_path / "out")
    assert isinstance(reloaded, Aligned)
