"""Two processes through accelerate on the CPU: the grpo and sft stages run under
``accelerate launch --config_file configs/accelerate/cpu_2proc.yaml`` (gloo, the CPU stand-in for a multi-GPU node)
on a tiny model and the sudoku4 task.

Each stage runs inside a small wrapper that records every artifact write (``ddmrl.io.atomic_path``) with the
writing process's rank, so the tests can check that the outputs were written once, by the main process. Every
process prints ``<stage>: process r/W`` at start; grpo also prints the checksum of its final weights, which must
agree across processes (the DDP gradient all-reduce kept them in step).

The base model is a tiny TinyDDM fine-tuned in-process for 60 steps (about 1 s), enough for sudoku rewards that
vary within groups, so GRPO has a gradient. Each launch takes 15-25 s on a 2-core machine (two Python processes
importing torch, transformers and accelerate), hence ``slow``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from ddmrl.config import ModelConfig, TrainConfig
from ddmrl.models import build_tokenizer, new_tiny_model
from ddmrl.models.checkpoint import load_checkpoint, save_checkpoint
from ddmrl.seeding import generator
from ddmrl.tasks import make_task
from ddmrl.tasks.store import write_task
from ddmrl.training.data import encode_examples
from ddmrl.training.distributed import weights_checksum
from ddmrl.training.mdm import train_mdm

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CPU_2PROC = REPO / "configs" / "accelerate" / "cpu_2proc.yaml"
pytestmark = pytest.mark.slow

# Runs the stage script given as its first argument, logging "<rank> <path>" for every completed atomic write.
WRAPPER = """\
import contextlib, os, runpy, sys
import ddmrl.io as io

real = io.atomic_path

@contextlib.contextmanager
def logged(path):
    with real(path) as tmp:
        yield tmp
    with open(os.environ["DDMRL_WRITE_LOG"], "a") as f:
        f.write(f"{os.environ.get('RANK', '0')} {path}\\n")

io.atomic_path = logged
if os.environ.get("DDMRL_KEEP_CHECKPOINTS"):
    from ddmrl.training.resume import Checkpointer
    Checkpointer.clear = lambda self: None
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

