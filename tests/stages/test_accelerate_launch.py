"""Two processes through accelerate on the CPU: the grpo and sft stages run under
``accelerate launch --config_file configs/accelerate/cpu_2proc.yaml`` (gloo, the CPU stand-in for a multi-GPU node)
on a tiny model and the sudoku4 task; a GRPO run killed mid-way resumes and ends as the uninterrupted run; with
deepspeed installed, the same under ZeRO-2 and ZeRO-3 (DeepSpeed's CPU accelerator, gloo).

Each stage runs inside a small wrapper that records every artifact write (``ddmrl.io.atomic_path``) with the
writing process's rank, so the tests can check that the outputs were written once, by the main process. Every
process prints ``<stage>: process r/W`` at start; grpo also prints the checksum of its final weights, which must
agree across processes (the DDP gradient all-reduce kept them in step).

The base model is a tiny TinyDDM fine-tuned in-process for 60 steps (about 1 s), enough for sudoku rewards that
vary within groups, so GRPO has a gradient. Each launch takes 15-25 s on a 2-core machine (two Python processes
importing torch, transformers and accelerate), hence ``slow``.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from ddmrl.config import ModelConfig, TrainConfig
from ddmrl.models.checkpoint import load_checkpoint, save_checkpoint
from ddmrl.models.tiny import new_tiny_model
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.seeding import generator
from ddmrl.tasks import make_task
from ddmrl.tasks.encoding import encode_examples
from ddmrl.tasks.store import write_task
from ddmrl.training.distributed import weights_checksum
from ddmrl.training.mdm import train_mdm

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CPU_2PROC = REPO / "configs" / "accelerate" / "cpu_2proc.yaml"
RUN = "rebrl_sudoku4_s0"
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


def launch_argv(ws: Path, script: str, args: list, config: Path = CPU_2PROC) -> list[str]:
    """``accelerate launch --config_file <config> --num_processes 2 wrapper.py stages/<script> args``."""
    cmd = [BIN / "accelerate", "launch", "--config_file", config, "--num_processes", "2", ws / "wrapper.py"]
    return [str(c) for c in [*cmd, REPO / "stages" / script, *args]]


def launch_env(log: Path, **env: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "DDMRL_WRITE_LOG": str(log), "PYTHONUNBUFFERED": "1", **env}


def launch(ws: Path, script: str, args: list, log: Path, config: Path = CPU_2PROC, **env: str) -> str:
    """Run :func:`launch_argv` to its end; its stdout + stderr."""
    out = subprocess.run(
        launch_argv(ws, script, args, config), cwd=ws, env=launch_env(log, **env), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert out.returncode == 0, f"accelerate launch failed ({out.returncode}):\n{text[-4000:]}"
    return text


def grpo_args(params: str, out: Path, ckpt: Path | None = None) -> list:
    args = ["--params", params, "--run", RUN, "--tasks", "tasks", "--model", "sft", "--model-out", out / "model"]
    args += ["--metrics", out / "metrics.json", "--curve", out / "curve.csv", "--config-out", out / "config.yaml"]
    return args + (["--checkpoints", ckpt] if ckpt else [])


def curve_rows(path: Path) -> list[dict[str, str]]:
    """Rows as written, without the wall-clock ``time``."""
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k != "time"} for r in csv.DictReader(f)]


def public(metrics_file: Path) -> dict:
    return {k: v for k, v in json.loads(metrics_file.read_text()).items() if k not in ("seconds", "timing")}


def assert_same_run(a: Path, b: Path) -> None:
    """Two GRPO output directories hold the same curve (but wall times), metrics and weights (bit for bit)."""
    assert curve_rows(a / "curve.csv") == curve_rows(b / "curve.csv")
    assert public(a / "metrics.json") == public(b / "metrics.json")
    wa, wb = load_file(str(a / "model" / "model.safetensors")), load_file(str(b / "model" / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def checkpoint_steps(root: Path) -> list[int]:
    try:
        return sorted(int(p.name[5:]) for p in root.glob("step-*") if (p / "manifest.json").is_file())
    except FileNotFoundError:
        return []


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher and every process under it at once, as a lost node or a scheduler's kill does (torchrun
    starts its workers in sessions of their own, so the launcher's process group is not enough)."""
    import psutil

    victims = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    for p in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)
    proc.wait()
    psutil.wait_procs(victims, timeout=30)


def resumed_from(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"resuming \w+ from \S+ \(step (\d+)\)", text)]


def writes(log: Path) -> Counter:
    """(rank, path) -> number of completed atomic writes."""
    return Counter(tuple(line.split(" ", 1)) for line in log.read_text().splitlines())


