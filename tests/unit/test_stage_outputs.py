"""tests/stage_outputs.py's "the same result" (what the kill-and-resume and SLURM tests compare) on files as ddmrl
writes them: tables and curves that differ only in their wall-clock figures compare equal, and a difference in a
result still shows."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
from stage_outputs import WALL_CLOCK_COLUMNS, public, read_curve, read_table

from ddmrl.cli import write_csv
from ddmrl.config import load
from ddmrl.tables import main_table, results_frame, text_scores

REPO = Path(__file__).resolve().parents[2]
PARAMS = """tasks: [arith]
grpo: {methods: [unigrpo], seeds: [0], max_steps: 8, num_iterations: 2, num_prompts: 2, num_generations: 2}
"""


def text_table(root: Path, seconds: float, per_batch: int = 4) -> Path:
    """``text_table.csv`` as the tables stage writes it (``ddmrl.tables.main_table``, ``ddmrl.cli.write_csv``) for
    base, SFT and one UniGRPO run of 4 rollout batches of ``per_batch`` samples, ``seconds`` each."""
    root.mkdir(parents=True)
    (root / "params.yaml").write_text(PARAMS)
    cfg = load(root / "params.yaml")
    rng = np.random.default_rng(0)  # the same held-out results in every call
    evals, scores = [], {}
    for model, p in (("base", 0.3), ("sft", 0.5), ("unigrpo_arith_s0", 0.6)):
        records = [{"id": f"expr{i}", "correct": bool(rng.random() < p)} for i in range(40)]
        path = root / model / "arith.jsonl"
        path.parent.mkdir()
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        scores[model, "arith"] = text_scores(path, "arith")
        evals.append({"model": model, "task": "arith", "accuracy": 100 * np.mean([r["correct"] for r in records]),
                      "mean_reward": p})  # fmt: skip
    batches = np.arange(1, 5)
    curve = pd.DataFrame({"step": 2 * batches, "rollout_batch": batches, "samples": per_batch * batches,
                          "reward": 0.1 * batches, "kl": 0.0, "time": seconds * batches})  # fmt: skip
    _, table, _ = main_table(cfg, results_frame(cfg, evals, {"unigrpo_arith_s0": curve}), scores)
    write_csv(root / "text_table.csv", table)
    return root / "text_table.csv"


def test_tables_that_differ_only_in_wall_time_are_the_same_result(tmp_path):
    local, slurm = text_table(tmp_path / "local", seconds=0.3), text_table(tmp_path / "slurm", seconds=0.1)
    with open(local, newline="") as f:
        header, *rows = list(csv.reader(f))
    wall = header.index("RL wall time per run (s)")
    assert rows[-1][0] == "UniGRPO" and rows[-1][wall] == "1"  # 4 x 0.3 s, where the other run took 4 x 0.1 s: 0 s
    assert local.read_text() != slurm.read_text()
    assert read_table(local) == read_table(slurm)
    assert list(read_table(local)) == ["base", "SFT", "UniGRPO"]
    assert all(set(header) - set(row) == WALL_CLOCK_COLUMNS for row in read_table(local).values())
    # a result that differs (the samples each rollout batch drew) still shows
    assert read_table(text_table(tmp_path / "other", seconds=0.3, per_batch=8)) != read_table(local)


def test_the_committed_tables_lose_only_their_wall_clock_column():
    """The main job's tables (docs/main_job/, copied from its data/tables/): every row, every column but the wall
    time per run."""
    for name in ("text_table.csv", "image_table.csv"):
        path = REPO / "docs" / "main_job" / name
        with open(path, newline="") as f:
            header, *rows = list(csv.reader(f))
        table = read_table(path)
        assert list(table) == [r[0] for r in rows], name
        assert all(set(header) - set(row) == WALL_CLOCK_COLUMNS for row in table.values()), name


def test_curves_and_metrics_lose_only_their_wall_clock_figures(tmp_path):
    """A GRPO curve's ``time``, a MAR GRPO curve's phase seconds, an evaluation's ``eval_seconds``."""
    path = tmp_path / "curve.csv"
    write_csv(path, [{"step": 2, "reward": 0.5, "rollout_seconds": 1.5, "update_seconds": 0.25, "time": 1.75}])
    assert read_curve(path) == [{"step": "2", "reward": "0.5"}]
    assert public({"accuracy": 50.0, "eval_seconds": 3.2, "seconds": 9.0}) == {"accuracy": 50.0}
