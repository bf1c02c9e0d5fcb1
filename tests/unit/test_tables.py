"""The tables' numbers from per-item files: accuracies equal the tasks' own aggregation, intervals come from the
right items (aligned by id, paired across models, stratified by GenEval tag), and the budget and samples columns
come from the curves."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from ddmrl.config import load
from ddmrl.errors import DataError
from ddmrl.geneval import summarize
from ddmrl.tables import (
    IMAGE_COLUMNS,
    Scores,
    at_level,
    credit_summary,
    gain_interval,
    image_scores,
    image_table,
    levels_table,
    lm_eval_long,
    lm_eval_table,
    main_table,
    results_frame,
    row_interval,
    samples_table,
    samples_to_reach,
    stacked,
    text_scores,
    versus_table,
)
from ddmrl.tasks import make_task

PARAMS = """tasks: [sudoku4, arith]
grpo: {methods: [unigrpo, rebrl], seeds: [0, 1], max_steps: 8, num_iterations: 2, num_prompts: 2, num_generations: 2}
image: {tasks: [geneval_mini], methods: [unigrpo, rebrl], seeds: [0]}
"""


@pytest.fixture
def cfg(tmp_path):
    (tmp_path / "params.yaml").write_text(PARAMS)
    return load(tmp_path / "params.yaml")


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sudoku_records(rng, n: int, p: float) -> list[dict]:
    """Evaluation records with d1's Sudoku score fields (8 empty cells, each right with probability p)."""
    out = []
    for i in range(n):
        right = int((rng.random(8) < p).sum())
        out.append({"id": f"puzzle{i}", "correct": right == 8, "cells_correct": right, "cells_empty": 8})
    return out


def arith_records(rng, n: int, p: float) -> list[dict]:
    return [{"id": f"expr{i}", "correct": bool(rng.random() < p)} for i in range(n)]


def curve(steps: int = 8, mu: int = 2, per_batch: int = 4, rewards=None) -> pd.DataFrame:
    batches = steps // mu
    rewards = rewards if rewards is not None else np.linspace(0.1, 0.5, batches)
    return pd.DataFrame({"step": np.arange(1, batches + 1) * mu, "rollout_batch": np.arange(1, batches + 1),
                         "samples": np.arange(1, batches + 1) * per_batch, "reward": rewards, "kl": 0.0,
                         "time": np.arange(1, batches + 1) * 2.0})  # fmt: skip


def test_item_scores_reproduce_each_tasks_accuracy(tmp_path):
    rng = np.random.default_rng(0)
    for name, records in (("sudoku4", sudoku_records(rng, 50, 0.6)), ("arith", arith_records(rng, 50, 0.4))):
        s = text_scores(write_jsonl(tmp_path / f"{name}.jsonl", records), name)
        assert row_interval([s]).estimate == pytest.approx(make_task(name).accuracy(records))


def test_seeds_are_aligned_by_item_id():
    a = Scores(("x", "y", "z"), np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0]))
    b = Scores(("z", "x", "y"), np.array([30.0, 10.0, 20.0]), np.array([6.0, 4.0, 5.0]))
    numer, denom, _ = stacked([a, b])
    assert numer.tolist() == [[1, 2, 3], [10, 20, 30]] and denom.tolist() == [4, 5, 6]
    with pytest.raises(ValueError, match="different held-out items"):
        stacked([a, Scores(("x", "y", "w"), np.zeros(3), np.ones(3))])


def test_paired_gain_is_narrower_than_the_unpaired_difference():
    """Two models that agree on most items: the paired interval of their difference is much narrower than what
    the two separate intervals suggest."""
    rng = np.random.default_rng(1)
    base = (rng.random(400) < 0.5).astype(float) * 100
    better = base.copy()
    better[rng.choice(np.flatnonzero(base == 0), 30, replace=False)] = 100  # 30 items fixed, none broken
    ids = tuple(map(str, range(400)))
    s_base, s_better = Scores(ids, base, np.ones(400)), Scores(ids[::-1], better[::-1], np.ones(400))
    gain = gain_interval([s_better], [s_base])
    assert gain.estimate == pytest.approx(7.5) and gain.excludes_zero()
    widths = [row_interval([s]).high - row_interval([s]).low for s in (s_better, s_base)]
    assert gain.high - gain.low < 0.5 * math.hypot(*widths)  # the unpaired difference's width