def test_grpo_runs_on_two_processes_and_the_main_process_writes_once(workspace, tmp_path):
    ws, out = workspace, tmp_path / "grpo"
    files = {"model": out / "model", "metrics": out / "metrics.json", "curve": out / "curve.csv"}
    log = tmp_path / "writes.log"
    args = ["--params", "params.yaml", "--run", "rebrl_sudoku4_s0", "--tasks", "tasks", "--model", "sft"]
    args += ["--model-out", files["model"], "--metrics", files["metrics"], "--curve", files["curve"]]
    args += ["--config-out", out / "config.yaml"]
    text = launch(ws, "grpo.py", [str(a) for a in args], log)

    # both processes took part, and ended with the same weights
    assert "grpo: process 1/2 on cpu" in text and "grpo: process 2/2 on cpu" in text, text[-3000:]
    # (the two processes share one pipe: a line of one may land inside a line of the other)
    sums = dict(re.findall(r"process (\d)/2 done, weights checksum (-?\d+\.\d+(?:e[-+]?\d+)?)", text))
    assert set(sums) == {"1", "2"} and sums["1"] == sums["2"], [ln for ln in text.splitlines() if "checksum" in ln]
    # every output written exactly once, by process 0 (the curve: created at the start, then appended to)
    assert writes(log) == Counter({("0", str(p)): 1 for p in (*files.values(), out / "config.yaml")}), log.read_text()

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
    # save_steps 2 of 4: one checkpoint (step 2), renamed into place by process 0 only, like the outputs
    step2 = ckpt / "step-00000002"
    assert writes(log) == Counter({("0", str(p)): 1 for p in (*files.values(), step2)}), log.read_text()
    # it holds both processes' random states and masking generators, which differ (each masks its own share)
    assert {"random_states_0.pkl", "random_states_1.pkl"} <= {p.name for p in step2.iterdir()}
    gens = [torch.load(step2 / f"generators_{r}.pt", weights_only=True)["mask"] for r in (0, 1)]
    assert not torch.equal(*gens)
    model, _ = load_checkpoint(files["model"])
    base, _ = load_checkpoint(ws / "sft")
    assert weights_checksum(model) != weights_checksum(base)


# ------------------------------------------------------------------------------------------------ kill and resume

LONG = {"grpo": {"max_steps": 24, "save_steps": 4}}  # 12 rollout batches; a checkpoint every 2


def params_file(ws: Path, name: str, over: dict) -> str:
    """params.yaml with ``over`` merged into its sections, as ``name`` in the workspace."""
    raw = yaml.safe_load((ws / "params.yaml").read_text())
    for section, keys in over.items():
        raw[section] = {k: v for k, v in {**raw.get(section, {}), **keys}.items() if v is not None}
    (ws / name).write_text(yaml.safe_dump(raw, sort_keys=False))
    return name


