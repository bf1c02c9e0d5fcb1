"""The grpo stage plans itself when ``launch.gpu_memory_gib`` is set, and a run that cannot fit stops before any work
with one line (exit 2); ``ddmrl.plan`` is tested in tests/unit/test_plan.py."""

from __future__ import annotations

import shlex
import subprocess
import sys

import yaml
from smoke_stages import ENV, run_smoke_stages

from ddmrl import config
from ddmrl.pipeline import dag


def booked_on(gib: float):
    def edit(smoke: dict, _extended: dict) -> None:
        smoke.setdefault("grpo", {}).setdefault("launch", {})["gpu_memory_gib"] = gib

    return edit


def test_a_grpo_run_that_does_not_fit_its_gpu_stops_with_one_line(tmp_path):
    ws = run_smoke_stages(tmp_path, booked_on(1e-6), ["download", "sft"])
    stage = next(s for s in dag.build(config.load(ws / "params.yaml")) if s.name.startswith("grpo_"))
    out = subprocess.run(
        [sys.executable, *shlex.split(stage.cmd)[1:]], cwd=ws, capture_output=True, text=True, env=ENV, timeout=300
    )
    assert out.returncode == 2, out.stderr[-2000:]
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith("error: launch.gpu_memory_gib = 1e-06: grpo needs ") and "GiB per GPU" in line, line
    assert not any((ws / "data" / "grpo").glob("*/model")), "a refused run wrote a model"
    assert yaml.safe_load((ws / "profiles" / "smoke.yaml").read_text())["grpo"]["launch"]["gpu_memory_gib"] == 1e-6
