"""``paper_sdar_math`` (TraceRL on SDAR) and ``paper_llada2_math`` (EBPO on LLaDA 2.0-mini) end to end on the real
block-diffusion classes: each profile's checkpoint replaced by a tiny random instance whose directory ships the
family's own modeling code (from shared/reference, loaded through ``trust_remote_code`` and ddmrl's transformers-5
bridges), its data by three GSM8K test items. Every stage runs its own command line from the DAG: download, rollout
and reward with the block sampler, GRPO, evaluation, tables."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import real_llada2
import real_sdar
import torch
import yaml
from safetensors.torch import load_file

from ddmrl.config import deep_merge, load
from ddmrl.pipeline import dag

REPO = Path(__file__).resolve().parents[2]
GSM8K = REPO / "tests" / "fixtures" / "benchmarks" / "gsm8k_test.jsonl"
#: profile -> (model.kind, its hub item, the method it runs, the tiny checkpoint's builder and tokenizer, skip mark)
PROFILES = {
    "paper_sdar_math": ("sdar", "sdar-8b-chat", "tracerl", real_sdar.sdar_checkpoint, real_sdar.tokenizer,
                        real_sdar.needs_sdar),
    "paper_llada2_math": ("llada2", "llada2.0-mini", "ebpo", real_llada2.llada2_checkpoint, real_llada2.tokenizer,
                          real_llada2.needs_llada2),
}  # fmt: skip
pytestmark = pytest.mark.slow


def small_profile(root: Path, profile: str, model_dir: Path, item: str) -> None:
    """profiles/small.yaml: the paper profile with the local checkpoint and data, at a few-second scale."""
    paper = yaml.safe_load((REPO / "profiles" / f"{profile}.yaml").read_text())
    sampler = {"block_length": 4, "steps": 8, "temperature": 1.0}
    small = {
        "tasks": ["gsm8k"],
        "task_params": {"gsm8k": {"train": str(GSM8K), "eval": str(GSM8K), "completion_length": 16}},
        "model": {"path_or_id": str(model_dir), "revision": None, "dtype": "float32"},
        "download": {"num_eval": 2, "hub": [{"name": item, "repo_id": str(model_dir)},
                                            {"name": "gsm8k", "repo_id": str(GSM8K), "repo_type": "dataset"}]},
        "rollout": {"num_prompts": 2, "num_generations": 2, "sampler": sampler},
        "evaluate": {"batch_size": 2, "sampler": sampler},
        "grpo": {"seeds": [0], "max_steps": 2, "num_prompts": 2, "num_generations": 4, "save_steps": 0,
                 "gradient_accumulation_steps": 1, "mixed_precision": "no", "learning_rate": 1.0e-2,
                 "views_per_step": 2, "gradient_checkpointing": False, "sampler": sampler,
                 "launch": {"launcher": "python", "num_processes": 1}},
    }  # fmt: skip
    (root / "profiles").mkdir()
    (root / "profiles" / "small.yaml").write_text(yaml.safe_dump(deep_merge(paper, small), sort_keys=False))
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    (root / "params.yaml").write_text(yaml.safe_dump({**params, "profile": "small"}, sort_keys=False))


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_paper_dag_runs_on_the_real_block_diffusion_class(tmp_path, profile):
    kind, item, method, build, tokenizer, needs = PROFILES[profile]
    if needs.args[0]:
        pytest.skip(needs.kwargs["reason"])
    tok = tokenizer()
    model_dir = tmp_path / "hub" / item
    build(model_dir, tok)
    root = tmp_path / "repo"
    root.mkdir()
    small_profile(root, profile, model_dir, item)
    for d in ("stages", "configs"):
        (root / d).symlink_to(REPO / d)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_MODULES_CACHE": str(tmp_path / "hf_modules"), "OMP_NUM_THREADS": "1"}  # fmt: skip
    for stage in dag.build(load(root / "params.yaml")):
        cmd = [sys.executable, *stage.cmd.split()[1:]]
        out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert out.returncode == 0, f"{stage.name}: {out.stderr[-3000:]}"

    data = root / "data"
    pointer = json.loads((data / "download" / "base" / "ddmrl_model.json").read_text())
    assert pointer["kind"] == kind and pointer["path_or_id"] == str(model_dir)
    run = data / "grpo" / f"{method}_gsm8k_s0"
    with open(run / "curve.csv") as f:
        curve = list(csv.DictReader(f))
    assert curve and all(math.isfinite(float(row["loss"])) for row in curve)
    before, after = load_file(model_dir / "model.safetensors"), load_file(run / "model" / "model.safetensors")
    assert set(after) <= set(before), "a plain checkpoint of the family (a tied head may be left out)"
    moved = any(not torch.equal(before[k], after[k]) for k in after)
    # a random tiny model often scores every completion alike: no advantage, nothing to learn (that every method moves
    # the weights of both families under a varied reward: tests/unit/training/test_block_families.py)
    assert moved or all(float(row["reward_std"]) == 0 for row in curve), "rewards varied but nothing moved"
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["grpo"]["sampler"]["name"] == "block" and resolved["grpo"]["method"] == method
    metrics = json.loads((data / "evaluate" / f"{method}_gsm8k_s0" / "gsm8k.json").read_text())
    assert metrics["n"] == 2 and 0.0 <= metrics["accuracy"] <= 100.0
    assert any(p.suffix == ".md" for p in (data / "tables").iterdir())