def test_main_table_rows_intervals_and_budget(cfg, tmp_path):
    rng = np.random.default_rng(2)
    evals, scores, curves = [], {}, {}
    acc = {"base": 0.3, "sft": 0.5, "unigrpo": 0.6, "rebrl": 0.6}
    models = [("base", "base", None), ("sft", "sft", None)]
    models += [(f"{m}_{t}_s{s}", m, s) for m in ("unigrpo", "rebrl") for t in cfg.tasks for s in (0, 1)]
    for model, label, seed in models:
        for t in cfg.tasks:
            if seed is not None and f"_{t}_" not in model:
                continue
            records = (sudoku_records if t == "sudoku4" else arith_records)(rng, 60, acc[label])
            s = text_scores(write_jsonl(tmp_path / model / f"{t}.jsonl", records), t)
            scores[model, t] = s
            evals.append({"model": model, "task": t, "accuracy": make_task(t).accuracy(records), "mean_reward": 0.5})
            if seed is not None:
                curves[model] = curve()
    frame = results_frame(cfg, evals, curves)
    md, csv, records = main_table(cfg, frame, scores)
    assert list(md["model"]) == ["base", "SFT", "UniGRPO", "RebRL"]
    row = csv.set_index("model").loc["UniGRPO"]
    assert row["seeds"] == 2 and row["rollout batches"] == "4" and row["samples"] == "16"
    assert row["optimiser steps"] == "8"
    for t in cfg.tasks:
        assert row[f"{t} acc low"] <= row[f"{t} acc"] <= row[f"{t} acc high"]
        sft = csv.set_index("model").loc["SFT", f"{t} acc"]
        assert row[f"{t} gain"] == pytest.approx(row[f"{t} acc"] - sft)  # RL rows: against SFT
        assert math.isnan(csv.set_index("model").loc["base", f"{t} gain"])
        assert md.set_index("model").loc["base", f"{t} Δ vs start"] == "—"
    assert {r["n_seeds"] for r in records if r["row"] == "rebrl"} == {2}
    versus, vrecords = versus_table(cfg, frame, scores, cfg.tasks)
    assert list(versus["model"]) == ["RebRL"]
    for t in cfg.tasks:
        want = csv.set_index("model").loc["RebRL", f"{t} acc"] - csv.set_index("model").loc["UniGRPO", f"{t} acc"]
        got = next(r for r in vrecords if r["task"] == t)
        assert got["estimate"] == pytest.approx(want) and got["low"] <= want <= got["high"]


def geneval_rows(rng, p: float) -> list[dict]:
    rows = []
    for i, tag in enumerate(list(IMAGE_COLUMNS) * 3):
        for k in range(4):
            rows.append({"filename": f"/any/model/geneval_mini/{i:05d}/samples/{k:04d}.png", "tag": tag,
                         "correct": bool(rng.random() < p), "metadata": json.dumps({"prompt": str(i)})})  # fmt: skip
    return rows


def test_image_table_overall_is_genevals_and_its_interval_is_stratified(cfg, tmp_path):
    rng = np.random.default_rng(3)
    paths, curves = {}, {}
    for model, p in (("base", 0.2), ("unigrpo_geneval_mini_s0", 0.4), ("rebrl_geneval_mini_s0", 0.4)):
        paths[model] = write_jsonl(tmp_path / model / "geneval_mini_results.jsonl", geneval_rows(rng, p))
        if model != "base":
            curves[model] = curve(rewards=np.array([0.1, 0.2, 0.3, 0.4]) if "uni" in model else np.full(4, 0.5))
    budget = {"steps": 8, "rollout_batches": 4, "samples": 16, "seconds": 1.0}
    frame = pd.DataFrame(
        [{"row": m.split("_geneval")[0], "model": m, "task": "geneval_mini", "seed": 0, **budget} for m in paths]
    )
    scores = {m: image_scores(p) for m, p in paths.items()}
    md, csv, records, goal = image_table(cfg, frame, scores, curves)
    csv = csv.set_index("model")
    for model, label in (("base", "base"), ("unigrpo_geneval_mini_s0", "UniGRPO")):
        assert csv.loc[label, "Overall"] == pytest.approx(summarize(paths[model])["overall"])
    assert goal == pytest.approx(0.3)
    assert csv.loc["RebRL", "samples to UniGRPO's final reward"] == 4  # reward 0.5 from the first batch
    # a slot id is <prompt folder>/<sample>, the same in every model's folder
    assert scores["base"].ids[:2] == ("00000/0000", "00000/0001") and scores["base"].strata[0] == "single_object"


def test_samples_to_reach_and_the_samples_table(cfg):
    c = pd.Series([0.1, 0.3, 0.5, 0.7], index=[4, 8, 12, 16])
    assert samples_to_reach(c, 0.3, window=1) == 8 and math.isnan(samples_to_reach(c, 0.9, window=1))
    curves = {f"unigrpo_sudoku4_s{s}": curve() for s in (0, 1)}
    curves |= {"rebrl_sudoku4_s0": curve(rewards=np.full(4, 0.6)), "rebrl_sudoku4_s1": curve(rewards=np.zeros(4))}
    table = samples_table(cfg, curves).set_index("model")
    assert table.loc["RebRL", "samples per seed"] == "4, —" and table.loc["RebRL", "seeds reaching it"] == "1/2"


