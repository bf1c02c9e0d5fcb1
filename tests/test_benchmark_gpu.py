"""benchmarks/gpu/check.py's dry run: the whole GPU check (planner, sampler variants, GRPO phases, the report) on a
tiny LLaDA config on the CPU, with the real ``LLaDAModelLM`` from shared/reference/mmada. What the GPU run measured
is in benchmarks/gpu/README.md; speed is never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from real_models import REFERENCE, needs_reference

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "check.py"


@needs_reference
def test_the_gpu_check_runs_end_to_end_on_a_tiny_config(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--model-code", str(REFERENCE / "models"), "--out", str(tmp_path), "--dry-run"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    planned = json.loads((tmp_path / "plan.json").read_text())["rows"]
    parts = [r["part"] for r in rows]
    assert parts == ["sampler"] * 10 + ["rollout", "logps", "train", "train"]
    for row, plan in zip(rows, planned, strict=True):
        assert row["name"] == plan["name"] and row["seconds"] > 0
        # the plan (fake tensors) against the same code on real CPU tensors: equal up to LLaDA's cached rotary tables
        assert abs(row["live_bytes"] - plan["bytes"]) <= max(2**20, 0.05 * row["live_bytes"]), row["name"]
    samplers = [r for r in rows if r["part"] == "sampler"]
    assert all(r["nfe"] == r["kwargs"]["steps"] for r in samplers if "threshold" not in r["name"])
    summary = (tmp_path / "summary.md").read_text()
    assert summary.count("\n| sampler |") == 10 and "planned MiB" in summary


def test_the_gpu_check_refuses_a_directory_without_llada_code(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--model-code", str(tmp_path), "--out", str(tmp_path), "--dry-run"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert f"--model-code {tmp_path}: no modeling_llada.py, configuration_llada.py" in proc.stderr
