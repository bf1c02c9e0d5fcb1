"""``paper_dream_math`` end to end on the real Dream class: the profile's checkpoint replaced by a tiny random
``DreamModel`` whose directory ships Dream's own ``modeling_dream.py``, ``configuration_dream.py`` and
``generation_utils.py`` (from shared/reference/dream, loaded through ``trust_remote_code`` and ddmrl's
transformers-5 bridges, as Dream-v0-Instruct-7B is), and its data by three GSM8K test items, both given as local
paths. Every stage runs its own command line from the DAG: download, rollout and reward with Dream's sampler, GRPO
(diffu-GRPO) on Dream's aligned logits, evaluation, tables.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from real_dream import dream_checkpoint, needs_dream, tokenizer
from safetensors.torch import load_file

from ddmrl.config import deep_merge, load
from ddmrl.pipeline import dag

REPO = Path(__file__).resolve().parents[2]
GSM8K = REPO / "tests" / "fixtures" / "benchmarks" / "gsm8k_test.jsonl"
pytestmark = [pytest.mark.slow, needs_dream]


def small_profile(root: Path, model_dir: Path) -> None:
    """profiles/small.yaml: paper_dream_math with the local checkpoint and data, at a few-second scale."""
    paper = yaml.safe_load((REPO / "profiles" / "paper_dream_math.yaml").read_text())
    sampler = {"steps": 8, "temperature": 1.0}
    small = {
        "tasks": ["gsm8k"],
        "task_params": {"gsm8k": {"train": str(GSM8K), "eval": str(GSM8K), "completion_length": 16}},
        "model": {"path_or_id": str(model_dir), "revision": None, "dtype": "float32"},
        "download": {
            "num_eval": 2,
            "hub": [
                {"name": "dream-v0-instruct-7b", "repo_id": str(model_dir)},
                {"name": "gsm8k", "repo_id": str(GSM8K), "repo_type": "dataset"},
            ],
        },
        "rollout": {"num_prompts": 2, "num_generations": 2, "sampler": sampler},
        "evaluate": {"batch_size": 2, "sampler": sampler},
        "grpo": {
            "seeds": [0], "max_steps": 2, "num_prompts": 2, "num_generations": 4, "gradient_accumulation_steps": 1,
            "save_steps": 0, "mixed_precision": "no", "learning_rate": 1.0e-2, "sampler": sampler,
            "launch": {"launcher": "python", "num_processes": 1},
        },
    }  # fmt: skip
    (root / "profiles").mkdir()
    (root / "profiles" / "small.yaml").write_text(yaml.safe_dump(deep_merge(paper, small), sort_keys=False))
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    (root / "params.yaml").write_text(yaml.safe_dump({**params, "profile": "small"}, sort_keys=False))


def test_paper_dag_runs_on_the_real_dream_class(tmp_path):
    tok = tokenizer()
    model_dir = tmp_path / "hub" / "dream-v0-instruct-7b"
    # digits and EOS likely: some completions are all digits (d1's int reward), so a group's rewards differ
    dream_checkpoint(model_dir, tok, favoured=tok.convert_tokens_to_ids([*"0123456789", "<|endoftext|>"]))
    root = tmp_path / "repo"
    root.mkdir()
    small_profile(root, model_dir)
    for d in ("stages", "configs"):
        (root / d).symlink_to(REPO / d)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_MODULES_CACHE": str(tmp_path / "hf_modules"), "OMP_NUM_THREADS": "1"}  # fmt: skip
    for stage in dag.build(load(root / "params.yaml")):
        cmd = [sys.executable, *stage.cmd.split()[1:]]
        out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert out.returncode == 0, f"{stage.name}: {out.stderr[-3000:]}"

    data = root / "data"
    pointer = json.loads((data / "download" / "base" / "ddmrl_model.json").read_text())
    assert pointer["kind"] == "dream" and pointer["path_or_id"] == str(model_dir) and pointer["trust_remote_code"]
    run = data / "grpo" / "diffu_grpo_gsm8k_s0"
    out = run / "model"
    assert {"modeling_dream.py", "ddmrl_model.json"} <= {p.name for p in out.iterdir()}, "saved with Dream's code"
    with open(run / "curve.csv") as f:
        curve = list(csv.DictReader(f))
    assert any(float(row["reward_std"]) > 0 for row in curve), "rewards must vary within a group to train"
    before, after = load_file(model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(after) == set(before), "a plain Dream checkpoint: the wrapper adds no names"
    assert any(not torch.equal(before[k], after[k]) for k in before), "every weight trains (DARE: no LoRA)"
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["grpo"]["sampler"]["name"] == "dream"
    assert resolved["grpo"]["sampler"]["options"]["dream"]["alg"] == "entropy"
    metrics = json.loads((data / "evaluate" / "diffu_grpo_gsm8k_s0" / "gsm8k.json").read_text())
    assert metrics["n"] == 2 and 0.0 <= metrics["accuracy"] <= 100.0
    assert any(p.suffix == ".md" for p in (data / "tables").iterdir())
