"""IGPO end to end through the pipeline's own stages: the smoke profile on the chain task (it has reasoning traces)
with the extended profile's igpo section as the only text method, the exact commands the DAG builds from the base
model to the GRPO run. The run's curve shows the augmenter at work (groups inpainted per rollout batch). Run in a
temporary copy of the repository (as tests/stages/test_aux_policy_stages.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from smoke_stages import run_smoke_stages

pytestmark = pytest.mark.slow

RUN = "igpo_chain_s0"
STAGES = ("download", "sft", f"grpo_{RUN}")


def igpo_on_chain(smoke: dict, extended: dict) -> None:
    smoke["tasks"] = ["chain"]
    smoke["grpo"]["methods"] = ["igpo"]
    smoke["methods"] = {"igpo": extended["methods"]["igpo"]}
    smoke["image"]["tasks"] = []


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return run_smoke_stages(tmp_path_factory.mktemp("igpo"), igpo_on_chain, STAGES)


def test_the_curve_counts_the_augmented_groups_of_every_rollout_batch(workspace):
    """The smoke-sized SFT model gets chain wrong: every rollout batch has all-wrong groups, and the augmenter
    inpaints each of them (chain always has a trace). Its inpainted samples are wrong too at this size, so nothing is
    replaced here (replacement through the loop: tests/unit/training/test_grpo_igpo.py)."""
    with (workspace / "data" / "grpo" / RUN / "curve.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2  # 4 optimiser steps, 2 per rollout batch
    columns = ("augment/all_wrong_groups", "augment/groups", "augment/inpainted_correct", "augment/replaced")
    for row in rows:
        counts = {c: float(row[c]) for c in columns}
        assert counts["augment/groups"] == counts["augment/all_wrong_groups"] > 0, counts
        assert counts["augment/replaced"] <= min(counts["augment/groups"], counts["augment/inpainted_correct"])
    assert (workspace / "data" / "grpo" / RUN / "model").is_dir()
