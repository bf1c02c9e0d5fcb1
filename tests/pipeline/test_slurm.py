"""The pipeline through a real SLURM scheduler: `snakemake --profile workflow/profiles/slurm` on the smoke profile,
against the two-node SLURM that .ci/slurm.sh starts (munge, slurmctld, two slurmd; no accounting), with the account and
partitions given as docs/distributed.md tells users (environment variables; no tracked file edited).

* Every kind of stage is submitted with its own resources (what slurmctld recorded for each job equals the shipped
  profile's default-resources and set-resources for its rule), a second run has nothing to do, and every result
  equals the local run's (tests/pipeline/conftest.py's smoke workspace).
* A job cancelled with scancel ends Snakemake's wait with the plugin's error naming the job and its state.
* A GRPO job warned by ``--signal=USR1`` before its SLURM time limit checkpoints and stops (the signal's way through
  the plugin's srun step), its retry resumes from that step and is killed by its limit, and the third attempt
  resumes from its newest checkpoint (Snakemake's `retries`): weights (SHA-256), curve and metrics equal an
  uninterrupted run.

Skipped, with the reason, where no SLURM is running or the [slurm] extra is missing (a laptop). The fault tests (the
time-limit signal, a lost node, a requeued job, a hung rank: about 8 minutes of test time, mostly waiting for SLURM's
one-minute limits, node timeouts and credential expiry) run where ``DDMRL_SLURM_FAULTS=1`` is set: locally before a
change to the launch, checkpoint or SLURM code lands; CI runs the others (its 30 minutes would not hold them all).
The DAG is cut to two text methods and one image method (every kind of stage, 15 jobs) to keep CI short.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from helpers import BIN, ENV, copy_repo, edit_params, run
from stage_outputs import assert_same_outputs, read_table, steps_present

from ddmrl.config import load
from ddmrl.pipeline import dag, export

PROFILE = Path("workflow/profiles/slurm")
#: how a user gives the account and partitions (workflow/profiles/slurm/config.yaml; .ci/slurm.sh's partitions)
USER_ENV = {"DDMRL_SLURM_ACCOUNT": "ddmrl-ci", "DDMRL_SLURM_CPU_PARTITION": "cpu", "DDMRL_SLURM_GPU_PARTITION": "gpu"}
SLURM_ENV = {**ENV, **USER_ENV}
#: the plugin's first status check after a submission (default 40 s): short, so the test does not idle
FAST = ("--slurm-init-seconds-before-status-checks", "2")
TEXT_METHODS, IMAGE_METHODS = ["rebrl", "spg"], ["rebrl"]
RUN = "rebrl_sudoku4_s0"
GRPO = f"grpo_{RUN}"
#: GRPO runs long enough to outlive a 1-minute time limit (about 110 s of steps here, after 10-20 s of start-up),
#: checkpointing every 6 s or so (a methods section cannot change the budget, so this goes in the profile's grpo:)
LONG_RUN = {"max_steps": 700, "num_prompts": 16, "num_generations": 16, "save_steps": 40}
#: the warned run's steps (about 145 s of them where LONG_RUN's take 110 s): attempt 1 trains until the signal (29 to
#: 59 s after it starts: slurmctld looks at time limits every 30 s), attempt 2 until its limit (60 to 90 s), less their
#: start-ups; the third attempt must still have steps left
WARNED_STEPS = 900
#: the GRPO stage's lines when it stops on SIGUSR1 (ddmrl.training.preempt) and when it resumes (the step)
STOPPED = r"^grpo: stopped on SIGUSR1 after step (\d+), its state saved"
RESUMED = r"^resuming grpo from .* \(step (\d+)\)$"


def slurm_missing() -> str | None:
    """Why the SLURM tests cannot run here, or None."""
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return 'no snakemake-executor-plugin-slurm (pip install -e ".[slurm]")'
    if not (shutil.which("sbatch") and shutil.which("sinfo")):
        return "no SLURM client (sbatch, sinfo): .ci/slurm.sh installs and starts a two-node SLURM"
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"sinfo failed ({e})"
    if not re.search(r"^(idle|mix|alloc)", states, flags=re.M):
        return f"no SLURM node up (sinfo: {states.split() or 'no answer'}): run .ci/slurm.sh as root"
    return None


MISSING = slurm_missing()
pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]


# ------------------------------------------------------------------------------------------------ helpers


def snakemake_slurm(ws: Path, *args, profile: Path = PROFILE, check: bool = True) -> subprocess.CompletedProcess:
    return run([BIN / "snakemake", "--profile", profile, *FAST, *args], ws, check=check, timeout=900, env=SLURM_ENV)


def popen_slurm(ws: Path, log: Path, *args, profile: Path = PROFILE) -> subprocess.Popen:
    with open(log, "w") as f:
        cmd = [BIN / "snakemake", "--profile", profile, *FAST, *args]
        return subprocess.Popen([str(c) for c in cmd], cwd=ws, stdout=f, stderr=subprocess.STDOUT, env=SLURM_ENV)


def jobs_of(ws: Path) -> list[dict[str, str]]:
    """What slurmctld holds on every job submitted from ``ws`` (``scontrol show job``; finished jobs stay for
    MinJobAge, an hour under .ci/slurm.sh), oldest first."""
    out = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, check=True).stdout
    jobs = [dict(kv.split("=", 1) for kv in line.split() if "=" in kv) for line in out.splitlines() if line.strip()]
    return sorted((j for j in jobs if j.get("WorkDir") == str(ws)), key=lambda j: int(j["JobId"]))


def rule_of(job: dict[str, str]) -> str:
    """The rule of a job from the plugin's comment (``rule_<name>_wildcards_...``)."""
    return re.sub(r"_wildcards_.*$", "", job["Comment"]).removeprefix("rule_")


