"""The auxiliary-policy methods end to end through the pipeline's own stages: on the smoke profile with the extended
profile's learned unmasking policy as the text method and its Co-GRPO as the image method, the exact commands the
DAG builds from the base models to the evaluations. The runs save their policy with the model, and the evaluations
sample with it (the unmasking policy's beside the confidence heuristics). Run in a temporary copy of the repository
(as tests/stages/test_kill_and_resume.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from smoke_stages import run_smoke_stages

from ddmrl.aux_policies.base import load_aux_policy

pytestmark = pytest.mark.slow

TEXT, IMAGE = "unmask_policy_sudoku4_s0", "cogrpo_geneval_mini_s0"
STAGES = ("download", "sft", f"grpo_{TEXT}", f"evaluate_{TEXT}", "download_image", f"grpo_{IMAGE}",
          f"evaluate_{IMAGE}")  # fmt: skip


def extended_rows(smoke: dict, extended: dict) -> None:  # the extended profile's rows at the smoke sizes
    smoke["grpo"]["methods"] = ["unmask_policy"]
    smoke["methods"] = {"unmask_policy": extended["methods"]["unmask_policy"]}
    smoke["image"]["methods"] = ["cogrpo"]
    smoke["image"]["method_overrides"] = {"cogrpo": extended["image"]["method_overrides"]["cogrpo"]}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return run_smoke_stages(tmp_path_factory.mktemp("aux"), extended_rows, STAGES)


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
