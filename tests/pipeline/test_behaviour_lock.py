"""The behaviour lock of the extension redesign (issue 23): for every profile, the job set with each job's command
line, artifact deps, params and outputs, and every run's resolved hyperparameters (what its ``config.yaml`` holds),
equal to the fixtures saved before the redesign (``tests/fixtures/behaviour/<profile>.json``).

A deliberate change of behaviour regenerates them: ``DDMRL_UPDATE_BEHAVIOUR=1 pytest tests/pipeline/
test_behaviour_lock.py`` (and says so in the commit). The library files a job runs (its code deps) are left out:
moving code between modules is what the redesign does.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from ddmrl import config
from ddmrl.config import mar_run_name
from ddmrl.pipeline import dag
from ddmrl.training.tracking import plain

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "behaviour"
PROFILES = (
    "tiny",
    "smoke",
    "extended",
    "image",
    "rebrl_ablation",
    "paper_llada_math",
    "paper_mmada_geneval",
    "paper_dream_math",
    "paper_sdar_math",
    "paper_llada2_math",
)


def snapshot(profile: str) -> dict:
    """Every job of ``profile``'s DAG, and every GRPO run's resolved hyperparameters."""
    cfg = config.load(ROOT / "params.yaml", profile)
    jobs = {
        s.name: {
            "kind": s.kind,
            "words": s.words,
            "deps": list(s.deps),
            "params": list(s.params),
            "outputs": list(s.outputs),
            "resources": [list(r) for r in s.resources],
        }
        for s in dag.build(cfg)
    }
    runs = {}
    for job in jobs.values():
        if job["kind"] in ("grpo", "grpo_image"):
            run = _arg(job["words"], "--run")
            gcfg, task, seed = cfg.run(run)
            runs[run] = {"task": task, "seed": seed, "grpo": plain(dataclasses.asdict(gcfg))}
    for section, seed in cfg.mar.runs():
        runs[mar_run_name(section, seed=seed)] = {"mar": plain(dataclasses.asdict(cfg.mar.run_config(section)))}
    return {"jobs": jobs, "runs": runs}


def _arg(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


@pytest.mark.parametrize("profile", PROFILES)
def test_behaviour_is_locked(profile):
    got = json.loads(json.dumps(snapshot(profile)))
    path = FIXTURES / f"{profile}.json"
    if os.environ.get("DDMRL_UPDATE_BEHAVIOUR"):
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(path.read_text())
    assert sorted(got["jobs"]) == sorted(want["jobs"]), "the job set moved"
    for name, job in want["jobs"].items():
        assert got["jobs"][name] == job, f"job {name} moved"
    assert sorted(got["runs"]) == sorted(want["runs"]), "the run set moved"
    for run, resolved in want["runs"].items():
        assert got["runs"][run] == resolved, f"run {run}'s resolved hyperparameters moved"
