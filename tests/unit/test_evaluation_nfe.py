"""Model evaluations per sample in held-out evaluation (ddmrl.evaluation.row_nfe), a model evaluated with its
learned unmasking policy, and the comparison with the confidence heuristics on the same items
(ddmrl.evaluation.with_heuristics)."""

from __future__ import annotations

import dataclasses

import torch

from ddmrl.aux_policies.unmasking import UnmaskingPolicy
from ddmrl.config import SamplerConfig
from ddmrl.evaluation import evaluate, row_nfe, unmasking_heuristics, with_heuristics
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.rollout import rollout
from ddmrl.tasks import make_task


def sudoku(make_model):
    task = make_task("sudoku4")
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    return task, tok, make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)


def test_a_fixed_schedule_costs_every_sample_every_pass_and_a_parallel_rule_its_own_steps(make_model):
    task, tok, model = sudoku(make_model)
    examples = task.generate(3, seed=0)
    plain = SamplerConfig(block_length=4, steps=10)
    out = rollout(model, tok, task, examples, 1, plain, torch.Generator().manual_seed(0))
    assert row_nfe(out, plain).tolist() == [10, 10, 10]
    fast = dataclasses.replace(plain, parallel="threshold", threshold=0.05, steps=20)  # commits nearly everything
    out = rollout(model, tok, task, examples, 1, fast, torch.Generator().manual_seed(0))
    own = row_nfe(out, fast)
    distinct = [len(set(r.tolist())) for r in out.reveal_step]
    assert own.tolist() == distinct and all(5 <= n <= out.nfe for n in own.tolist())  # >= one pass per block


def test_the_heuristics_are_d1s_protocol_and_fast_dllms_threshold_rule():
    sampler = SamplerConfig(block_length=4, steps=0, temperature=0.0, threshold=0.8)
    h = unmasking_heuristics(sampler, 20)
    assert h["low_confidence"] == sampler
    assert (h["fast_dllm_threshold"].parallel, h["fast_dllm_threshold"].steps) == ("threshold", 20)
    assert h["fast_dllm_threshold"].threshold == 0.8


def test_a_policy_evaluation_reports_its_own_nfe_and_the_heuristics_on_the_same_items(make_model):
    task, tok, model = sudoku(make_model)
    examples = task.held_out(6, seed=0)
    torch.manual_seed(0)
    policy = UnmaskingPolicy(hidden_size=16, num_heads=2, intermediate_size=32, time_embed_dim=8, init_bias=3.0)
    sampler = SamplerConfig(block_length=4, steps=0, temperature=0.0)
    metrics, records = evaluate(model, tok, task, examples, sampler, 4, seed=0, aux_policy=policy)
    assert not policy.training  # evaluated as deployed
    # init_bias 3: nearly every position is revealed at once, about one step per block of 4 (20 tokens: 5 blocks)
    assert 5 <= metrics["nfe_per_sample"] < 10
    assert metrics["nfe_per_sample"] == sum(r["nfe"] for r in records) / len(records)
    metrics, records = with_heuristics(model, tok, task, examples, sampler, 4, 0, metrics, records)
    low, fast = metrics["heuristics"]["low_confidence"], metrics["heuristics"]["fast_dllm_threshold"]
    assert low["nfe_per_sample"] == 10 and low["sampler"] == {"steps": 0, "parallel": "none", "threshold": 0.9}
    assert 5 <= fast["nfe_per_sample"] <= 20
    plain, _ = evaluate(model, tok, task, examples, sampler, 4, seed=0)
    assert low["accuracy"] == plain["accuracy"]  # the same model under d1's protocol
    for r in records:
        assert set(r["heuristics"]) == {"low_confidence", "fast_dllm_threshold"}
        assert {"generation", "nfe", "reward", "id"} <= set(r["heuristics"]["low_confidence"])
