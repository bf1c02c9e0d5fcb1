"""ddmrl.base_models: the text table over base models of other pre-training seeds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ddmrl.base_models import ENDS, base_model_table, training_reward_table
from ddmrl.config import load
from ddmrl.tables import Scores, gain_interval, row_interval

PARAMS = "tasks: [sudoku4, arith]\ngrpo: {methods: [unigrpo, rebrl], seeds: [0]}\n"


def test_gains_over_base_models_pair_each_run_with_its_own_start_model(tmp_path):
    """Over base models, a row's gain is the mean of its per-base paired gains (d1's pooled Sudoku ratio included);
    a gain that holds on every base model excludes 0, one that flips sign between base models does not."""
    (tmp_path / "params.yaml").write_text(PARAMS)
    cfg = load(tmp_path / "params.yaml")
    rng = np.random.default_rng(0)
    n = 300

    def scores(p: float, order: np.ndarray) -> Scores:
        right = (rng.random((n, 8)) < p).sum(1)  # d1's Sudoku: right cells of 8 empty ones
        return Scores(tuple(f"puzzle{i}" for i in order), right[order].astype(float), np.full(n, 8.0))

    per_base, gains = {}, {}
    for b, (sft, uni, rebrl) in enumerate([(0.40, 0.50, 0.45), (0.30, 0.40, 0.25), (0.50, 0.60, 0.55)]):
        order = rng.permutation(n)  # each evaluation file lists the items in its own order
        per_base[b] = {("base", "sudoku4"): scores(0.25, order), ("sft", "sudoku4"): scores(sft, order)}
        per_base[b] |= {("unigrpo_sudoku4_s0", "sudoku4"): scores(uni, rng.permutation(n))}
        per_base[b] |= {("rebrl_sudoku4_s0", "sudoku4"): scores(rebrl, rng.permutation(n))}
        sft_b = [per_base[b]["sft", "sudoku4"]]
        gains[b] = {m: gain_interval([per_base[b][f"{m}_sudoku4_s0", "sudoku4"]], sft_b) for m in ("unigrpo", "rebrl")}
    table, records = base_model_table(cfg, per_base)  # arith: no scores, no columns

    rows = table.set_index("model")
    assert list(rows.index) == ["base", "SFT", "UniGRPO", "RebRL"]
    assert not any(c.startswith("arith") for c in table.columns)
    assert rows.loc["SFT", "sudoku4: acc per base model"] == " / ".join(
        f"{row_interval([per_base[b]['sft', 'sudoku4']]).estimate:.1f}" for b in range(3)
    )
    over = {r["row"]: r for r in records if r["metric"] == "gain vs sft over base models"}
    for m in ("unigrpo", "rebrl"):
        assert over[m]["estimate"] == pytest.approx(np.mean([g[m].estimate for g in gains.values()]))
        assert over[m]["n_seeds"] == 3
    assert over["unigrpo"]["low"] > 0  # +10 points on every base model
    assert over["rebrl"]["low"] < 0 < over["rebrl"]["high"]  # +5, -5, +5
    assert rows.loc["UniGRPO", "sudoku4: Δ vs start per base model"].count("*") == 3
    assert rows.loc["base", "sudoku4: Δ vs start per base model"] == "—"  # base has no start model


def test_training_reward_table_gives_each_base_models_first_and_last_rollout_batches(tmp_path):
    """Per base model: the mean reward of a run's first and last ENDS rollout batches and its mean fraction of groups
    without reward spread; a task without every seed's run has no columns."""
    (tmp_path / "params.yaml").write_text("tasks: [sudoku4, arith]\ngrpo: {methods: [unigrpo], seeds: [0, 1]}\n")
    cfg = load(tmp_path / "params.yaml")
    curves = {
        "unigrpo_sudoku4_s0": pd.DataFrame(
            {"reward": [0.1] * ENDS + [0.9] * 3 + [0.5] * ENDS, "frac_reward_zero_std": [0.0] * 12 + [0.52]}
        ),
        "unigrpo_sudoku4_s1": pd.DataFrame({"reward": [0.25] * 10, "frac_reward_zero_std": [1.0] * 10}),
        "unigrpo_arith_s0": pd.DataFrame({"reward": [1.0] * 10, "frac_reward_zero_std": [0.0] * 10}),
    }
    table = training_reward_table(cfg, curves).set_index("model")
    assert list(table.columns) == ["sudoku4: reward first→last", "sudoku4: groups without spread"]
    assert table.loc["UniGRPO", "sudoku4: reward first→last"] == "0.10→0.50 / 0.25→0.25"
    assert table.loc["UniGRPO", "sudoku4: groups without spread"] == "4% / 100%"
