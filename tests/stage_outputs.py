"""What "the same result" means when a stage runs twice (killed and resumed, or through SLURM): metrics but their
wall-clock keys, curves but their ``time`` column, and weights exactly. Shared by tests/stages/test_kill_and_resume.py
and tests/pipeline/test_slurm.py (``tests/`` is on ``sys.path``, see tests/conftest.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from ddmrl.pipeline import dag

TIMING_KEYS = {"seconds", "timing", "eval_seconds", "time"}


def public(metrics: dict) -> dict:
    """Metrics without wall-clock keys."""
    return {k: v for k, v in metrics.items() if k not in TIMING_KEYS}


def read_curve(path: Path) -> list[dict[str, str]]:
    """Curve rows as written (strings), without the wall-clock ``time`` column."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows, f"{path} is empty"
    return [{k: v for k, v in r.items() if k != "time"} for r in rows]


def steps_present(root: Path) -> list[int]:
    """Steps of the complete checkpoints under ``root`` (a dir ``step-N`` holding a manifest)."""
    try:  # the running stage may rotate or clear them while we look
        return sorted(int(p.name[5:]) for p in root.glob("step-*") if (p / "manifest.json").is_file())
    except FileNotFoundError:
        return []


def assert_same_tensors(a: Path, b: Path) -> None:
    """Two safetensors files hold the same tensors, dtypes and values."""
    ta, tb = load_file(str(a)), load_file(str(b))
    assert ta.keys() == tb.keys(), a
    for k in ta:
        assert ta[k].dtype == tb[k].dtype and torch.equal(ta[k], tb[k]), f"tensor {k} differs ({a.name})"


def assert_same_weights(a: Path, b: Path) -> None:
    """Two model directories hold the same ``model.safetensors``."""
    assert_same_tensors(a / "model.safetensors", b / "model.safetensors")


def assert_same_outputs(ref: Path, ws: Path, st: dag.Stage) -> None:
    """``st``'s outputs in ``ws`` equal those in ``ref``: metrics but timing, curves but time, and every
    ``*.safetensors`` under its directory outputs exactly."""
    for m in st.metrics:
        assert public(json.loads((ws / m).read_text())) == public(json.loads((ref / m).read_text())), m
    for p in st.plots:
        assert read_curve(ws / p) == read_curve(ref / p), p
    for d in st.dir_outs:
        for f in sorted((ref / d).rglob("*.safetensors")):
            assert_same_tensors(ws / f.relative_to(ref), f)