def test_grpo_killed_mid_way_on_two_processes_resumes_to_the_uninterrupted_result(workspace, tmp_path):
    ws = workspace
    params = params_file(ws, "params_long.yaml", LONG)
    ref = tmp_path / "ref"
    launch(ws, "grpo.py", grpo_args(params, ref), tmp_path / "ref.log")

    out, ckpt, log = tmp_path / "out", tmp_path / "ckpt", tmp_path / "killed.log"
    with open(tmp_path / "killed.out", "w") as f:
        proc = subprocess.Popen(
            launch_argv(ws, "grpo.py", grpo_args(params, out, ckpt)), cwd=ws, env=launch_env(log),
            stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 300
    try:
        while not checkpoint_steps(ckpt):
            assert proc.poll() is None, f"ended before a checkpoint:\n{(tmp_path / 'killed.out').read_text()[-3000:]}"
            assert time.monotonic() < deadline, "no checkpoint after 300 s"
            time.sleep(0.005)
    finally:
        kill_tree(proc)
    assert not (out / "metrics.json").exists() and not (out / "model").exists(), "the run ended before the kill"
    saved = checkpoint_steps(ckpt)[-1]
    assert saved < 24
    # a killed run keeps its curve: every row it wrote is the uninterrupted run's row (at least up to the checkpoint)
    kept = curve_rows(out / "curve.csv")
    assert len(kept) >= saved // 2 and kept == curve_rows(ref / "curve.csv")[: len(kept)]

    text = launch(ws, "grpo.py", grpo_args(params, out, ckpt), tmp_path / "resumed.log")
    assert resumed_from(text) == [saved], text[-3000:]
    assert_same_run(ref, out)
    assert len(curve_rows(out / "curve.csv")) == 12  # one row per rollout batch, none repeated
    assert not ckpt.exists(), "checkpoints were not removed after the outputs were written"


# ------------------------------------------------------------------------------------------------ ZeRO

ZERO = {
    # ZeRO-3 refuses LoRA (adapters are merged from full weights), so both stages train every weight here
    "grpo": {"max_steps": 8, "save_steps": 4, "lora": None, "gradient_checkpointing": False},
    "sft": {"max_steps": 6, "save_steps": 4},
}


def sft_args(params: str, out: Path, ckpt: Path) -> list:
    args = ["--params", params, "--tasks", "tasks", "--model", "sft", "--model-out", out / "model", "--metrics"]
    return args + [out / "metrics.json", "--curve", out / "curve.csv", "--config-out", out / "config.yaml",
                   "--checkpoints", ckpt]  # fmt: skip


@pytest.mark.parametrize(("script", "zero"), [("grpo", 2), ("grpo", 3), ("sft", 2)])
def test_zero_runs_resume_from_their_checkpoint_to_the_uninterrupted_result(workspace, tmp_path, script, zero):
    """Under DeepSpeed ZeRO (CPU accelerator, gloo) each process saves its own shard of the optimiser through
    ``save_state`` (SFT: the LR scheduler and both masking generators too); a run started again from the kept
    newest checkpoint (what a kill after it leaves) ends with the curve, metrics and weights of the uninterrupted
    run."""
    pytest.importorskip("deepspeed", reason="deepspeed (the gpu extra) is not installed")
    ws, config = workspace, REPO / "configs" / "accelerate" / f"zero{zero}.yaml"
    params = params_file(ws, "params_zero.yaml", ZERO)
    args = grpo_args if script == "grpo" else sft_args
    ref, ckpt, log = tmp_path / "ref", tmp_path / "ckpt", tmp_path / "writes.log"
    launch(ws, f"{script}.py", args(params, ref, ckpt), log, config, DDMRL_KEEP_CHECKPOINTS="1")
    assert checkpoint_steps(ckpt) == [4], "expected one checkpoint, at step 4"
    names = {p.relative_to(ckpt / "step-00000004").as_posix() for p in (ckpt / "step-00000004").rglob("*")}
    assert len({n for n in names if "optim_states" in n}) == 2, names  # one ZeRO optimiser partition per process
    assert script == "grpo" or {"scheduler.bin", "generators_0.pt", "generators_1.pt"} <= names, names
    assert [w for w in writes(log) if "ckpt" in w[1]] == [("0", str(ckpt / "step-00000004"))]

    out = tmp_path / "out"
    text = launch(ws, f"{script}.py", args(params, out, ckpt), log, config)
    assert resumed_from(text) == [4], text[-3000:]
    assert_same_run(ref, out)


# ------------------------------------------------------------------------------------------------ two machines


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine_argv(ws: Path, args: list, rank: int, port: int) -> list[str]:
    """One of two "machines" (one process each) of ``accelerate launch`` on this host: what each node of a
    two-node job runs, with the first node's address and a port."""
    cmd = [BIN / "accelerate", "launch", "--config_file", CPU_2PROC, "--num_machines", "2", "--num_processes", "2"]
    cmd += ["--machine_rank", rank, "--main_process_ip", "127.0.0.1", "--main_process_port", port]
    return [str(c) for c in [*cmd, ws / "wrapper.py", REPO / "stages" / "grpo.py", *args]]


def test_grpo_on_two_machines_equals_one_machine_with_the_same_global_batch(workspace, tmp_path):
    """Two launchers (machine ranks 0 and 1, one process each, gloo over 127.0.0.1) against one launcher with two
    processes: the same ranks and the same global batch, so the same curve, metrics and weights, bit for bit."""
    ws = workspace
    one = tmp_path / "one"
    launch(ws, "grpo.py", grpo_args("params.yaml", one), tmp_path / "one.log")

    two, port, procs = tmp_path / "two", free_port(), []
    try:
        for rank in (0, 1):
            with open(tmp_path / f"machine{rank}.out", "w") as f:
                argv = machine_argv(ws, grpo_args("params.yaml", two), rank, port)
                env = launch_env(tmp_path / "two.log")
                procs.append(subprocess.Popen(argv, cwd=ws, env=env, stdout=f, stderr=subprocess.STDOUT))
        codes = [p.wait(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    texts = [(tmp_path / f"machine{r}.out").read_text() for r in (0, 1)]
    assert codes == [0, 0], "\n".join(t[-3000:] for t in texts)
    assert "grpo: process 1/2 on cpu" in texts[0] and "grpo: process 2/2 on cpu" in texts[1]
    assert json.loads((two / "metrics.json").read_text())["num_processes"] == 2
    outputs = ("model", "metrics.json", "curve.csv", "config.yaml")
    assert writes(tmp_path / "two.log") == Counter({("0", str(two / n)): 1 for n in outputs}), "not once by rank 0"
    assert_same_run(one, two)
