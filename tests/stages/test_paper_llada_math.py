"""``paper_llada_math`` end to end on the real LLaDA class: the profile's checkpoint replaced by a tiny random
``LLaDAModelLM`` whose directory ships LLaDA's own ``modeling_llada.py`` and ``configuration_llada.py`` (from
shared/reference/mmada, loaded through ``trust_remote_code`` and ddmrl's transformers-5 bridges, as
LLaDA-8B-Instruct is) and its data by three GSM8K test items, both given as local paths. Every stage runs its own
command line from the DAG: download (fetch = use the local paths, manifests, pointer), rollout, reward, credit,
GRPO with the profile's LoRA targets (diffu-GRPO and MaskGRPO), evaluation with d1's protocol, tables.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from real_models import llada_checkpoint, needs_reference, tokenizer
from safetensors.torch import load_file

from ddmrl.config import deep_merge, load
from ddmrl.pipeline import dag

REPO = Path(__file__).resolve().parents[2]
GSM8K = REPO / "tests" / "fixtures" / "benchmarks" / "gsm8k_test.jsonl"
pytestmark = [pytest.mark.slow, needs_reference]
#: the weights the paper profiles' LoRA adapts: every block's attention and MLP projections (LLaDA's names)
TARGET = re.compile(r"model\.transformer\.blocks\.\d+\.(q_proj|k_proj|v_proj|attn_out|ff_proj|up_proj|ff_out)\.weight")


def small_profile(root: Path, model_dir: Path) -> None:
    """profiles/small.yaml: paper_llada_math with the local checkpoint and data, at a few-second scale."""
    paper = yaml.safe_load((REPO / "profiles" / "paper_llada_math.yaml").read_text())
    sampler = {"block_length": 8, "steps": 8}
    small = {
        "tasks": ["gsm8k"],
        "task_params": {"gsm8k": {"train": str(GSM8K), "eval": str(GSM8K), "completion_length": 16}},
        "model": {"path_or_id": str(model_dir), "revision": None, "dtype": "float32"},
        "download": {
            "num_eval": 2,
            "hub": [
                {"name": "llada-8b-instruct", "repo_id": str(model_dir)},
                {"name": "gsm8k", "repo_id": str(GSM8K), "repo_type": "dataset"},
            ],
        },
        "rollout": {"num_prompts": 2, "num_generations": 2, "sampler": sampler},
        "evaluate": {"batch_size": 2, "sampler": sampler},
        "grpo": {
            "seeds": [0], "max_steps": 3, "num_prompts": 2, "num_generations": 4, "num_iterations": 1,
            "gradient_accumulation_steps": 1, "save_steps": 0, "mixed_precision": "no", "learning_rate": 1.0e-2,
            "lora": {"r": 4, "alpha": 8.0, "dropout": 0.0}, "sampler": sampler,
            "launch": {"launcher": "python", "num_processes": 1},
        },
        "methods": {"maskgrpo": {"sampler": sampler}},
    }  # fmt: skip
    (root / "profiles").mkdir()
    (root / "profiles" / "small.yaml").write_text(yaml.safe_dump(deep_merge(paper, small), sort_keys=False))
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    (root / "params.yaml").write_text(yaml.safe_dump({**params, "profile": "small"}, sort_keys=False))


@pytest.fixture
def llada_repo(tmp_path):
    tok = tokenizer()
    model_dir = tmp_path / "hub" / "llada-8b-instruct"
    # digits, EOS and "x" likely: some completions are all digits (d1's int reward), so a group's rewards differ
    llada_checkpoint(model_dir, tok, favoured=tok.convert_tokens_to_ids([*"0123456789x", "<|endoftext|>"]))
    root = tmp_path / "repo"
    root.mkdir()
    small_profile(root, model_dir)
    for d in ("stages", "configs"):
        (root / d).symlink_to(REPO / d)
    return root, model_dir


def run(root: Path, stage: dag.Stage, env: dict) -> None:
    cmd = [sys.executable, *stage.cmd.split()[1:]]
    result = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"{stage.name}: {result.stderr[-3000:]}"


def test_paper_dag_runs_on_the_real_llada_class(llada_repo, tmp_path):
    root, model_dir = llada_repo
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_MODULES_CACHE": str(tmp_path / "hf_modules"), "OMP_NUM_THREADS": "1"}  # fmt: skip
    cfg = load(root / "params.yaml")
    stages = dag.build(cfg)
    assert "sft" not in {s.name for s in stages}, "the paper profile starts RL from the Instruct model"
    for stage in stages:
        run(root, stage, env)

    # download: manifests of both items, and a pointer (not a copy) pinned by their digests
    data = root / "data"
    manifests = sorted(p.name for p in (data / "download" / "manifests").iterdir())
    assert manifests == ["gsm8k.manifest.json", "llada-8b-instruct.manifest.json"]
    pointer = json.loads((data / "download" / "base" / "ddmrl_model.json").read_text())
    assert pointer["kind"] == "llada" and pointer["path_or_id"] == str(model_dir) and pointer["trust_remote_code"]
    assert set(pointer["manifests"]) == {"gsm8k", "llada-8b-instruct"}
    held_out = (data / "download" / "tasks" / "gsm8k" / "eval.jsonl").read_text().splitlines()
    assert len(held_out) == 2 and all(json.loads(r)["gold"]["split"] == "test" for r in held_out)

    # GRPO trained LoRA adapters on every block's projections and saved them merged, with LLaDA's own code
    before = load_file(model_dir / "model.safetensors")
    assert sum(bool(TARGET.fullmatch(k)) for k in before) == 2 * 7
    for run_name in ("diffu_grpo_gsm8k_s0", "maskgrpo_gsm8k_s0"):
        out = data / "grpo" / run_name / "model"
        assert {"modeling_llada.py", "configuration_llada.py", "ddmrl_model.json"} <= {p.name for p in out.iterdir()}
        assert json.loads((out / "config.json").read_text())["auto_map"]["AutoModel"] == "modeling_llada.LLaDAModelLM"
        with open(data / "grpo" / run_name / "curve.csv") as f:
            curve = list(csv.DictReader(f))
        assert any(float(row["reward_std"]) > 0 for row in curve), "rewards must vary within a group to train"
        after = load_file(out / "model.safetensors")
        assert set(after) == set(before), "adapters merged: the saved weights have the checkpoint's names"
        changed = {k for k in before if not torch.equal(before[k], after[k])}
        assert changed == {k for k in before if TARGET.fullmatch(k)}, "every target moved, nothing else (head, wte)"
        metrics = json.loads((data / "evaluate" / run_name / "gsm8k.json").read_text())
        assert metrics["n"] == 2 and 0.0 <= metrics["accuracy"] <= 100.0
    assert any(p.suffix == ".md" for p in (data / "tables").iterdir())
