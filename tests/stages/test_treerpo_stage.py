"""d-TreeRPO end to end through the pipeline's own stages: the smoke profile with the extended profile's treerpo
section as the only text method (G 4: two trees of 2 leaves per prompt), the exact commands the DAG builds from the
base model to the GRPO run (its credit measurement: tests/unit/training/test_treerpo.py). Run in a temporary copy
of the repository (as tests/stages/test_igpo_stage.py)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from smoke_stages import run_smoke_stages

pytestmark = pytest.mark.slow

RUN = "treerpo_sudoku4_s0"
STAGES = ("download", "sft", f"grpo_{RUN}")


def treerpo_only(smoke: dict, extended: dict) -> None:
    smoke["grpo"]["methods"] = ["treerpo"]
    smoke["methods"] = {"treerpo": {**extended["methods"]["treerpo"], "tree_branch_factor": 2}}  # G 4: 2 trees of 2
    smoke["image"]["tasks"] = []


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return run_smoke_stages(tmp_path_factory.mktemp("treerpo"), treerpo_only, STAGES)


def test_the_run_trains_with_finite_losses_and_writes_its_model(workspace):
    """4 optimiser steps, 2 per rollout batch (num_iterations 2), each on both depths of the tree; the curve's
    losses are finite and the trained model is written."""
    with (workspace / "data" / "grpo" / RUN / "curve.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    assert all(math.isfinite(float(row["loss"])) and 0 <= float(row["clip_ratio"]) <= 1 for row in rows)
    assert (workspace / "data" / "grpo" / RUN / "model").is_dir()
