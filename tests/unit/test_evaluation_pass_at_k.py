"""pass@k of a text task (ddmrl.evaluation.pass_at_k, evaluate.pass_at_k) and its table (ddmrl.tables); the one
sampled decoding per item beside the greedy one (ddmrl.evaluation.with_sampled, evaluate.sampled_temperature)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ddmrl import stats
from ddmrl.config import Config, PassAtKConfig, SamplerConfig
from ddmrl.evaluation import evaluate, pass_at_k, with_sampled
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.tables import pass_at_k_table
from ddmrl.tasks import make_task
from ddmrl.tasks.encoding import prompt_length


@pytest.fixture(scope="module")
def task():
    return make_task("sudoku4")


def test_counts_come_from_n_samples_per_item_judged_by_the_task(task, make_model, monkeypatch):
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    model = make_model(max_positions=prompt_length(task) + task.completion_length, tokenizer=tok)
    held_out = task.held_out(5, seed=0)
    seen = []
    # a verdict that varies with the text: some samples correct, some not
    monkeypatch.setattr(task, "score", lambda text, ex: seen.append(text) or {"correct": sum(map(ord, text)) % 3 == 0})
    cfg = PassAtKConfig(n=4, k=(1, 2, 4))
    sampler = SamplerConfig(block_length=4, steps=4, temperature=0.0)  # greedy in evaluation: replaced by 1.0
    out = pass_at_k(model, tok, task, held_out, sampler, cfg, batch_size=8, seed=0)
    assert len(seen) == 4 * 5 and out["ids"] == [ex.id for ex in held_out] and out["n"] == 4
    counts = np.array(out["correct_counts"])
    assert counts.sum() == sum(sum(map(ord, t)) % 3 == 0 for t in seen)
    for k in (1, 2, 4):
        assert out["pass_at"][str(k)] == pytest.approx(100 * stats.pass_at_k(4, counts, k).mean())
    assert len(set(seen)) > 5, "sampled at temperature 1: the samples of an item differ"
    again = pass_at_k(model, tok, task, held_out, sampler, cfg, batch_size=3, seed=0)
    assert again["correct_counts"] != [] and again["pass_at"]["4"] >= again["pass_at"]["1"]


def test_the_table_pools_seeds_and_refuses_different_items(tmp_path):
    cfg = Config(tasks=("sudoku4",), evaluate={"pass_at_k": {"n": 4, "k": (1, 4)}})
    frame = pd.DataFrame({"row": ["base", "base"], "model": ["base", "base"], "task": ["sudoku4"] * 2})
    evals = [{"model": "base", "task": "sudoku4",
              "pass_at_k": {"n": 4, "ids": ["a", "b"], "correct_counts": [0, 4]}}]  # fmt: skip
    table, records = pass_at_k_table(cfg, frame.iloc[:1], evals)
    assert list(table.columns) == ["model", "sudoku4 pass@1 (%)", "sudoku4 pass@4 (%)"]
    assert table.iloc[0]["sudoku4 pass@1 (%)"].startswith("50.0") and records[0]["metric"] == "pass@1"
    # two seeds of a method: pooled (the mean of both seeds' item means); different items are refused
    cfg = Config(tasks=("sudoku4",), grpo={"methods": ["diffu_grpo"]}, evaluate={"pass_at_k": {"n": 4, "k": (1,)}})
    frame = pd.DataFrame({"row": ["diffu_grpo"] * 2, "model": ["r0", "r1"], "task": ["sudoku4"] * 2})
    runs = [{"model": m, "task": "sudoku4", "pass_at_k": {"n": 4, "ids": ["a", "b"], "correct_counts": c}}
            for m, c in (("r0", [1, 1]), ("r1", [3, 3]))]  # fmt: skip
    table, _ = pass_at_k_table(cfg, frame, runs)
    assert table.iloc[0]["sudoku4 pass@1 (%)"].startswith("50.0")
    runs[1]["pass_at_k"]["ids"] = ["a", "c"]
    with pytest.raises(ValueError, match="different held-out items"):
        pass_at_k_table(cfg, frame, runs)


def test_sampled_decoding_beside_the_greedy_one(task, make_model):
    """evaluate.sampled_temperature: every item decoded once more at that temperature, the same draws for every
    call with the same seed. At temperature 0 it is greedy decoding again: the identity that pins the plumbing."""
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    model = make_model(max_positions=prompt_length(task) + task.completion_length, tokenizer=tok)
    held_out = task.held_out(6, seed=0)
    sampler = SamplerConfig(block_length=4, steps=4, temperature=0.0)
    metrics, records = evaluate(model, tok, task, held_out, sampler, batch_size=4, seed=0)
    same, again = (with_sampled(model, tok, task, held_out, sampler, t, 4, 0, metrics, records) for t in (0.0, 0.0))
    assert same == again and same[0]["sampled"]["accuracy"] == metrics["accuracy"]
    assert [r["sampled"]["generation"] for r in same[1]] == [r["generation"] for r in records]
    hot, hot_records = with_sampled(model, tok, task, held_out, sampler, 1.0, 4, 0, metrics, records)
    assert hot["sampled"]["temperature"] == 1.0 and hot["accuracy"] == metrics["accuracy"]
    assert [r["sampled"]["generation"] for r in hot_records] != [r["generation"] for r in records]
    assert hot_records == with_sampled(model, tok, task, held_out, sampler, 1.0, 4, 0, metrics, records)[1]
    cells = sum(r["sampled"]["cells_correct"] for r in hot_records) / sum(r["cells_empty"] for r in records)
    assert hot["sampled"]["accuracy"] == pytest.approx(100 * cells)
    assert {"id", "question"}.isdisjoint(hot_records[0]["sampled"]) and "reward" in hot_records[0]["sampled"]
