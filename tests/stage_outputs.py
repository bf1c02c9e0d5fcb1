"""What "the same result" means when a stage runs twice (killed and resumed, or through SLURM): metrics but their
wall-clock keys, curves but their wall-clock columns (``time``; MAR's ``*_seconds``), tables but their wall-clock
column (``RL wall time per run (s)``), and weights exactly. Shared by tests/stages/test_kill_and_resume.py and
tests/pipeline/test_slurm.py (``tests/`` is on ``sys.path``, see tests/conftest.py); tests/unit/test_stage_outputs.py
checks the wall-clock names against what ddmrl writes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from ddmrl.pipeline import dag

#: metric keys and curve columns that measure wall-clock time (besides every ``*_seconds``)
TIMING_KEYS = {"seconds", "timing", "eval_seconds", "time"}
#: the tables' wall-clock columns (ddmrl.tables: the mean of the runs' last curve ``time``, rounded to seconds)
WALL_CLOCK_COLUMNS = {"RL wall time per run (s)"}


def is_wall_clock(key: str) -> bool:
    """Whether a metric key, curve column or table column is a wall-clock figure (it differs between two runs of the
    same stage: another machine, another load)."""
    return key in TIMING_KEYS or key in WALL_CLOCK_COLUMNS or key.endswith("_seconds")


def public(metrics: dict) -> dict:
    """Metrics without wall-clock keys."""
    return {k: v for k, v in metrics.items() if not is_wall_clock(k)}


def read_curve(path: Path) -> list[dict[str, str]]:
    """Curve rows as written (strings), without the wall-clock columns."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows, f"{path} is empty"
    return [{k: v for k, v in r.items() if not is_wall_clock(k)} for r in rows]


def read_table(path: Path) -> dict[str, dict[str, str]]:
    """A CSV table's rows as written (strings) by their first column (the row label), without the wall-clock
    columns."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows, f"{path} is empty"
    label = next(iter(rows[0]))
    return {r[label]: {k: v for k, v in r.items() if not is_wall_clock(k)} for r in rows}


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
