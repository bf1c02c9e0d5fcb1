"""IGPO end to end through the pipeline's own stages: the smoke profile on the chain task (it has reasoning traces)
with the extended profile's igpo section as the only text method, the exact commands the DAG builds from the base
model to the GRPO run. The run's curve shows the augmenter at work (groups inpainted per rollout batch). Run in a
temporary copy of the repository (as tests/stages/test_aux_policy_stages.py)."""

from __future__ import annotations

import csv
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ddmrl import config
from ddmrl.pipeline import dag

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

RUN = "igpo_chain_s0"
STAGES = ("download", "sft", f"grpo_{RUN}")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("igpo")
    for name in ("workflow", "stages", "profiles"):
        shutil.copytree(REPO / name, ws / name)
    smoke = yaml.safe_load((ws / "profiles" / "smoke.yaml").read_text())
    extended = yaml.safe_load((ws / "profiles" / "extended.yaml").read_text())
    smoke["tasks"] = ["chain"]
    smoke["grpo"]["methods"] = ["igpo"]
    smoke["methods"] = {"igpo": extended["methods"]["igpo"]}
    smoke["image"]["tasks"] = []
    (ws / "profiles" / "smoke.yaml").write_text(yaml.safe_dump(smoke, sort_keys=False))
    raw = yaml.safe_load((REPO / "params.yaml").read_text()) | {"profile": "smoke"}
    (ws / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    by_name = {s.name: s for s in dag.build(config.load(ws / "params.yaml"))}
    for name in STAGES:
        argv = shlex.split(by_name[name].cmd)
        assert argv[0] == "python"
        out = subprocess.run([sys.executable, *argv[1:]], cwd=ws, capture_output=True, text=True, env=ENV, timeout=900)
        assert out.returncode == 0, f"{name} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return ws


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
