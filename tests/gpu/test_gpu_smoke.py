"""GPU smoke test: one rollout batch and one GRPO update on one CUDA device in bf16, at a realistic width.

Skipped where ``torch.cuda.is_available()`` is False. Run on a GPU host (docs/distributed.md):

    pytest -m gpu tests/gpu -s

By default the model is a TinyDDM at LLaDA-8B's hidden width (hidden 4096, 32 heads; feed-forward 11008, where
LLaDA-8B's mlp_hidden_size is 12288; 4 blocks instead of 32, about 0.6 B parameters), trained fully and with LoRA +
gradient checkpointing. With ``DDMRL_GPU_MODEL=/path/to/a/local/LLaDA-8B-Instruct`` (a ``save_pretrained`` directory
with its remote code) the same step runs on that checkpoint with LoRA adapters on q/k/v (d1's setup; the full model
in bf16 does not leave room for AdamW states on one 80 GB GPU). Each case prints the step's wall time, its phases
and the peak GPU memory.
"""

from __future__ import annotations

import math
import os
import time

import pytest
import torch

from ddmrl.config import GRPOConfig, LoraConfig, SamplerConfig
from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.tasks import make_task
from ddmrl.training import distributed as dist
from ddmrl.training.grpo import train_grpo

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

LLADA_MASK = "<|mdm_mask|>"  # LLaDA's mask token (id 126336; LLaDA's generate.py)


def varied_reward(completion: str, example) -> float:
    """A reward that varies across samples (a random or untuned model scores 0 on Sudoku)."""
    return (sum(ord(c) * (i + 1) for i, c in enumerate(completion)) % 101) / 100


def tiny_at_llada_width(tok, max_positions: int) -> TinyDDMForMaskedLM:
    torch.manual_seed(0)
    cfg = TinyDDMConfig(
        vocab_size=len(tok),
        hidden_size=4096,
        num_layers=4,
        num_heads=32,
        intermediate_size=11008,
        max_position_embeddings=max_positions,
        mask_token_id=tok.mask_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    return TinyDDMForMaskedLM(cfg)


def local_llada(path: str):
    """(model, tokenizer) of a local LLaDA-shaped checkpoint, in bf16, with mask/pad tokens set."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    if tok.mask_token_id is None:
        tok.add_special_tokens({"mask_token": LLADA_MASK})
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = AutoModel.from_pretrained(path, trust_remote_code=True, torch_dtype=torch.bfloat16)
    assert tok.mask_token_id < model.config.vocab_size, "the mask token is not in the model's vocabulary"
    return model, tok


def one_step(model, ref, tok, task, lora: LoraConfig, checkpointing: bool) -> None:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    acc = dist.make_accelerator("bf16", 1)
    policy = dist.prepare_model(model, "bf16", checkpointing, lora)
    cfg = GRPOConfig(
        method="diffu_grpo",
        max_steps=1,
        num_prompts=2,
        num_generations=6,  # d1: 6 completions (one prompt group) per GPU and micro-batch
        num_iterations=1,
        learning_rate=1e-6,
        beta=0.04,
        mixed_precision="bf16",
        gradient_checkpointing=checkpointing,
        lora=lora,
        sampler=SamplerConfig(block_length=4, steps=0, temperature=0.9),
    )
    torch.cuda.reset_peak_memory_stats()
    start = time.time()
    curve, timing = train_grpo(
        policy, ref, tok, task, lambda it: task.generate(2, seed=it), cfg, seed=0, accelerator=acc
    )
    torch.cuda.synchronize()
    seconds, peak = time.time() - start, torch.cuda.max_memory_allocated() / 2**30
    row = curve[0]
    print(
        f"\n[gpu smoke] {type(model).__name__} lora r={lora.r} checkpointing={checkpointing}: {seconds:.1f} s "
        f"(gen {timing.gen:.1f}, old/ref logp {timing.old_ref_logp:.1f}, update {timing.update:.1f}), "
        f"peak {peak:.1f} GiB on {torch.cuda.get_device_name()}; loss {row['loss']:.4g}, kl {row['kl']:.4g}"
    )
    assert math.isfinite(row["loss"]) and math.isfinite(row["kl"]), row
    assert row["step"] == 1


@pytest.mark.parametrize(("lora_r", "checkpointing"), [(0, False), (16, True)])
def test_one_grpo_step_at_llada_width_in_bf16(monkeypatch, lora_r, checkpointing):
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    model = tiny_at_llada_width(tok, task.prompt_length + 1 + task.completion_length)
    ref = None if lora_r else tiny_at_llada_width(tok, model.config.max_position_embeddings).requires_grad_(False)
    one_step(model, ref, tok, task, LoraConfig(r=lora_r, alpha=2.0 * lora_r or 16.0), checkpointing)


@pytest.mark.skipif(not os.environ.get("DDMRL_GPU_MODEL"), reason="set DDMRL_GPU_MODEL to a local LLaDA checkpoint")
def test_one_grpo_step_on_a_local_llada_checkpoint(monkeypatch):
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    model, tok = local_llada(os.environ["DDMRL_GPU_MODEL"])
    lora = LoraConfig(r=128, alpha=64.0, dropout=0.05, target_modules=("q_proj", "k_proj", "v_proj"))
    one_step(model, None, tok, task, lora, checkpointing=True)
