"""BGPO end to end through the pipeline's own stages: the smoke profile with the extended profile's bgpo section as
the only text method, the exact commands the DAG builds from the base model to the GRPO run. Run in a temporary copy
of the repository (as tests/stages/test_igpo_stage.py)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from smoke_stages import run_smoke_stages

pytestmark = pytest.mark.slow

RUN = "bgpo_sudoku4_s0"
STAGES = ("download", "sft", f"grpo_{RUN}")


def bgpo_only(smoke: dict, extended: dict) -> None:
    smoke["grpo"]["methods"] = ["bgpo"]
    smoke["methods"] = {"bgpo": extended["methods"]["bgpo"]}
    smoke["image"]["tasks"] = []


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return run_smoke_stages(tmp_path_factory.mktemp("bgpo"), bgpo_only, STAGES)


def test_the_run_trains_two_rollout_batches_with_finite_losses_and_no_kl(workspace):
    """Two rollout batches of two optimiser steps (2 views each, one backward pass per view), finite losses, no KL
    (fixed by the method)."""
    with (workspace / "data" / "grpo" / RUN / "curve.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and [int(r["step"]) for r in rows] == [2, 4]
    assert all(math.isfinite(float(r["loss"])) and float(r["kl"]) == 0.0 for r in rows)
    assert (workspace / "data" / "grpo" / RUN / "model").is_dir()
