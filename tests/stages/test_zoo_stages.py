"""The methods of DARE's zoo (issue #27), DiPO, GDSD, TraceRL's value model and RLDF (issue #42) end to end through the
pipeline's own stages: the smoke profile with the extended profile's vrpo, espo, bgpo, treerpo, dipo, gdsd,
tracerl_value and rldf sections as its text methods (d-TreeRPO at G 4: two trees of 2 leaves per prompt; GDSD-TLC,
GDSD with other weights, runs through the loop in tests/unit/training/test_gdsd.py), the exact commands the DAG
builds from the base model to each GRPO run, one download and SFT for all. Run in a temporary copy of the repository
(as tests/stages/test_igpo_stage.py)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from smoke_stages import run_smoke_stages

pytestmark = pytest.mark.slow

METHODS = ("vrpo", "espo", "bgpo", "treerpo", "dipo", "gdsd", "tracerl_value", "rldf")
OWN = {"treerpo": {"tree_branch_factor": 2}}  # the smoke profile's G 4


def zoo_only(smoke: dict, extended: dict) -> None:
    smoke["grpo"]["methods"] = list(METHODS)
    smoke["methods"] = {m: {**extended["methods"][m], **OWN.get(m, {})} for m in METHODS}
    smoke["image"]["tasks"] = []


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    stages = ("download", "sft", *(f"grpo_{m}_sudoku4_s0" for m in METHODS))
    return run_smoke_stages(tmp_path_factory.mktemp("zoo"), zoo_only, stages)


def curve(workspace: Path, method: str) -> list[dict[str, str]]:
    with (workspace / "data" / "grpo" / f"{method}_sudoku4_s0" / "curve.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("method", METHODS)
def test_each_run_trains_with_finite_losses_and_writes_its_model(workspace, method):
    """4 optimiser steps, 2 per rollout batch (num_iterations 2): two curve rows, finite losses, the trained model."""
    rows = curve(workspace, method)
    assert [int(r["step"]) for r in rows] == [2, 4]
    assert all(math.isfinite(float(r["loss"])) and 0 <= float(r.get("clip_ratio", 0)) <= 1 for r in rows)
    assert (workspace / "data" / "grpo" / f"{method}_sudoku4_s0" / "model").is_dir()
    # the objective's own terms: no KL or clip column where it has none (SPG, wd1: neither; VRPO: no clip; BGPO: no
    # KL, its recipes fix beta 0), d-TreeRPO's self-distillation loss besides
    terms = {"kl", "clip_ratio"} - {"spg": {"kl", "clip_ratio"}, "wd1": {"kl", "clip_ratio"}, "vrpo": {"clip_ratio"},
                                     "bgpo": {"kl"}}.get(method, set())  # fmt: skip
    terms |= {"self_distillation"} if method == "treerpo" else set()
    terms |= {"rldf/kept"} if method == "rldf" else set()  # the share of a view's masked tokens its filter keeps
    assert terms <= set(rows[0]) and not ({"kl", "clip_ratio", "self_distillation"} - terms) & set(rows[0])


def test_the_value_model_trains_and_is_saved_beside_the_policy(workspace):
    """tracerl_value: the value loss in the curve (0 exactly where no group has reward spread: every return is then
    0, as the zero value head's values), the value model in <model>/value_model/ (the policy's weights with a value
    head of one output), the policy's own files as every run's."""
    from safetensors.torch import load_file

    rows = curve(workspace, "tracerl_value")
    for r in rows:
        loss, spread = float(r["value_loss"]), float(r["frac_reward_zero_std"]) < 1
        assert (loss > 0 if spread else loss == 0) and 0 <= float(r["value_clip_ratio"]) <= 1, r
    model = workspace / "data" / "grpo" / "tracerl_value_sudoku4_s0" / "model"
    value = load_file(str(model / "value_model" / "model.safetensors"))
    policy = load_file(str(model / "model.safetensors"))
    head = [v for k, v in value.items() if k.endswith("lm_head.weight")]
    assert len(head) == 1 and head[0].shape == (1, policy["tok.weight"].shape[1])
    assert {k.removeprefix("trunk.") for k in value} - {"lm_head.weight"} <= set(policy) | {"tok.weight"}
