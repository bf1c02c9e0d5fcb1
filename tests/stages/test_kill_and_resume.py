"""Kill and resume: training stages killed with SIGKILL mid-run resume from their checkpoints and end exactly where
an uninterrupted run ends, both as bare stage commands and under Snakemake and DVC.

Every workspace is a temporary copy of the repository on the smoke profile (as in tests/pipeline/test_smoke.py),
with an overlay that makes the training runs long enough to be killed mid-way and checkpoint often:

* grpo: 60 optimiser steps, num_iterations 2, save_steps 3 (so saves fall on the first rollout-batch boundary
  after every 3 steps: steps 4, 6, 10, 12, ...). 12 steps (as in the issue) run in about 0.2 s on this model,
  too short to kill reliably between a checkpoint and the end of the run; 60 take about 1 s.
* sft: 40 steps, save_steps 5.

Stage commands are the exact ``Stage.cmd`` of :func:`ddmrl.pipeline.dag.build`, run in the workspace with
``OMP_NUM_THREADS=1`` (the same for reference and resumed runs, so float results are comparable bit for bit).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from stage_outputs import assert_same_outputs, assert_same_weights, public, read_curve, steps_present

from ddmrl import config
from ddmrl.pipeline import dag

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow

RUN = "rebrl_sudoku4_s0"
GRPO = f"grpo_{RUN}"
OVERLAY = {
    "sft": {"max_steps": 40, "save_steps": 5},
    "grpo": {"max_steps": 60, "num_iterations": 2, "save_steps": 3},
}
ENV = {
    **os.environ,
    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    "OMP_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
    "DVC_NO_ANALYTICS": "1",
}
# seeded choice of the kill point: after the first or the second checkpoint
KILL_AFTER = random.Random(20260101).choice([1, 2])


# ------------------------------------------------------------------------------------------------ helpers


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def make_workspace(dst: Path, overlay: dict = OVERLAY, params: dict | None = None, export: bool = False) -> Path:
    """A copy of workflow/, stages/, profiles/ and params.yaml (profile smoke, ``params`` merged in), with
    ``overlay`` merged into the workspace's profiles/smoke.yaml (the profile overlays params.yaml)."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("workflow", "stages", "profiles"):
        shutil.copytree(REPO / name, dst / name)
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["profile"] = "smoke"
    raw = deep_merge(raw, params or {})
    (dst / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    smoke = yaml.safe_load((dst / "profiles" / "smoke.yaml").read_text())
    (dst / "profiles" / "smoke.yaml").write_text(yaml.safe_dump(deep_merge(smoke, overlay), sort_keys=False))
    if export:
        run([BIN / "python", "-m", "ddmrl.pipeline.export"], dst)
    return dst


def clone(src: Path, dst: Path, drop: tuple[str, ...] = ()) -> Path:
    """A copy of workspace ``src`` without ``drop`` (paths relative to it) and without any checkpoints."""
    shutil.copytree(src, dst, symlinks=True)
    for rel in (*drop, "data/checkpoints"):
        shutil.rmtree(dst / rel, ignore_errors=True)
    return dst


def run(cmd: list, cwd: Path, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=ENV)
    if check and out.returncode != 0:
        raise AssertionError(f"{cmd} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def stage(ws: Path, name: str) -> dag.Stage:
    return next(s for s in dag.build(config.load(ws / "params.yaml")) if s.name == name)


def stage_argv(ws: Path, name: str) -> list[str]:
    """The exact command of stage ``name`` for workspace ``ws`` (``python`` -> this interpreter)."""
    argv = shlex.split(stage(ws, name).cmd)
    assert argv[0] == "python"
    return [sys.executable, *argv[1:]]


def run_stage(ws: Path, name: str) -> str:
    """Run stage ``name`` to completion; its stdout + stderr."""
    out = run(stage_argv(ws, name), ws)
    return out.stdout + out.stderr


def popen(argv: list, ws: Path, log: Path) -> subprocess.Popen:
    """Start ``argv`` in its own process group (so that the whole group can be killed), output to ``log``."""
    with open(log, "w") as f:
        return subprocess.Popen(
            [str(a) for a in argv], cwd=ws, stdout=f, stderr=subprocess.STDOUT, env=ENV, start_new_session=True
        )


def kill_after_checkpoints(proc: subprocess.Popen, roots, n: int, log: Path, timeout: float = 300) -> None:
    """Poll until ``n`` distinct checkpoints have appeared under the checkpoint roots that ``roots()`` lists, then
    SIGKILL the whole process group of ``proc`` (the stage, or an engine and every job it started)."""
    seen: set[tuple[str, int]] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < n:
            for root in roots():
                seen |= {(root.name, s) for s in steps_present(root)}
            if len(seen) >= n:
                break
            if proc.poll() is not None:
                raise AssertionError(
                    f"finished (rc {proc.returncode}) before {n} checkpoint(s) were seen ({sorted(seen)}); "
                    f"the run is too short to be killed mid-way:\n{log.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {n} checkpoint(s) after {timeout} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.005)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"exited by itself (rc {proc.returncode}) before the kill"


def tensorboard_steps(log_dir: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir / "tensorboard"))
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


def assert_incomplete(ws: Path, st: dag.Stage, ref: Path | None = None) -> None:
    """After a kill: no model and no metrics (what says a stage is done); the curve the run had streamed is kept,
    and holds the uninterrupted run's rows (``ref``'s) so far."""
    for out in (*st.dir_outs, *st.metrics):
        assert not (ws / out).exists(), f"{out} exists after the kill"
    for curve in st.plots:
        if ref is not None:
            kept = read_curve(ws / curve)
            assert kept == read_curve(ref / curve)[: len(kept)], "the killed run's curve differs from the reference"


def resumed_step(output: str, what: str) -> int:
    """The step of the ``resuming <what> from ... (step N)`` line (exactly one such line)."""
    lines = [ln for ln in output.splitlines() if ln.startswith(f"resuming {what} from ")]
    assert len(lines) == 1, f"expected one 'resuming {what}' line:\n{output[-3000:]}"
    return int(lines[0].rsplit("(step ", 1)[1].rstrip(")"))


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def base_ws(tmp_path_factory) -> Path:
    """download + sft (40 steps, save_steps 5) run once, uninterrupted: the start of every stage-level test and
    the SFT reference."""
    ws = make_workspace(tmp_path_factory.mktemp("base"))
    run_stage(ws, "download")
    out = run_stage(ws, "sft")
    assert "resuming" not in out
    assert not (ws / dag.checkpoints("sft")).exists(), "sft left its checkpoints behind"
    return ws


@pytest.fixture(scope="module")
def grpo_ref(base_ws, tmp_path_factory) -> Path:
    """The GRPO run, uninterrupted."""
    ws = clone(base_ws, tmp_path_factory.mktemp("grpo_ref") / "ws")
    out = run_stage(ws, GRPO)
    assert "resuming" not in out
    assert not (ws / dag.checkpoints(GRPO)).exists(), "grpo left its checkpoints behind"
    assert "reward=" in out and "kl=" in out and "s/step=" in out, "the progress bar shows reward, KL and s/step"
    # the comparison is only meaningful if the policy moved away from the SFT model
    sft = load_file(str(ws / "data/sft/model/model.safetensors"))
    pol = load_file(str(ws / f"data/grpo/{RUN}/model/model.safetensors"))
    assert any(not torch.equal(sft[k], pol[k]) for k in sft), "GRPO did not change the policy"
    return ws


# ------------------------------------------------------------------------------------------------ stages


def test_grpo_killed_after_a_checkpoint_resumes_to_the_uninterrupted_result(base_ws, grpo_ref, tmp_path):
    ws = clone(base_ws, tmp_path / "ws")
    st, root = stage(ws, GRPO), ws / dag.checkpoints(GRPO)
    proc = popen(stage_argv(ws, GRPO), ws, tmp_path / "killed.log")
    kill_after_checkpoints(proc, lambda: [root], KILL_AFTER, tmp_path / "killed.log")
    assert_incomplete(ws, st, grpo_ref)
    present = steps_present(root)
    assert present, "no checkpoint survived the kill"
    # saves fall on rollout-batch boundaries (num_iterations 2), the first after every save_steps (3) steps
    assert all(s % 2 == 0 for s in present), present

    out = run_stage(ws, GRPO)
    assert resumed_step(out, "grpo") == present[-1]
    assert_same_outputs(grpo_ref, ws, st)
    assert not root.exists(), "checkpoints were not removed after the outputs were written"
    # the trackers' history of the resumed run holds every step once, as the uninterrupted run's does
    steps = [int(r["step"]) for r in read_curve(ws / st.plots[0])]
    rewards = tensorboard_steps(ws / dag.log_dir(GRPO), "reward")
    assert [s for s, _ in rewards] == steps and rewards == tensorboard_steps(grpo_ref / dag.log_dir(GRPO), "reward")


def test_grpo_warned_by_sigusr1_checkpoints_stops_and_resumes_to_the_uninterrupted_result(base_ws, grpo_ref, tmp_path):
    """A scheduler's warning before its time limit (sbatch --signal=USR1@600): the stage checkpoints at the end of the
    rollout batch it is in, exits with 75 and one line, and the same command resumes from exactly that step."""
    ws = clone(base_ws, tmp_path / "ws")
    st, root, curve = stage(ws, GRPO), ws / dag.checkpoints(GRPO), ws / stage(ws, GRPO).plots[0]
    proc = popen(stage_argv(ws, GRPO), ws, tmp_path / "warned.log")
    while proc.poll() is None and not (curve.exists() and len(curve.read_text().splitlines()) > 1):
        time.sleep(0.002)  # the first rollout batch's row: the handler is installed, the run is mid-way
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=300) == 75, (tmp_path / "warned.log").read_text()[-3000:]
    stopped = [ln for ln in (tmp_path / "warned.log").read_text().splitlines() if ln.startswith("grpo: stopped on")]
    assert len(stopped) == 1 and "SIGUSR1" in stopped[0], (tmp_path / "warned.log").read_text()[-3000:]
    assert_incomplete(ws, st, grpo_ref)
    last = int(read_curve(curve)[-1]["step"])
    assert steps_present(root)[-1] == last < OVERLAY["grpo"]["max_steps"]  # saved where it stopped, not before

    out = run_stage(ws, GRPO)
    assert resumed_step(out, "grpo") == last
    assert_same_outputs(grpo_ref, ws, st)


def test_a_running_grpo_stage_streams_its_curve_and_writes_trackers_and_its_resolved_config(base_ws, tmp_path):
    ws = clone(base_ws, tmp_path / "ws")
    st = stage(ws, GRPO)
    curve, metrics = ws / st.plots[0], ws / st.metrics[0]
    proc = popen(stage_argv(ws, GRPO), ws, tmp_path / "run.log")
    seen = []  # the curve file's text whenever it changed before the run ended
    while proc.poll() is None:
        text = curve.read_text() if curve.exists() else None
        if text and not metrics.exists() and (not seen or seen[-1] != text):
            seen.append(text)
        time.sleep(0.002)
    assert proc.returncode == 0, (tmp_path / "run.log").read_text()[-3000:]
    final = curve.read_text()
    rows = len(final.splitlines()) - 1
    assert rows == OVERLAY["grpo"]["max_steps"] // OVERLAY["grpo"]["num_iterations"]  # one per rollout batch
    partial = {len(t.splitlines()) - 1 for t in seen} - {rows}
    assert len(partial) >= 2, f"the curve was not seen growing while the stage ran ({sorted(partial)})"
    assert all(final.startswith(t) and t.endswith("\n") for t in seen), "a row was rewritten or cut"

    log_dir = ws / dag.log_dir(GRPO)
    assert list((log_dir / "tensorboard").glob("events.out.tfevents.*")), "no TensorBoard event file"
    assert [s for s, _ in tensorboard_steps(log_dir, "reward")] == [int(r["step"]) for r in read_curve(curve)]
    assert json.loads((log_dir / "dvclive" / "metrics.json").read_text())["step"] == OVERLAY["grpo"]["max_steps"]
    resolved = yaml.safe_load((ws / f"data/grpo/{RUN}/config.yaml").read_text())
    gcfg, task, seed = config.load(ws / "params.yaml").run(RUN)
    assert resolved["grpo"] == json.loads(json.dumps(dataclasses.asdict(gcfg)))
    assert (resolved["run"], resolved["task"], resolved["seed"], resolved["profile"]) == (RUN, task, seed, "smoke")


def test_grpo_skips_a_truncated_latest_checkpoint_and_resumes_from_the_previous(base_ws, grpo_ref, tmp_path):
    ws = clone(base_ws, tmp_path / "ws")
    st, root = stage(ws, GRPO), ws / dag.checkpoints(GRPO)
    assert config.load(ws / "params.yaml").methods["rebrl"].save_total_limit >= 2
    proc = popen(stage_argv(ws, GRPO), ws, tmp_path / "killed.log")
    kill_after_checkpoints(proc, lambda: [root], 2, tmp_path / "killed.log")
    present = steps_present(root)
    assert len(present) >= 2, present
    newest = root / f"step-{present[-1]:08d}" / "model.safetensors"
    with open(newest, "r+b") as f:
        f.truncate(newest.stat().st_size // 2)

    out = run_stage(ws, GRPO)
    warnings = [ln for ln in out.splitlines() if ln.startswith("warning: skipping checkpoint")]
    assert len(warnings) == 1 and f"step-{present[-1]:08d}" in warnings[0], out[-3000:]
    assert "model.safetensors fails its checksum" in warnings[0]
    assert resumed_step(out, "grpo") == present[-2]
    assert_same_outputs(grpo_ref, ws, st)
    assert not root.exists()


def test_grpo_ignores_a_checkpoint_of_other_parameters_and_starts_from_scratch(base_ws, grpo_ref, tmp_path):
    ws = clone(base_ws, tmp_path / "ws")
    st, root = stage(ws, GRPO), ws / dag.checkpoints(GRPO)
    params = (ws / "params.yaml").read_text()
    raw = yaml.safe_load(params)
    raw["methods"]["rebrl"]["epsilon"] = 0.3
    (ws / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    proc = popen(stage_argv(ws, GRPO), ws, tmp_path / "stale.log")
    kill_after_checkpoints(proc, lambda: [root], 1, tmp_path / "stale.log")
    assert steps_present(root)

    (ws / "params.yaml").write_text(params)  # back to the reference's parameters
    out = run_stage(ws, GRPO)
    assert "resuming" not in out, out[-3000:]
    assert "it belongs to a run with other parameters or inputs" in out, out[-3000:]
    assert_same_outputs(grpo_ref, ws, st)
    assert not root.exists()


def test_sft_killed_after_a_checkpoint_resumes_to_the_uninterrupted_result(base_ws, tmp_path):
    ws = clone(base_ws, tmp_path / "ws", drop=("data/sft",))
    st, root = stage(ws, "sft"), ws / dag.checkpoints("sft")
    proc = popen(stage_argv(ws, "sft"), ws, tmp_path / "killed.log")
    kill_after_checkpoints(proc, lambda: [root], KILL_AFTER, tmp_path / "killed.log")
    assert_incomplete(ws, st, base_ws)
    present = steps_present(root)
    assert present and all(s % 5 == 0 for s in present), present

    out = run_stage(ws, "sft")
    assert resumed_step(out, "sft") == present[-1]
    assert_same_outputs(base_ws, ws, st)
    assert not root.exists()


def test_credit_of_rollouts_without_signal_is_readable_by_tables(base_ws, tmp_path):
    import pandas as pd

    ws = clone(base_ws, tmp_path / "ws")
    run_stage(ws, "rollout_sft_sudoku4")
    rollouts = [json.loads(line) for line in (ws / "data/rollout/sft/sudoku4.jsonl").read_text().splitlines()]
    scored = ws / "data/reward/sft/sudoku4.jsonl"
    scored.parent.mkdir(parents=True, exist_ok=True)
    scored.write_text("".join(json.dumps({**r, "reward": 0.0}) + "\n" for r in rollouts))
    run_stage(ws, "credit_rebrl_sudoku4")
    pd.read_csv(ws / "data/credit/rebrl/sudoku4.csv")  # what stages/tables.py does with every --credit file


# ------------------------------------------------------------------------------------------------ engines

# one task, two methods, one seed: a dozen jobs (in the overlay, which has the last word). SFT runs 40 steps as in
# the stage tests: after smoke's 10 steps every SFT rollout scores 0, the credit stages write empty CSVs and the
# tables stage fails (test_credit_of_rollouts_without_signal_is_readable_by_tables)
ENGINE_OVERLAY = {
    "tasks": ["sudoku4"],
    "sft": OVERLAY["sft"],
    "grpo": {**OVERLAY["grpo"], "methods": ["diffu_grpo", "rebrl"], "seeds": [0]},
    "image": {"tasks": []},  # text only: the kill/resume machinery is the same for image runs
}


def grpo_roots(ws: Path):
    """A function listing the GRPO checkpoint roots of ``ws`` now."""

    def roots() -> list[Path]:
        try:
            return sorted((ws / "data" / "checkpoints").glob("grpo_*"))
        except FileNotFoundError:
            return []

    return roots


def resumable(ws: Path) -> set[str]:
    """Stage names with a complete checkpoint now."""
    return {r.name for r in grpo_roots(ws)() if steps_present(r)}


@pytest.fixture(scope="module")
def snakemake_killed(tmp_path_factory):
    """A smoke workspace whose ``snakemake --cores 2`` was SIGKILLed (the whole process group) once a GRPO job had
    written a checkpoint. Returns (workspace, stages with a checkpoint at the kill)."""
    tmp = tmp_path_factory.mktemp("smk_kill")
    ws = make_workspace(tmp / "ws", ENGINE_OVERLAY)
    profile = REPO / "workflow" / "profiles" / "default" / "config.yaml"
    assert profile.exists() and yaml.safe_load(profile.read_text()).get("rerun-incomplete") is True
    log = tmp / "killed.log"
    proc = popen([BIN / "snakemake", "--cores", "2"], ws, log)
    kill_after_checkpoints(proc, grpo_roots(ws), KILL_AFTER, log)
    killed = resumable(ws)
    assert killed
    for st in dag.build(config.load(ws / "params.yaml")):
        if st.name in killed:
            assert_incomplete(ws, st)
    return ws, killed


def test_snakemake_killed_mid_grpo_completes_on_rerun_with_identical_results(snakemake_killed, tmp_path):
    ws, killed = snakemake_killed
    # a SIGKILLed snakemake leaves its locks behind: clear them (what the user is told to do), then rerun
    run([BIN / "snakemake", "--cores", "2", "--unlock"], ws)
    out = run([BIN / "snakemake", "--cores", "2", "--rerun-incomplete"], ws, check=False)
    assert out.returncode == 0, f"rerun after the kill failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    assert (ws / "data" / "tables" / "text_table.md").exists()
    assert not list(grpo_roots(ws)()), "checkpoints left behind"
    for name in killed:
        assert "resuming grpo from" in (ws / "logs" / f"{name}.log").read_text(), name

    # reference: the same workspace, every GRPO job and the evaluation of its policy rerun uninterrupted
    ref = clone(ws, tmp_path / "ref")
    stages = dag.build(config.load(ws / "params.yaml"))
    grpo_jobs = [s.name for s in stages if s.script == "stages/grpo.py"]
    evals = [m for s in stages if s.name in {f"evaluate_{g[5:]}" for g in grpo_jobs} for m in s.metrics]
    assert len(evals) == len(grpo_jobs) == 2
    forced = [s.metrics[0] for s in stages if s.name in grpo_jobs]  # --forcerun takes rules (kinds) or files
    run([BIN / "snakemake", "--cores", "2", *evals, "--forcerun", *forced], ref)
    for name in grpo_jobs:
        assert "resuming" not in (ref / "logs" / f"{name}.log").read_text()
    metrics = sorted(p.relative_to(ws) for p in ws.glob("data/grpo/*/metrics.json"))
    evals = sorted(p.relative_to(ws) for p in ws.glob("data/evaluate/*/*.json"))
    assert len(metrics) == 2 and len(evals) == 4
    for rel in (*metrics, *evals):
        assert public(json.loads((ws / rel).read_text())) == public(json.loads((ref / rel).read_text())), rel
    for rel in metrics:
        assert read_curve(ws / rel.parent / "curve.csv") == read_curve(ref / rel.parent / "curve.csv")
        assert_same_weights(ws / rel.parent / "model", ref / rel.parent / "model")


def test_dvc_repro_killed_mid_grpo_completes_and_resumes_on_rerun(tmp_path):
    ws = make_workspace(tmp_path / "ws", deep_merge(ENGINE_OVERLAY, {"grpo": {"methods": ["rebrl"]}}), export=True)
    run(["git", "init", "-q"], ws)
    run([BIN / "dvc", "init", "-q"], ws)
    log = tmp_path / "killed.log"
    proc = popen([BIN / "dvc", "repro"], ws, log)
    kill_after_checkpoints(proc, grpo_roots(ws), KILL_AFTER, log)
    assert resumable(ws) == {GRPO}
    assert not (ws / f"data/grpo/{RUN}/metrics.json").exists()

    dvc_yaml = (ws / "dvc.yaml").read_text()
    out = run([BIN / "dvc", "repro"], ws, check=False)
    text = out.stdout + out.stderr
    assert out.returncode == 0, f"dvc repro after the kill failed:\n{text[-4000:]}"
    assert "resuming grpo from" in text, text[-4000:]
    assert (ws / "data" / "tables" / "text_table.md").exists()
    assert not list(grpo_roots(ws)()), "checkpoints left behind"
    assert "up to date" in run([BIN / "dvc", "status"], ws).stdout
    assert (ws / "dvc.yaml").read_text() == dvc_yaml, "a stage (DVCLive?) edited dvc.yaml"
    assert list((ws / dag.log_dir(GRPO) / "dvclive").glob("plots/metrics/*.tsv")), "DVCLive wrote no curve"