PARAMS = {
    "tasks": ["sudoku4"],
    "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64},
    "sft": {"max_steps": 4, "batch_size": 8, "warmup_steps": 1, "log_every": 2, "save_steps": 2},
    "grpo": {
        "methods": ["rebrl"],
        "max_steps": 4,
        "num_prompts": 4,  # 2 per process
        "num_generations": 4,
        "num_iterations": 2,
        "gradient_accumulation_steps": 2,  # 1 prompt group per micro-batch per process
        "learning_rate": 1.0e-2,
        "save_steps": 0,
        # d1's setup at small scale: LoRA adapters (the reference = adapters off), gradient checkpointing
        "lora": {"r": 4, "alpha": 8.0},
        "gradient_checkpointing": True,
    },
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """tasks/ (sudoku4, 8 held-out puzzles), sft/ (a tiny model fine-tuned 60 steps), params.yaml, wrapper.py."""
    ws = tmp_path_factory.mktemp("dist")
    task = make_task("sudoku4")
    write_task(ws / "tasks", task, {"num_empty": 8}, task.generate(8, seed=123456))
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    torch.manual_seed(0)
    length = task.prompt_length + 1 + task.completion_length
    model = new_tiny_model(ModelConfig(**PARAMS["model"]), tok, length)
    cfg = TrainConfig(max_steps=60, batch_size=16, learning_rate=3e-3, warmup_steps=5, log_every=10)
    batches = lambda step: encode_examples(tok, task, task.generate(16, seed=1000 + step))  # noqa: E731
    train_mdm(model, batches, cfg, "sft", generator(0, "sft"))
    save_checkpoint(model, tok, ws / "sft")
    (ws / "params.yaml").write_text(yaml.safe_dump(PARAMS, sort_keys=False))
    (ws / "wrapper.py").write_text(WRAPPER)
    return ws


def launch(ws: Path, script: str, args: list[str], log: Path, **env: str) -> str:
    """``accelerate launch --config_file cpu_2proc.yaml wrapper.py stages/<script> args``; its stdout + stderr."""
    cmd = [BIN / "accelerate", "launch", "--config_file", CPU_2PROC, ws / "wrapper.py", REPO / "stages" / script]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "DDMRL_WRITE_LOG": str(log), "PYTHONUNBUFFERED": "1", **env}
    out = subprocess.run(
        [str(c) for c in [*cmd, *args]], cwd=ws, env=full_env, capture_output=True, text=True, timeout=300
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, f"accelerate launch failed ({out.returncode}):\n{text[-4000:]}"
    return text


def writes(log: Path) -> Counter:
    """(rank, path) -> number of completed atomic writes."""
    return Counter(tuple(line.split(" ", 1)) for line in log.read_text().splitlines())


def test_grpo_runs_on_two_processes_and_the_main_process_writes_once(workspace, tmp_path):
    ws, out = workspace, tmp_path / "grpo"
    files = {"model": out / "model", "metrics": out / "metrics.json", "curve": out / "curve.csv"}
    log = tmp_path / "writes.log"
    args = ["--params", "params.yaml", "--run", "rebrl_sudoku4_s0", "--tasks", "tasks", "--model", "sft"]
    args += ["--model-out", files["model"], "--metrics", files["metrics"], "--curve", files["curve"]]
    text = launch(ws, "grpo.py", [str(a) for a in args], log)

    # both processes took part, and ended with the same weights
    assert "grpo: process 1/2 on cpu" in text and "grpo: process 2/2 on cpu" in text, text[-3000:]
    # (the two processes share one pipe: a line of one may land inside a line of the other)
    sums = dict(re.findall(r"process (\d)/2 done, weights checksum (-?\d+\.\d+(?:e[-+]?\d+)?)", text))
    assert set(sums) == {"1", "2"} and sums["1"] == sums["2"], [ln for ln in text.splitlines() if "checksum" in ln]
    # every output written exactly once, by process 0
    assert writes(log) == Counter({("0", str(p)): 1 for p in files.values()}), log.read_text()

    metrics = json.loads(files["metrics"].read_text())
    assert metrics["num_processes"] == 2 and metrics["steps"] == 4
    curve = files["curve"].read_text().splitlines()
    assert len(curve) == 1 + 2  # header + one row per rollout batch (mu = 2)
    # LoRA: the saved model is a plain TinyDDM with the adapters merged in, and it moved away from the SFT model
    model, _ = load_checkpoint(files["model"])
    assert type(model).__name__ == "TinyDDMForMaskedLM"
    saved, sft = load_file(str(files["model"] / "model.safetensors")), load_file(str(ws / "sft/model.safetensors"))
    assert saved.keys() == sft.keys()
    assert any(not torch.equal(saved[k], sft[k]) for k in sft), "GRPO did not change the weights"
    assert not any("lora" in k for k in saved)


def test_sft_runs_on_two_processes_with_per_process_generator_states(workspace, tmp_path):
    ws, out = workspace, tmp_path / "sft"
    files = {"model": out / "model", "metrics": out / "metrics.json", "curve": out / "curve.csv"}
    log, ckpt = tmp_path / "writes.log", tmp_path / "checkpoints"
    args = ["--params", "params.yaml", "--tasks", "tasks", "--model", "sft", "--checkpoints", ckpt]
    args += ["--model-out", files["model"], "--metrics", files["metrics"], "--curve", files["curve"]]
    text = launch(ws, "sft.py", [str(a) for a in args], log, DDMRL_KEEP_CHECKPOINTS="1")

    assert "sft: process 1/2 on cpu" in text and "sft: process 2/2 on cpu" in text, text[-3000:]
    assert json.loads(files["metrics"].read_text())["num_processes"] == 2
    # save_steps 2 of 4: one checkpoint (step 2), written by process 0 only, like the outputs
    step2 = ckpt / "step-00000002"
    assert writes(log) == Counter({("0", str(p)): 1 for p in (*files.values(), step2)}), log.read_text()
    # it holds both processes' masking generators, which differ (each process masks its own share)
    rng = torch.load(step2 / "rng.pt", weights_only=True)["generators"]
    assert set(rng) == {"mask", "mask@1"} and not torch.equal(rng["mask"], rng["mask@1"])
    model, _ = load_checkpoint(files["model"])
    base, _ = load_checkpoint(ws / "sft")
    assert weights_checksum(model) != weights_checksum(base)
