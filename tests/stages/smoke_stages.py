"""Some of the DAG's stages, run by their exact commands in a copy of the repository on an edited smoke profile
(the stage tests of methods that live in the extended profile)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from ddmrl import config
from ddmrl.pipeline import dag

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run_smoke_stages(
    ws: Path, edit: Callable[[dict, dict], None], stages: Sequence[str], env: dict[str, str] | None = None
) -> Path:
    """Copy the repository's workflow, stages and profiles into ``ws``; ``edit(smoke, extended)`` changes the smoke
    overlay in place (``extended``: the extended profile, whose sections it may take); then run ``stages`` in order
    with the commands the DAG builds for ``profile: smoke``, in the environment ``env`` (default :data:`ENV`). Returns
    ``ws``."""
    for name in ("workflow", "stages", "profiles"):
        shutil.copytree(REPO / name, ws / name)
    smoke = yaml.safe_load((ws / "profiles" / "smoke.yaml").read_text())
    edit(smoke, yaml.safe_load((ws / "profiles" / "extended.yaml").read_text()))
    (ws / "profiles" / "smoke.yaml").write_text(yaml.safe_dump(smoke, sort_keys=False))
    raw = yaml.safe_load((REPO / "params.yaml").read_text()) | {"profile": "smoke"}
    (ws / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    by_name = {s.name: s for s in dag.build(config.load(ws / "params.yaml"))}
    for name in stages:
        argv = shlex.split(by_name[name].cmd)
        assert argv[0] == "python"
        out = subprocess.run(
            [sys.executable, *argv[1:]], cwd=ws, capture_output=True, text=True, env=env or ENV, timeout=900
        )
        assert out.returncode == 0, f"{name} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return ws
