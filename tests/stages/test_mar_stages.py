"""The MAR branch end to end through the pipeline's own stages: on a tiny configuration of the extended profile,
the exact commands the DAG builds for download_mar, both GRPO rows (baseline GRPO without stabilisers, MAR-GRPO),
and the GenEval evaluations of the base model and the runs; then the tables' image rows and curves built from those
files. Run in a temporary copy of the repository (as tests/stages/test_kill_and_resume.py)."""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from ddmrl import config
from ddmrl.mar.model import load_mar
from ddmrl.pipeline import dag, layout
from ddmrl.tables import curves_frame, image_frame, image_scores, image_table

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

NUM_EVAL, SAMPLES = 4, 2
TINY = {
    "image": {"download": {"num_eval": NUM_EVAL}, "evaluate": {"samples_per_prompt": SAMPLES}},
    "mar": {
        "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64, "head_width": 16,
                  "head_depth": 1, "diffusion_steps": 100},
        "pretrain": {"max_steps": 20, "batch_size": 8, "warmup_steps": 2, "log_every": 5, "save_steps": 0,
                     "report_to": []},
        "grpo": {"max_steps": 2, "num_prompts": 4, "num_generations": 4, "learning_rate": 1.0e-2, "save_steps": 0,
                 "report_to": [], "sampler": {"ar_steps": 2, "diffusion_steps": 3}},
        "evaluate": {"batch_size": 8, "sampler": {"ar_steps": 2, "diffusion_steps": 3}},
    },
}  # fmt: skip
KINDS = ("download_mar", "grpo_mar", "evaluate_mar_base", "evaluate_mar")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A repository copy on the extended profile with tiny MAR sizes and budgets; every MAR stage run in DAG order."""
    ws = tmp_path_factory.mktemp("mar")
    for name in ("workflow", "stages", "profiles"):
        shutil.copytree(REPO / name, ws / name)
    raw = merge(yaml.safe_load((REPO / "params.yaml").read_text()), {"profile": "extended", **TINY})
    (ws / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    for s in (s for s in dag.build(config.load(ws / "params.yaml")) if s.kind in KINDS):
        argv = shlex.split(s.cmd)
        assert argv[0] == "python"
        out = subprocess.run([sys.executable, *argv[1:]], cwd=ws, capture_output=True, text=True, env=ENV, timeout=600)
        assert out.returncode == 0, f"{s.name} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return ws


def test_every_mar_stage_writes_its_outputs(workspace):
    cfg = config.load(workspace / "params.yaml")
    stages = [s for s in dag.build(cfg) if s.kind in KINDS]
    assert sorted(s.name for s in stages) == sorted([
        "download_mar", "grpo_mar_grpo_plain_geneval_mini_s0", "grpo_mar_mar_grpo_geneval_mini_s0",
        "evaluate_mar_base", "evaluate_mar_grpo_plain_geneval_mini_s0", "evaluate_mar_mar_grpo_geneval_mini_s0",
    ])  # fmt: skip
    for s in stages:
        for path in s.outputs:
            assert (workspace / path).exists(), (s.name, path)
    pretrain = json.loads((workspace / layout.MAR_DIR / "metrics.json").read_text())
    assert math.isfinite(pretrain["pretrain_loss"]) and pretrain["head_parameters"] > 0


def test_the_runs_train_what_their_switches_say(workspace):
    """Both rows ran the configured budget from the same base model; the baseline trained the head, MAR-GRPO left
    it as the base model's (its first stabiliser) and moved the transformer."""
    base = load_mar(workspace / layout.MAR_BASE_DIR)
    runs = {}
    for section in ("grpo_plain", "mar_grpo"):
        root = workspace / layout.GRPO_DIR / f"mar_{section}_geneval_mini_s0"
        resolved = yaml.safe_load((root / "config.yaml").read_text())
        assert resolved["model"] == layout.MAR_BASE_DIR and resolved["grpo"]["max_steps"] == 2
        curve = pd.read_csv(root / "curve.csv")
        assert curve["step"].tolist() == [1, 2] and curve["reward"].between(0, 1).all()
        runs[section] = (load_mar(root / "model"), resolved["grpo"], curve)
    plain, stable = runs["grpo_plain"], runs["mar_grpo"]
    assert (plain[1]["train_head"], plain[1]["mte_trajectories"], plain[1]["consistency"]) == (True, 0, False)
    assert (stable[1]["train_head"], stable[1]["mte_trajectories"], stable[1]["consistency"]) == (False, 5, True)
    assert (plain[2]["mte_tokens"] == 0).all() and (stable[2]["mte_tokens"] > 0).all()
    heads = [base.head.state_dict(), plain[0].head.state_dict(), stable[0].head.state_dict()]
    assert any(not torch.equal(heads[0][k], heads[1][k]) for k in heads[0])
    assert all(torch.equal(heads[0][k], heads[2][k]) for k in heads[0])
    assert (stable[2]["grad_norm"] > 0).any(), stable[2]  # a group with a reward spread: the frozen head passed it on
    trunk = {k: v for k, v in stable[0].state_dict().items() if not k.startswith("head.")}
    assert any(not torch.equal(v, base.state_dict()[k]) for k, v in trunk.items())


def test_the_evaluations_are_genevals_layout_and_the_image_tables_rows(workspace):
    cfg = config.load(workspace / "params.yaml")
    models = ["mar_base", "mar_grpo_plain_geneval_mini_s0", "mar_mar_grpo_geneval_mini_s0"]
    results = [workspace / layout.image_results(layout.EVALUATE_DIR, m, "geneval_mini") for m in models]
    for path in results:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        folder = Path(str(path).removesuffix("_results.jsonl"))
        prompts = sorted(p.name for p in folder.iterdir())  # one folder per held-out prompt (at least one per tag)
        assert len(prompts) >= NUM_EVAL and prompts == [f"{i:05d}" for i in range(len(prompts))]
        assert len(rows) == len(prompts) * SAMPLES and all(isinstance(r["correct"], bool) for r in rows)
        assert len(list(folder.glob("*/samples/*.png"))) == len(prompts) * SAMPLES
    curves = {
        f"mar_{s}_geneval_mini_s0": pd.read_csv(workspace / layout.GRPO_DIR / f"mar_{s}_geneval_mini_s0/curve.csv")
        for s in ("grpo_plain", "mar_grpo")
    }
    frame = image_frame(cfg, results, curves)
    assert frame["row"].tolist() == ["mar_base", "mar_grpo_plain", "mar_mar_grpo"]
    scores = {path.parent.name: image_scores(path) for path in results}
    table, _, _, _ = image_table(cfg, frame, scores, curves)
    assert table["model"].tolist() == ["MAR base", "MAR + GRPO (no stabilisers)", "MAR + MAR-GRPO"]
    assert set(curves_frame(cfg, curves)["method"]) == {"mar_grpo_plain", "mar_mar_grpo"}
