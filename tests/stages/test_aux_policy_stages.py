"""The auxiliary-policy methods end to end through the pipeline's own stages: on the smoke profile with the extended
profile's learned unmasking policy as the text method and its Co-GRPO as the image method, the exact commands the
DAG builds from the base models to the evaluations. The runs save their policy with the model, and the evaluations
sample with it (the unmasking policy's beside the confidence heuristics). Run in a temporary copy of the repository
(as tests/stages/test_kill_and_resume.py)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ddmrl import config
from ddmrl.aux_policies import load_aux_policy
from ddmrl.pipeline import dag

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

TEXT, IMAGE = "unmask_policy_sudoku4_s0", "cogrpo_geneval_mini_s0"
STAGES = ("download", "sft", f"grpo_{TEXT}", f"evaluate_{TEXT}", "download_image", f"grpo_{IMAGE}",
          f"evaluate_{IMAGE}")  # fmt: skip
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("aux")
    for name in ("workflow", "stages", "profiles"):
        shutil.copytree(REPO / name, ws / name)
    smoke = yaml.safe_load((ws / "profiles" / "smoke.yaml").read_text())
    extended = yaml.safe_load((ws / "profiles" / "extended.yaml").read_text())  # its rows at the smoke sizes
    smoke["grpo"]["methods"] = ["unmask_policy"]
    smoke["methods"] = {"unmask_policy": extended["methods"]["unmask_policy"]}
    smoke["image"]["methods"] = ["cogrpo"]
    smoke["image"]["method_overrides"] = {"cogrpo": extended["image"]["method_overrides"]["cogrpo"]}
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


def test_the_runs_save_their_policy_with_the_model(workspace):
    for run, kind in ((TEXT, "unmasking"), (IMAGE, "schedule")):
        policy = load_aux_policy(workspace / "data" / "grpo" / run / "model")
        assert policy is not None and policy.kind == kind
        curve = (workspace / "data" / "grpo" / run / "curve.csv").read_text().splitlines()
        assert "aux_loss" in curve[0] and len(curve) > 1


def test_the_evaluations_sample_with_the_policy(workspace):
    text = json.loads((workspace / "data" / "evaluate" / TEXT / "sudoku4.json").read_text())
    assert text["nfe_per_sample"] > 0
    assert set(text["heuristics"]) and all("accuracy" in h for h in text["heuristics"].values())
    records = (workspace / "data" / "evaluate" / TEXT / "sudoku4.jsonl").read_text().splitlines()
    assert all("heuristics" in json.loads(r) for r in records)
    image = workspace / "data" / "evaluate" / IMAGE
    assert json.loads((image / "geneval_mini.json").read_text())["accuracy"] >= 0
    assert (image / "geneval_mini_results.jsonl").read_text().strip()