def minutes(limit: str) -> int:
    """SLURM's ``[D-]HH:MM:SS`` time limit in minutes."""
    days, _, hms = limit.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return int(days or 0) * 1440 + h * 60 + m + (s > 0)


def seconds(elapsed: str) -> int:
    """SLURM's ``[D-]HH:MM:SS`` run time in seconds."""
    days, _, hms = elapsed.rpartition("-")
    h, m, sec = (int(x) for x in hms.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + sec


def megabytes(mem: str) -> int:
    """SLURM's ``MinMemoryNode`` (``32000M``, ``62.50G``) in MB."""
    scale = {"M": 1, "G": 1024, "T": 1024 * 1024}
    return round(float(mem[:-1]) * scale[mem[-1]])


def gpus(job: dict[str, str]) -> int:
    m = re.search(r"gpu:(\d+)", job.get("TresPerJob", "") + job.get("TresPerNode", ""))
    return int(m.group(1)) if m else 0


def granted(job: dict[str, str]) -> dict:
    """What one job was given: account, partition, minutes, MB, CPUs per task, GPUs."""
    return {
        "slurm_account": job["Account"],
        "slurm_partition": job["Partition"],
        "runtime": minutes(job["TimeLimit"]),
        "mem_mb": megabytes(job["MinMemoryNode"]),
        "cpus_per_task": int(job["CPUs/Task"]),
        "gpu": gpus(job),
    }


def requested(profile: dict, rule: str, env: dict[str, str]) -> dict:
    """What the profile asks for a rule's jobs: default-resources under set-resources, $VARs from ``env``."""
    merged = {"gpu": 0, **profile["default-resources"], **(profile.get("set-resources") or {}).get(rule, {})}
    keys = ("slurm_account", "slurm_partition", "runtime", "mem_mb", "cpus_per_task", "gpu")
    return {
        k: re.sub(r"\$(\w+)", lambda m: env[m.group(1)], v) if isinstance(v, str) else v
        for k, v in merged.items()
        if k in keys
    }


def table_rows(path: Path) -> dict[str, dict[str, str]]:
    """The table's rows by their first column, without its wall-clock column (``stage_outputs.read_table``: the RL
    wall time per run, 0 s through SLURM where it was 1 s locally) and without the columns that measure a row against
    another method (the image table's "samples to UniGRPO's final reward" is empty where UniGRPO did not run, as in
    the cut DAG)."""
    rows = read_table(path)
    return {label: {k: v for k, v in row.items() if not k.startswith("samples to ")} for label, row in rows.items()}


def slurm_workspace(dst: Path) -> Path:
    """A smoke workspace (as tests/pipeline/conftest.py's) cut to TEXT_METHODS and IMAGE_METHODS."""
    ws = copy_repo(dst, profile="smoke")
    edit_params(ws, lambda raw: raw["grpo"].update(methods=TEXT_METHODS))
    edit_params(ws, lambda raw: raw["image"].update(methods=IMAGE_METHODS), file="profiles/smoke.yaml")
    assert export.main(["--params", str(ws / "params.yaml")]) == 0
    run(["git", "init", "-q"], ws)
    return ws


def lengthen(ws: Path, **grpo) -> None:
    """Every GRPO run made long (LONG_RUN, then ``grpo``); the tests then ask for one of them (a target)."""
    edit_params(ws, lambda raw: raw["grpo"].update({**LONG_RUN, **grpo}), file="profiles/smoke.yaml")


def read(path: Path) -> str:
    """A file's text, or "" where it is not (yet) there."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def slurm_log(ws: Path, job: dict[str, str]) -> str:
    """The job's own SLURM log (the plugin's ``--output``: .snakemake/slurm_logs/rule_<rule>/.../<id>.log)."""
    (path,) = (ws / ".snakemake/slurm_logs").rglob(f"{job['JobId']}.log")
    return path.read_text()


def wait_for(what, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None, every=0.5):
    """Poll ``what()`` until it returns something truthy; fail after ``timeout`` s or when ``proc`` ends first."""
    deadline = time.monotonic() + timeout
    while not (found := what()):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"snakemake ended (rc {proc.returncode}) first:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s" + (f":\n{log.read_text()[-3000:]}" if log else ""))
        time.sleep(every)
    return found


def running_job(ws: Path, rule: str, after: int = 0) -> dict | None:
    """The newest RUNNING job of ``rule`` in ``ws`` with a JobId above ``after``."""
    mine = [j for j in jobs_of(ws) if rule_of(j) == rule and int(j["JobId"]) > after and j["JobState"] == "RUNNING"]
    return mine[-1] if mine else None


# ------------------------------------------------------------------------------------------------ the smoke DAG


@pytest.fixture(scope="module")
def slurm_ws(tmp_path_factory) -> Path:
    ws = slurm_workspace(tmp_path_factory.mktemp("slurm") / "ws")
    t0 = time.monotonic()
    out = snakemake_slurm(ws)
    (ws / "snakemake.log").write_text(out.stdout + out.stderr + f"\nwall: {time.monotonic() - t0:.0f} s\n")
    return ws


def test_every_kind_of_stage_is_submitted_with_its_own_resources(slurm_ws):
    stages = dag.build(load(slurm_ws / "params.yaml"))
    profile = yaml.safe_load((slurm_ws / PROFILE / "config.yaml").read_text())
    jobs = jobs_of(slurm_ws)
    assert sorted(rule_of(j) for j in jobs) == sorted(s.kind for s in stages), "one submission per stage"
    assert all(j["JobState"] == "COMPLETED" for j in jobs)
    for job in jobs:
        assert granted(job) == requested(profile, rule_of(job), USER_ENV), rule_of(job)
    kinds = {rule_of(j): tuple(granted(j).values()) for j in jobs}
    assert len(set(kinds.values())) >= 5, "the kinds of stage did not get their own resources"


def test_second_run_through_slurm_has_nothing_to_do(slurm_ws):
    before = len(jobs_of(slurm_ws))
    out = snakemake_slurm(slurm_ws)
    assert "Nothing to be done" in out.stdout + out.stderr
    assert len(jobs_of(slurm_ws)) == before, "a job was submitted"


def test_results_through_slurm_equal_the_local_run(slurm_ws, smoke_workspace):
    """Every stage's metrics, curves and weights, and the tables' rows, as the local smoke run (which runs every
    method; each run's results do not depend on which others run), but for their wall-clock figures."""
    for stage in dag.build(load(slurm_ws / "params.yaml")):
        if stage.kind != "tables":
            assert_same_outputs(smoke_workspace, slurm_ws, stage)
    for name in ("text_table.csv", "image_table.csv"):
        mine, local = table_rows(slurm_ws / "data/tables" / name), table_rows(smoke_workspace / "data/tables" / name)
        assert len(mine) >= 2 and all(local[k] == row for k, row in mine.items()), name


def test_a_cancelled_job_ends_snakemakes_wait_with_a_clear_error(slurm_ws, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(slurm_ws, ws, symlinks=True)
    lengthen(ws)
    log = tmp_path / "snakemake.log"
    proc = popen_slurm(ws, log, f"data/grpo/{RUN}/metrics.json")
    try:
        job = wait_for(lambda: running_job(ws, "grpo"), 120, proc, log)
        subprocess.run(["scancel", job["JobId"]], check=True)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = log.read_text()
    assert rc != 0
    assert f"SLURM-job '{job['JobId']}' failed, SLURM status is: 'CANCELLED'" in out, out[-3000:]
    assert "Error in rule grpo" in out


# ------------------------------------------------------------------------------------------------ resume


def user_profile(dst: Path, src: Path, grpo: dict, **top) -> Path:
    """A user's profile copied from the shipped one, with ``grpo`` set-resources and ``top`` keys changed."""
    raw = yaml.safe_load(src.read_text())
    raw["set-resources"]["grpo"].update(grpo)
    raw.update(top)
    dst.mkdir(parents=True)
    (dst / "config.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return dst


#: the fault tests, on where DDMRL_SLURM_FAULTS is set (the module's docstring says why)
faults = pytest.mark.skipif(not os.environ.get("DDMRL_SLURM_FAULTS"), reason="a SLURM fault: DDMRL_SLURM_FAULTS=1")


@faults
def test_grpo_warned_before_its_time_limit_then_past_it_resumes_to_the_uninterrupted_result(slurm_ws, tmp_path):
    """Attempt 1 has a 1-minute limit and ``--signal=USR1@1`` (the shipped profile's ``@600``, shortened): the signal
    reaches the stage through the plugin's srun step, which checkpoints at the end of its rollout batch, prints its
    line and exits 75; the job ends FAILED before its limit. Attempt 2 (1 minute, no signal) resumes from exactly that
    step and is killed by its limit after checkpoints of its own (TIMEOUT); attempt 3 (30 minutes) resumes from its
    newest and finishes. Snakemake's ``retries`` resubmit; the result equals an uninterrupted local run's."""
    ws, ref = tmp_path / "ws", tmp_path / "ref"
    for dst in (ws, ref):
        shutil.copytree(slurm_ws, dst, symlinks=True)
        lengthen(dst, max_steps=WARNED_STEPS)
    target = f"data/grpo/{RUN}/metrics.json"
    reference = subprocess.Popen(
        [str(BIN / "snakemake"), "--cores", "1", target], cwd=ref, env=ENV, stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    limits = {"runtime": "1 if attempt <= 2 else 30", "slurm_extra": "'--signal=USR1@1' if attempt == 1 else ''"}
    profile = user_profile(tmp_path / "profile", ws / PROFILE / "config.yaml", limits, retries=3)
    log, stage_log, root = tmp_path / "snakemake.log", ws / f"logs/{GRPO}.log", ws / dag.checkpoints(GRPO)
    t0 = time.monotonic()
    proc = popen_slurm(ws, log, target, profile=profile)
    try:
        first = wait_for(lambda: running_job(ws, "grpo"), 120, proc, log)
        stopped = wait_for(lambda: re.search(STOPPED, read(stage_log), re.M), 150, proc, log, every=0.1)
        warned = int(stopped.group(1))
        second = wait_for(lambda: running_job(ws, "grpo", after=int(first["JobId"])), 120, proc, log)
        resumed = wait_for(lambda: re.search(RESUMED, read(stage_log), re.M), 120, proc, log, every=0.1)
        assert int(resumed.group(1)) == warned, "attempt 2 did not resume from the checkpoint saved on the signal"
        assert proc.wait(timeout=420) == 0, log.read_text()[-3000:]
        assert reference.wait(timeout=300) == 0
    finally:
        for p in (proc, reference):
            if p.poll() is None:
                p.kill()
    wall = time.monotonic() - t0
    out = log.read_text()
    attempts = [j for j in jobs_of(ws) if rule_of(j) == "grpo"]
    assert [j["JobState"] for j in attempts] == ["FAILED", "TIMEOUT", "COMPLETED"], out[-3000:]
    assert [minutes(j["TimeLimit"]) for j in attempts] == [1, 1, 30]
    # attempt 1 stopped itself before its limit: the stage's 75 reaches SLURM as the job step's 1 (Snakemake's error)
    assert attempts[0]["ExitCode"] == "1:0" and seconds(attempts[0]["RunTime"]) < 60, attempts[0]
    assert "DUE TO TIME LIMIT" not in slurm_log(ws, first) and "DUE TO TIME LIMIT" in slurm_log(ws, second)
    assert f"SLURM-job '{first['JobId']}' failed, SLURM status is: 'FAILED'" in out
    assert f"SLURM-job '{second['JobId']}' failed, SLURM status is: 'TIMEOUT'" in out
    last = re.findall(RESUMED, stage_log.read_text(), re.M)
    assert len(last) == 1 and int(last[0]) > warned, "the last attempt did not resume from attempt 2's checkpoint"
    assert_same_outputs(ref, ws, next(s for s in dag.build(load(ws / "params.yaml")) if s.name == GRPO))
    assert not root.exists(), "checkpoints left after the run finished"
    print(f"warned, past its limit, resumed through SLURM: {wall:.0f} s (stopped on the signal after step {warned})")


# ------------------------------------------------------------------------------------------------ across two nodes
#
# The smoke DAG's rebrl GRPO run with `launch: {num_machines: 2, num_processes: 2}` on the two-node SLURM of
# .ci/slurm.sh: one job of two nodes, srun starting one launcher (one process, gloo on CPU) on each; its weights, curve
# and metrics against the one-node two-process run of the same global batch (a local run, beside it). The fault tests
# reuse its result as the uninterrupted run (the same params). A node lost mid-run and a requeued job resume from the
# newest checkpoint; a stopped (hung) rank ends the job with the collective's timeout error.

#: the launch of each (cpu_2proc.yaml: torchrun's launcher with use_cpu; the workspaces have no configs/ of their own)
CPU_2PROC = str(Path(__file__).resolve().parents[2] / "configs/accelerate/cpu_2proc.yaml")
ONE_NODE = {"launcher": "accelerate", "config_file": CPU_2PROC, "num_processes": 2}
TWO_NODES = {**ONE_NODE, "num_machines": 2}
#: long enough to be interrupted after a checkpoint (about 8 s of steps: 0.05 s each on one node), short enough for CI
NODE_RUN = {"max_steps": 160, "save_steps": 10}
NODES = ("ddmrl-n1", "ddmrl-n2")
TARGET = f"data/grpo/{RUN}/metrics.json"


def nodes_up() -> list[str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "cpu", "-o", "%N %t"], capture_output=True, text=True).stdout
    return [n for n, state in (line.split() for line in out.splitlines()) if state in ("idle", "mix", "alloc")]


two_nodes = pytest.mark.skipif(
    MISSING is not None or sorted(nodes_up()) != list(NODES), reason="needs the two-node SLURM of .ci/slurm.sh"
)


def launched(ws: Path, launch: dict, **grpo) -> Path:
    """``ws`` with the rebrl run launched by ``launch`` and the grpo keys ``grpo`` (NODE_RUN by default)."""

    def edit(raw):
        raw["grpo"].update({**NODE_RUN, **grpo})
        raw.setdefault("methods", {}).setdefault("rebrl", {})["launch"] = launch

    edit_params(ws, edit, file="profiles/smoke.yaml")
    return ws


def copied(src: Path, dst: Path, launch: dict, **grpo) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return launched(dst, launch, **grpo)


def grpo_stage(ws: Path) -> dag.Stage:
    return next(s for s in dag.build(load(ws / "params.yaml")) if s.name == GRPO)


@pytest.fixture(scope="module")
def two_node_run(slurm_ws, tmp_path_factory) -> tuple[Path, Path]:
    """The rebrl run across two nodes through SLURM, and the one-node two-process run of the same params (local)."""
    root = tmp_path_factory.mktemp("nodes")
    ws, ref = copied(slurm_ws, root / "ws", TWO_NODES), copied(slurm_ws, root / "ref", ONE_NODE)
    t0 = time.monotonic()
    reference = subprocess.Popen(
        [str(BIN / "snakemake"), "--cores", "2", TARGET], cwd=ref, env=ENV, stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    out = snakemake_slurm(ws, TARGET)
    assert reference.wait(timeout=600) == 0
    (ws / "snakemake.log").write_text(out.stdout + out.stderr + f"\nwall: {time.monotonic() - t0:.0f} s\n")
    print(f"two-node GRPO through SLURM and the local reference: {time.monotonic() - t0:.0f} s")
    return ws, ref


@two_nodes
def test_a_grpo_run_across_two_nodes_equals_the_one_node_two_process_run(two_node_run):
    ws, ref = two_node_run
    stage = grpo_stage(ws)
    assert stage.cmd.startswith("srun --nodes 2 --ntasks 2 --ntasks-per-node 1 ")
    (job,) = [j for j in jobs_of(ws) if rule_of(j) == "grpo"]
    assert job["JobState"] == "COMPLETED"
    # two nodes with the profile's resources: per node its CPUs per task, memory and one GPU (gres), one task each
    profile = yaml.safe_load((ws / PROFILE / "config.yaml").read_text())
    asked = requested(profile, "grpo", USER_ENV)
    assert (job["NumNodes"], job["NumTasks"], job["NodeList"]) == ("2", "2", "ddmrl-n[1-2]"), job
    assert job["TresPerNode"] == "gres:gpu:1" and int(job["CPUs/Task"]) == asked["cpus_per_task"], job
    assert megabytes(job["MinMemoryNode"]) == asked["mem_mb"] and job["Partition"] == asked["slurm_partition"]
    log = (ws / f"logs/{GRPO}.log").read_text()
    # one launcher on each node (its host name: the node's), ranks 1 and 2 of 2
    assert re.search(
        r"^node 0 \(ddmrl-n1\): accelerate launch --machine_rank 0 --main_process_ip 10\.77\.0\.11 ", log, re.M
    )
    assert re.search(
        r"^node 1 \(ddmrl-n2\): accelerate launch --machine_rank 1 --main_process_ip 10\.77\.0\.11 ", log, re.M
    )
    assert "grpo: process 1/2 on cpu" in log and "grpo: process 2/2 on cpu" in log
    assert json.loads((ws / TARGET).read_text())["num_processes"] == 2
    assert_same_outputs(ref, ws, stage)
    assert not (ws / dag.checkpoints(GRPO)).exists(), "checkpoints left after the run finished"


# ------------------------------------------------------------------------------------------------ faults across nodes


def checkpointed(ws: Path, step: int):
    """A predicate: the run in ``ws`` has a complete checkpoint at ``step`` or later (its newest step, or None)."""
    root = ws / dag.checkpoints(GRPO)
    return lambda: next((s for s in reversed(steps_present(root)) if s >= step), None)


def kill_node(node: str) -> None:
    """The node lost: its slurmd and every process in its network namespace (the job's) killed at once."""
    pids = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True, check=True).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def start_node(node: str) -> None:
    """The node back: its slurmd in its namespace (as .ci/slurm.sh starts it); SLURM returns it to service."""
    sh = f"hostname {node} && exec slurmd -N {node}"
    subprocess.run(["nsenter", f"--net=/run/netns/{node}", "unshare", "--uts", "sh", "-c", sh], check=True)
    wait_for(lambda: node in nodes_up(), 60)


def worker_of(ws: Path, rank: int) -> int:
    """The pid of the training process of global rank ``rank`` running in ``ws`` (whichever node it is on)."""
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or (proc / "cwd").resolve() != ws:
                continue
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"stages/grpo.py") for a in argv) and f"RANK={rank}".encode() in env:
            if not any(a.endswith(b"accelerate") or b"torch.distributed.run" in a for a in argv):
                return int(proc.name)
    raise AssertionError(f"no rank-{rank} process in {ws}")


def ended(ws: Path, state: str, proc: subprocess.Popen, log: Path, timeout: float = 420) -> list[dict[str, str]]:
    """Wait until the newest grpo job in ``ws`` has ended in ``state``, then stop Snakemake (SIGTERM) rather than wait
    for its next status check (the plugin's interval grows by 10 s at every check without news, so it notices a job's
    end up to a minute late; that it notices at all is tested above). Returns the grpo jobs, oldest first."""

    def newest():
        jobs = [j for j in jobs_of(ws) if rule_of(j) == "grpo"]
        return jobs if jobs and jobs[-1]["JobState"] == state else None

    try:
        return wait_for(newest, timeout, proc, log, every=1)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # it may be cancelling jobs that have ended anyway
                proc.kill()
                proc.wait()


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="kills and restarts a node's slurmd (root)")