def test_credit_summary_reads_the_imbalance():
    frame = pd.DataFrame({"task": "t", "method": "rebrl[none, trajectory]", "reveal_step": [0, 1, 2, 3],
                          "relative_credit": [0.25, 7 / 12, 13 / 12, 25 / 12], "count": 4})  # fmt: skip
    row = credit_summary(frame).iloc[0]
    assert row["last / first"] == pytest.approx(25 / 3, abs=0.01) and row["max / min"] == pytest.approx(8.33, abs=0.01)


def test_with_a_base_model_per_seed_each_gain_is_paired_with_its_own_start_model(tmp_path):
    """``download.base_per_seed``: base and SFT rows hold one model per seed (``sft_s1``: row SFT, seed 1), and a
    run's gain is paired with its own seed's start model. Seeds whose start models differ a lot but whose gains
    agree give a narrow interval over seeds; pooling the start models instead (no pairing by seed) would not."""
    (tmp_path / "params.yaml").write_text(
        "tasks: [sudoku4]\ndownload: {base_per_seed: true}\ngrpo: {methods: [unigrpo], seeds: [0, 1, 2]}\n"
    )
    cfg = load(tmp_path / "params.yaml")
    rng = np.random.default_rng(3)
    evals, scores, sft_acc = [], {}, (0.25, 0.55, 0.85)  # three base models far apart, RL +5 points on each
    for seed, p in enumerate(sft_acc):
        for model, q in ((f"base_s{seed}", p - 0.05), (f"sft_s{seed}", p), (f"unigrpo_sudoku4_s{seed}", p + 0.05)):
            rows = [
                {"id": f"p{i}", "cells_correct": int(c), "cells_empty": 8, "reward": 0.0}
                for i, c in enumerate(np.minimum(8, np.round(8 * q + rng.normal(0, 0.5, 400))))
            ]
            scores[model, "sudoku4"] = text_scores(write_jsonl(tmp_path / model / "sudoku4.jsonl", rows), "sudoku4")
            evals.append({"model": model, "task": "sudoku4", "accuracy": 0.0, "mean_reward": 0.0})
    frame = results_frame(cfg, evals, {})
    assert list(frame["row"]) == ["base", "sft", "unigrpo"] * 3 and list(frame["seed"]) == [0] * 3 + [1] * 3 + [2] * 3
    _, csv, _ = main_table(cfg, frame, scores)
    row = csv.set_index("model").loc["UniGRPO"]
    assert row["seeds"] == 3
    assert row["sudoku4 gain"] == pytest.approx(5.0, abs=0.5) and row["sudoku4 gain low"] > 3.5
    assert csv.set_index("model").loc["SFT", "sudoku4 gain low"] > 3.5  # SFT s against base s
    unpaired = gain_interval(
        [scores[f"unigrpo_sudoku4_s{s}", "sudoku4"] for s in range(3)],
        [scores[f"sft_s{s}", "sudoku4"] for s in range(3)],
    )
    assert unpaired.low < 0 < unpaired.high  # the spread of the base models swamps the gain


def test_lm_evals_metrics_are_a_row_per_model_row_and_a_column_per_task_and_metric(cfg):
    """lm-evaluation-harness's results JSONs: every numeric metric but the standard errors (which go to the long
    frame; lm-eval writes "N/A" where it has none), base and SFT rows, RL rows by method and training task, the mean
    over a row's models with their range."""
    results = {
        "base": {"results": {"arith": {"alias": "arith", "acc,none": 0.5, "acc_stderr,none": 0.05}}},
        "unigrpo_arith_s0": {"results": {"arith": {"acc,none": 0.6, "acc_stderr,none": "N/A"}}},
        "unigrpo_arith_s1": {"results": {"arith": {"acc,none": 0.8, "exact_match,strict-match": 0.25}}},
        "unigrpo_sudoku4_s0": {"results": {"arith": {"acc,none": 0.7}}},
    }
    long = lm_eval_long(cfg, results)
    assert list(long["metric"]) == ["acc", "acc", "acc", "exact_match (strict-match)", "acc"]
    assert long["stderr"].iloc[0] == 0.05 and long["stderr"].iloc[1:].isna().all()
    assert list(long["trained_on"]) == ["", "arith", "arith", "arith", "sudoku4"]
    table = lm_eval_table(long)
    assert list(table["model"]) == ["base", "UniGRPO (RL on arith)", "UniGRPO (RL on sudoku4)"]
    assert list(table["arith acc"]) == ["0.500", "0.700 (0.600-0.800, 2 models)", "0.700"]
    assert table["arith exact_match (strict-match)"].iloc[1] == "0.250"


