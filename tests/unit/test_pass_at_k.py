"""pass@k (``ddmrl.stats.pass_at_k``, ``ddmrl.evaluation.pass_at_k_metrics``): Chen et al. 2021's unbiased
estimator against its definition (a random k-subset of the n samples holds a correct one), and the evaluation's
per-prompt counts on a tiny model (the block sampler's and the llada sampler's alike)."""

from __future__ import annotations

import doctest
import itertools
from pathlib import Path

import pytest
import torch

from ddmrl import config, stats
from ddmrl.config import ConfigError, EvaluateConfig, SamplerConfig, run_name
from ddmrl.evaluation import pass_at_k_metrics
from ddmrl.models import build_tokenizer
from ddmrl.models.tiny_block import from_tiny
from ddmrl.rollout import rollout
from ddmrl.stats import pass_at_k
from ddmrl.tables import display, pass_at_k_table
from ddmrl.tasks import make_task


def test_doctest():
    assert doctest.testmod(stats, verbose=False).failed == 0


@pytest.mark.parametrize("n", [1, 3, 6])
def test_estimator_is_the_subset_probability(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            exact = sum(any(i < c for i in s) for s in subsets) / len(subsets)  # samples 0..c-1 are correct
            assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_refusals():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ConfigError, match="pass_at_k"):
        EvaluateConfig(pass_at_k=(1, 32), pass_at_k_samples=16)


@pytest.mark.parametrize("name", ["llada", "block"])
def test_metrics_count_correct_samples_per_prompt(make_model, monkeypatch, name):
    task = make_task("sudoku4")
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    model = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    model = from_tiny(model) if name == "block" else model
    monkeypatch.setattr(task, "score", lambda text, ex: {"correct": len(set(text)) % 2 == 0})  # varies by sample
    examples = task.generate(3, seed=0)
    sampler = SamplerConfig(name=name, block_length=4, steps=4)
    got = pass_at_k_metrics(model, tok, task, examples, sampler, (1, 2), 4, 1.0, batch_size=8, seed=0)
    # the same draws: one generator seeded seed + 1, prompts in calls of batch_size // samples
    gen = torch.Generator().manual_seed(1)
    sampled = SamplerConfig(name=name, block_length=4, steps=4, temperature=1.0)
    texts = (
        rollout(model, tok, task, examples[:2], 4, sampled, gen).texts
        + rollout(model, tok, task, examples[2:], 4, sampled, gen).texts
    )
    correct = [sum(len(set(t)) % 2 == 0 for t in texts[4 * i : 4 * i + 4]) for i in range(3)]
    assert got["pass_at_k"]["1"] == pytest.approx(100 * sum(c / 4 for c in correct) / 3)
    assert got["pass_at_k"]["2"] == pytest.approx(100 * sum(pass_at_k(4, c, 2) for c in correct) / 3)
    assert got["pass_at_k_samples"] == 4 and 0 < sum(correct) < 12


def test_table_has_one_column_per_task_and_k():
    cfg = config.load(Path(__file__).resolve().parents[2] / "params.yaml")
    section, task, seed = cfg.runs()[0]
    evals = [
        {"model": "sft", "task": task, "pass_at_k": {"1": 10.0, "4": 30.0}},
        {"model": run_name(section, task, seed), "task": task, "pass_at_k": {"1": 20.0, "4": 50.0}},
        {"model": "base", "task": task, "accuracy": 1.0},  # no pass@k: no row
    ]
    table = pass_at_k_table(cfg, evals)
    assert list(table["model"]) == ["SFT", display(section)]
    assert list(table.columns) == ["model", f"{task} pass@1 (%)", f"{task} pass@4 (%)"]
    assert table.iloc[1][f"{task} pass@4 (%)"] == "50.0"