@faults
@two_nodes
@root_only
def test_a_node_lost_mid_run_is_retried_from_the_newest_checkpoint(two_node_run, slurm_ws, tmp_path):
    """The second node's slurmd and the job's processes there are killed after a checkpoint: the first node's rank
    fails on its lost peer, the job fails (JobRequeue=0: SLURM does not requeue it), the node comes back, Snakemake's
    ``retries`` resubmit, and the retry resumes from the newest checkpoint to the uninterrupted run's result."""
    done, _ = two_node_run
    ws = copied(slurm_ws, tmp_path / "ws", TWO_NODES)
    profile = user_profile(tmp_path / "profile", ws / PROFILE / "config.yaml", {}, retries=2)
    log, stage_log = tmp_path / "snakemake.log", ws / f"logs/{GRPO}.log"
    t0 = time.monotonic()
    proc = popen_slurm(ws, log, TARGET, profile=profile)
    try:
        first = wait_for(lambda: running_job(ws, "grpo"), 120, proc, log)
        saved = wait_for(checkpointed(ws, 40), 240, proc, log, every=0.1)
        kill_node(NODES[1])
        wait_for(lambda: next(j for j in jobs_of(ws) if j["JobId"] == first["JobId"])["JobState"] != "RUNNING", 120)
        start_node(NODES[1])
        attempts = ended(ws, "COMPLETED", proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
        if NODES[1] not in nodes_up():
            start_node(NODES[1])
    assert len(attempts) == 2 and attempts[0]["JobState"] in ("FAILED", "NODE_FAIL"), attempts
    assert attempts[1]["JobState"] == "COMPLETED" and attempts[1]["NodeList"] == "ddmrl-n[1-2]"
    resumed = {int(step) for step in re.findall(RESUMED, stage_log.read_text(), re.M)}  # the line of each process
    assert len(resumed) == 1 and min(resumed) >= saved, "the retry did not resume from the newest checkpoint"
    assert_same_outputs(done, ws, grpo_stage(ws))
    print(f"node lost after step {saved}, retried and resumed: {time.monotonic() - t0:.0f} s")


@faults
@two_nodes
def test_a_requeued_job_resumes_from_the_newest_checkpoint(two_node_run, slurm_ws, tmp_path):
    """``scontrol requeue`` on the running two-node job (requeueable: the plugin's ``slurm-requeue``): SLURM ends it
    and runs it again under the same id, Snakemake waits on, and the run resumes to the uninterrupted result."""
    done, _ = two_node_run
    ws = copied(slurm_ws, tmp_path / "ws", TWO_NODES)
    profile = user_profile(tmp_path / "profile", ws / PROFILE / "config.yaml", {}, **{"slurm-requeue": True})
    log, stage_log = tmp_path / "snakemake.log", ws / f"logs/{GRPO}.log"
    t0 = time.monotonic()
    proc = popen_slurm(ws, log, TARGET, profile=profile)
    try:
        job = wait_for(lambda: running_job(ws, "grpo"), 120, proc, log)
        saved = wait_for(checkpointed(ws, 40), 240, proc, log, every=0.1)
        subprocess.run(["scontrol", "requeue", job["JobId"]], check=True)
        (again,) = ended(ws, "COMPLETED", proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert again["JobId"] == job["JobId"] and again["Restarts"] == "1" and again["JobState"] == "COMPLETED", again
    resumed = {int(step) for step in re.findall(RESUMED, stage_log.read_text(), re.M)}  # the line of each process
    assert len(resumed) == 1 and min(resumed) >= saved, "the requeued job did not resume from its checkpoint"
    assert_same_outputs(done, ws, grpo_stage(ws))
    print(f"requeued after step {saved}, resumed: {time.monotonic() - t0:.0f} s")


#: the hang test's collective timeout (launch.timeout_s), and how long after it the job must have ended
HANG_TIMEOUT_S, HANG_GRACE_S = 20, 40


@faults
@two_nodes
@root_only
def test_a_hung_rank_ends_the_job_with_the_collective_timeout_error(slurm_ws, tmp_path):
    """Rank 1 (on the second node) stopped (SIGSTOP) mid-run: rank 0 waits in its next collective for
    ``launch.timeout_s``, fails with gloo's timeout error, srun (``--kill-on-bad-exit``) ends the other node's task,
    and the job ends FAILED within the timeout and a grace period, never waiting on."""
    ws = copied(slurm_ws, tmp_path / "ws", {**TWO_NODES, "timeout_s": HANG_TIMEOUT_S})
    log, stage_log = tmp_path / "snakemake.log", ws / f"logs/{GRPO}.log"
    proc = popen_slurm(ws, log, TARGET)
    try:
        job = wait_for(lambda: running_job(ws, "grpo"), 120, proc, log)
        wait_for(checkpointed(ws, 20), 240, proc, log, every=0.1)
        os.kill(worker_of(ws, 1), signal.SIGSTOP)
        stopped = datetime.now().replace(microsecond=0)  # slurmctld's clock and resolution (this machine's)
        (job,) = ended(ws, "FAILED", proc, log, timeout=HANG_TIMEOUT_S + HANG_GRACE_S + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    waited = (datetime.fromisoformat(job["EndTime"]) - stopped).total_seconds()
    assert waited < HANG_TIMEOUT_S + HANG_GRACE_S, f"the job ended {waited:.0f} s after the stop"
    assert f"Timed out waiting {HANG_TIMEOUT_S * 1000}ms" in stage_log.read_text(), stage_log.read_text()[-3000:]
    print(f"hung rank: the job ended {waited:.0f} s after the stop (timeout {HANG_TIMEOUT_S} s)")
