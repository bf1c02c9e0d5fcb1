"""GRPO on a block-diffusion model (TinyBlockDDM, blocks of 4) with the block sampler: one rollout batch per method
on sudoku4 (the task's reward replaced by a varied one, as in test_grpo.py). The views' log-probs come from the
[noised | clean] input (``ddmrl.likelihood.block``): checked against a run whose token log-probs are recomputed
block by block. Which methods apply is listed in docs/families.md ("Block diffusion")."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from fake_rewards import varied_reward

from ddmrl.config import ConfigError, GRPOConfig, SamplerConfig, method_config
from ddmrl.diagnostics import token_credit
from ddmrl.likelihood.block import block_token_logps
from ddmrl.models.tiny_block import TinyBlockDDMConfig, TinyBlockDDMForMaskedLM
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.rollout import Rollouts, sampler_kwargs
from ddmrl.tasks import make_task
from ddmrl.training.grpo import logp_guidance, train_grpo

BLOCK = SamplerConfig(name="block", block_length=4, steps=4, temperature=1.0)

#: methods run on the block model here; the others need what it has not (docs/families.md): a stored trajectory
#: (the llada sampler's), a tree of rollouts (d-TreeRPO: the llada sampler's partial states), an auxiliary policy or
#: an augmenter; JustGRPO runs with blocks of one token (below)
APPLY = ["bgpo", "coupled_grpo", "diffu_grpo", "dipo", "ebpo", "espo", "gdpo", "gdsd", "gdsd_tlc", "maskgrpo", "rebrl",
         "spg", "tracerl", "unigrpo", "vrpo", "wd1"]  # fmt: skip


@pytest.fixture
def setup(monkeypatch):
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    torch.manual_seed(0)
    cfg = TinyBlockDDMConfig(
        vocab_size=len(tok), hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
        max_position_embeddings=task.prompt_length + 1 + task.completion_length, mask_token_id=tok.mask_token_id,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, block_size=4,
    )  # fmt: skip
    policy = TinyBlockDDMForMaskedLM(cfg).eval()
    return task, tok, policy, copy.deepcopy(policy)


def config(method: str) -> GRPOConfig:
    base = dict(method=method, max_steps=2, num_prompts=2, num_generations=4, num_iterations=2, learning_rate=1e-2,
                beta=0.04, sampler=BLOCK)  # fmt: skip
    return method_config(method, base)


def test_guidance_names_the_block_length():
    assert logp_guidance(config("unigrpo"), 0) == {"cfg_scale": 0.0, "mask_id": 0, "block_length": 4}


@pytest.mark.parametrize("method", APPLY)
def test_method_takes_a_step_on_a_block_model(setup, method):
    task, tok, policy, ref = setup
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    curve, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=100 + it), config(method), 0)
    assert curve[-1]["step"] == 2 and all(math.isfinite(row["loss"]) for row in curve)
    unchanged = [n for n, p in policy.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert unchanged == [], f"{method}: parameters that did not move: {unchanged}"


def test_the_loop_reads_views_through_the_block_input(setup, monkeypatch):
    """Every log-prob the loop takes (old, reference, current) goes through ``block_token_logps``."""
    task, tok, policy, ref = setup
    calls = []

    def spy(model, input_ids, completion_ids, *, block_length, **kw):
        calls.append(block_length)
        return block_token_logps(model, input_ids, completion_ids, block_length=block_length, **kw)

    monkeypatch.setattr("ddmrl.likelihood.block_token_logps", spy)
    train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=100 + it), config("unigrpo"), 0)
    assert calls and set(calls) == {4}


@pytest.mark.parametrize("method", ["cj_grpo", "mdpo", "rldf"])
def test_methods_of_stored_trajectories_are_refused(method):
    """Their views are the llada sampler's stored states; the block sampler records none."""
    with pytest.raises(ConfigError, match="stored states"):
        config(method)


def test_credit_diagnostic_reads_views_through_the_block_input(setup, monkeypatch):
    """The credit stage's log-probs (``ddmrl.diagnostics.token_credit``) of a block run come from the block input."""
    task, tok, policy, _ = setup
    calls = []

    def spy(model, input_ids, completion_ids, *, block_length, **kw):
        calls.append(block_length)
        return block_token_logps(model, input_ids, completion_ids, block_length=block_length, **kw)

    monkeypatch.setattr("ddmrl.likelihood.block_token_logps", spy)
    g = torch.Generator().manual_seed(0)
    n, p, length = 4, task.prompt_length, task.completion_length
    reveal = torch.stack([torch.randperm(length, generator=g) // 2 for _ in range(n)])
    batch = Rollouts(torch.randint(5, 10, (n, p), generator=g), torch.randint(5, 10, (n, length), generator=g),
                     torch.ones(n, length, dtype=torch.bool), reveal, [""] * n, 0)  # fmt: skip
    credit = token_credit(policy, config("rebrl"), batch, torch.tensor([1.0, -0.5, 2.0, -1.5]), 7,
                          tok.pad_token_id, tok.mask_token_id)  # fmt: skip
    assert calls and set(calls) == {4} and torch.isfinite(credit).all() and credit.sum() > 0


def test_rollout_keywords_split_the_budget_over_the_blocks():
    """``steps`` in params.yaml is over the completion (0: L / 2); the block sampler's are per block; its own keys
    (``sampler.options.block``) follow with their defaults."""
    kw = sampler_kwargs(SamplerConfig(name="block", block_length=4, parallel="threshold", threshold=0.8), 20)
    assert kw == {"steps": 2, "temperature": 0.0, "cfg_scale": 0.0, "block_length": 4, "parallel": "threshold",
                  "threshold": 0.8, "kv_cache": True, "selection": "lowest_index_first",
                  "softmax_dtype": "float32"}  # fmt: skip
    assert sampler_kwargs(SamplerConfig(name="block", block_length=4, steps=3), 20)["steps"] == 1


def test_justgrpo_runs_left_to_right_on_a_block_model(setup):
    """JustGRPO on block diffusion: blocks of one token, sampled and scored left to right (the exact cache)."""
    task, tok, policy, ref = setup
    sampler = SamplerConfig(name="block", block_length=1, temperature=1.0)
    cfg = method_config("justgrpo", dict(method="justgrpo", max_steps=2, num_prompts=2, num_generations=4,
                                         num_iterations=2, learning_rate=1e-2, sampler=sampler))  # fmt: skip
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    curve, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=100 + it), cfg, 0)
    assert all(math.isfinite(row["loss"]) for row in curve)
    assert all(not torch.equal(p, before[n]) for n, p in policy.named_parameters())
