"""ESPO end to end through the pipeline's own stages: the smoke profile with the extended profile's espo section as
the only text method, the exact commands the DAG builds from the base model to the GRPO run and its evaluation. Run in
a temporary copy of the repository (as tests/stages/test_igpo_stage.py)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from smoke_stages import run_smoke_stages

pytestmark = pytest.mark.slow

RUN = "espo_sudoku4_s0"
STAGES = ("download", "sft", f"grpo_{RUN}")


def espo_only(smoke: dict, extended: dict) -> None:
    smoke["grpo"]["methods"] = ["espo"]
    smoke["methods"] = {"espo": extended["methods"]["espo"]}
    smoke["image"]["tasks"] = []


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return run_smoke_stages(tmp_path_factory.mktemp("espo"), espo_only, STAGES)


def test_the_run_trains_with_finite_losses_and_writes_its_model(workspace):
    """4 optimiser steps, 2 per rollout batch (num_iterations 2), each on its own pair of views; the curve's losses
    are finite and the trained model is written."""
    with (workspace / "data" / "grpo" / RUN / "curve.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    assert all(math.isfinite(float(row["loss"])) and 0 <= float(row["clip_ratio"]) <= 1 for row in rows)
    assert (workspace / "data" / "grpo" / RUN / "model").is_dir()
