"""A block-diffusion model through the pipeline's own stages: the smoke profile with ``model.kind: tiny_block``
(TinyBlockDDM, blocks of 4) and the block sampler everywhere, the exact commands the DAG builds, from pre-training
to one GRPO run (UniGRPO, two optimiser steps: one rollout batch) and its evaluation. Run in a temporary copy of the
repository (as tests/stages/test_igpo_stage.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from smoke_stages import run_smoke_stages

from ddmrl.models.checkpoint import load_checkpoint
from ddmrl.models.tiny_block import TinyBlockDDMForMaskedLM

pytestmark = pytest.mark.slow

RUN = "unigrpo_sudoku4_s0"
STAGES = ("download", "sft", f"grpo_{RUN}", f"evaluate_{RUN}")
BLOCK = {"name": "block", "block_length": 4, "kv_cache": "none"}


def block_model(smoke: dict, extended: dict) -> None:
    smoke["model"] |= {"kind": "tiny_block", "block_size": 4}
    smoke["download"]["pretrain"] |= {"max_steps": 4, "save_steps": 0}
    smoke["sft"] |= {"max_steps": 2, "save_steps": 0}
    smoke["grpo"] |= {"methods": ["unigrpo"], "max_steps": 2, "save_steps": 0, "sampler": BLOCK}
    smoke["rollout"]["sampler"] = BLOCK
    smoke["evaluate"] |= {"sampler": BLOCK}
    smoke["download"]["num_eval"] = 8
    smoke["image"]["tasks"] = []


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return run_smoke_stages(tmp_path_factory.mktemp("block"), block_model, STAGES)


def test_a_block_model_trains_one_grpo_run_end_to_end(workspace):
    base, _ = load_checkpoint(workspace / "data" / "download" / "base")
    assert isinstance(base, TinyBlockDDMForMaskedLM) and base.config.block_size == 4
    with (workspace / "data" / "grpo" / RUN / "curve.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and float(rows[0]["step"]) == 2
    trained, _ = load_checkpoint(workspace / "data" / "grpo" / RUN / "model")
    assert isinstance(trained, TinyBlockDDMForMaskedLM)
    moved = [n for n, p in trained.named_parameters() if not (p == dict(base.named_parameters())[n]).all()]
    assert moved  # GRPO changed the weights (SFT too, in between)
    metrics = json.loads((workspace / "data" / "evaluate" / RUN / "sudoku4.json").read_text())
    assert metrics["n"] == 8 and 0 <= metrics["accuracy"] <= 100 and metrics["nfe"] > 0