def test_sampled_columns_and_the_per_level_table(tmp_path):
    """evaluate.sampled_temperature adds a second accuracy and gain per task (from each record's ``sampled``), and
    Sudoku items with a spread of blanks get a line per level: base and SFT accuracy on that level's items, each RL
    row's gain over SFT paired seed by seed. Built so that RL gains 2 cells of 12 on the 12-blank puzzles only
    (+16.7 points there, 0 on the 4-blank ones) and its sampled completions gain 1 cell everywhere."""
    (tmp_path / "params.yaml").write_text(
        "tasks: [sudoku4]\ndownload: {base_per_seed: true}\ngrpo: {methods: [unigrpo], seeds: [0, 1, 2]}\n"
        "evaluate: {sampled_temperature: 1.0}\n"
    )
    cfg = load(tmp_path / "params.yaml")
    ids = [("0" * k + format(i, "x").replace("0", "g"), k) for k in (4, 12) for i in range(150)]  # 4 then 12 blanks
    rng = np.random.default_rng(4)
    evals, greedy, sampled = [], {}, {}
    for seed in range(3):
        right = {i: rng.integers(0, k - 2 if k == 12 else k, endpoint=True) for i, k in ids}  # cells right per item
        for model, plus, hot in ((f"base_s{seed}", 0, 0), (f"sft_s{seed}", 0, 0), (f"unigrpo_sudoku4_s{seed}", 2, 1)):
            rows = []
            for i, k in ids:
                got = right[i] + (plus if k == 12 else 0)
                rows.append({"id": i, "cells_correct": int(got), "cells_empty": k, "reward": 0.0,
                             "sampled": {"cells_correct": int(max(got - 1, 0) + hot), "cells_empty": k}})  # fmt: skip
            path = write_jsonl(tmp_path / model / "sudoku4.jsonl", rows)
            greedy[model, "sudoku4"] = text_scores(path, "sudoku4")
            sampled[model, "sudoku4"] = text_scores(path, "sudoku4", sampled=True)
            evals.append({"model": model, "task": "sudoku4", "accuracy": 0.0, "mean_reward": 0.0})
    frame = results_frame(cfg, evals, {})
    md, csv, _ = main_table(cfg, frame, greedy, sampled)
    row = csv.set_index("model").loc["UniGRPO"]
    assert list(md.columns[1:6]) == ["sudoku4 acc (%)", "sudoku4 Δ vs start", "sudoku4 T=1 acc (%)",
                                     "sudoku4 T=1 Δ vs start", "sudoku4 reward"]  # fmt: skip
    assert row["sudoku4 gain"] == pytest.approx(100 * 2 * 150 / (150 * 16))  # pooled over the cells of both levels
    assert row["sudoku4 T=1 gain"] > row["sudoku4 gain"] and row["sudoku4 T=1 gain low"] > 0
    same, _, _ = main_table(cfg, frame, greedy, greedy)  # the same scores twice: the same cells twice
    assert same["sudoku4 T=1 Δ vs start"].tolist() == same["sudoku4 Δ vs start"].tolist()

    levels, records = levels_table(cfg, frame, greedy, sampled)
    assert list(levels["level"]) == ["4 blanks", "12 blanks"] and list(levels.columns[2:4]) == ["base", "base T=1"]
    gains = {r["metric"]: r for r in records if r["row"] == "unigrpo"}
    assert gains["gain vs sft, 4 blanks"]["estimate"] == pytest.approx(0.0)
    assert gains["gain vs sft, 12 blanks"]["estimate"] == pytest.approx(100 * 2 / 12)
    assert gains["gain vs sft, 12 blanks"]["low"] > 10 and levels.iloc[1]["UniGRPO Δ"].endswith("*")
    sft = np.mean(
        [at_level([greedy[f"sft_s{s}", "sudoku4"]], "sudoku4", "12 blanks")[0].numer.sum() for s in range(3)]
    )
    sft_row = next(r for r in records if r["row"] == "sft" and r["metric"] == "accuracy, 12 blanks")
    assert sft_row["estimate"] == pytest.approx(sft / (150 * 12))
    one_level = {k: Scores(v.ids[:150], v.numer[:150], v.denom[:150]) for k, v in greedy.items()}
    assert levels_table(cfg, frame, one_level)[1] == []
    with pytest.raises(DataError, match="sampled"):
        text_scores(write_jsonl(tmp_path / "greedy_only.jsonl", [{"id": "x", "cells_correct": 1}]), "sudoku4", True)
