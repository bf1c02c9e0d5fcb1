"""Workspaces (temporary copies of the repository) and what both engines plan in them, for the pipeline tests."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from ddmrl.config import load
from ddmrl.pipeline import dag, export

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ENV = {
    **os.environ,
    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    "DVC_NO_ANALYTICS": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
}
COPIED = ("profiles", "workflow", "stages", "src", ".dvc/config", ".dvc/.gitignore", ".dvc/plots", ".dvcignore")


def copy_repo(dst: Path, profile: str | None = None, git: bool = False) -> Path:
    """params.yaml (with ``profile`` when given), profiles/, workflow/, stages/, src/ and DVC's config into
    ``dst``; with ``git`` a git repository with everything committed (DVC's experiments need one)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".snakemake")
    dst.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=ignore)
        else:
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)
    shutil.copy2(REPO / "params.yaml", dst / "params.yaml")
    shutil.copy2(REPO / ".gitignore", dst / ".gitignore")
    edit_params(dst, one_seed_every_method)
    if profile is not None:
        edit_params(dst, lambda raw: raw.update(profile=profile))
    if git:
        run(["git", "init", "-q"], dst)
        commit(dst, "workspace")
    return dst


def one_seed_every_method(raw: dict) -> None:
    """The sweep the pipeline tests assume, in params.yaml itself (so DVC interpolates it): every method, one seed,
    image runs following grpo.seeds; the main job runs the four core methods with three seeds."""
    raw["grpo"].update(
        methods=["diffu_grpo", "unigrpo", "maskgrpo", "rebrl", "tracerl", "gdpo", "spg", "wd1"], seeds=[0]
    )
    raw["image"].pop("seeds", None)


def commit(root: Path, message: str) -> None:
    run(["git", "add", "-A"], root)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message], root)


def edit_params(root: Path, edit, file: str = "params.yaml") -> None:
    path = root / file
    raw = yaml.safe_load(path.read_text())
    edit(raw)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def run(cmd: list, cwd: Path, check: bool = True, timeout: float = 900, env: dict | None = None):
    out = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env or ENV, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and out.returncode != 0:
        raise AssertionError(f"{cmd} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def snakemake(root: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess:
    return run([BIN / "snakemake", *args], root, check=check, timeout=300)


@dataclass(frozen=True)
class Job:
    """One job of ``snakemake -n -p``: its rule (the kind), outputs, log and command."""

    rule: str
    outputs: tuple[str, ...]
    log: str
    cmd: str

    @property
    def name(self) -> str:
        """The stage name (logs/<name>.log)."""
        return Path(self.log).name.removesuffix(".log")


def planned(output: str) -> dict[str, Job]:
    """Stage name -> job, from the output of ``snakemake -n [-p]`` (rule ``all`` left out)."""
    jobs, block = {}, None
    for line in [*output.splitlines(), "rule end:"]:
        if m := re.match(r"^(?:local)?rule (\w+):$", line):
            if block and block.get("log"):
                outputs = tuple(sorted(block["output"].split(", ")))
                job = Job(block["rule"], outputs, block["log"], block.get("cmd", ""))
                jobs[job.name] = job
            block = {"rule": m.group(1)}
        elif block is not None and (m := re.match(r"^    (output|log): (.*)$", line)):
            block[m.group(1)] = m.group(2)
        elif block is not None and line.startswith("Shell command:"):
            block["cmd"] = normalise(line.removeprefix("Shell command:").strip())
    return jobs


def normalise(cmd: str) -> str:
    """A command line without the Snakemake log redirection, re-quoted canonically."""
    cmd = re.sub(r"\s*>\s*\S+\s+2>&1\s*$", "", cmd)
    return shlex.join(shlex.split(cmd))


def planned_names(root: Path, *args: str) -> set[str]:
    """Stage names Snakemake would run now (dry run)."""
    result = snakemake(root, "-n", "--cores", "2", *args, check=True)
    return set(planned(result.stdout))


def downstream(stages: list[dag.Stage], names: set[str]) -> set[str]:
    """``names`` and every stage that reads, directly or not, what they write."""
    out = set(names)
    while True:
        outputs = {o for s in stages if s.name in out for o in s.outputs}
        more = {s.name for s in stages if any(d in outputs for d in s.deps)} - out
        if not more:
            return out
        out |= more


# ------------------------------------------------------------------------------------ a researcher's own members

EXTERNAL = REPO / "tests" / "pipeline" / "external"  # the package mylab and its dist-info (its entry points)


def outside_workspace(ws: Path, prepare: Callable[[Path], None]) -> Iterator[tuple[Path, dict]]:
    """A workspace with ``mylab`` beside it, prepared by ``prepare(ws)`` (params edits), exported for DVC, run by
    Snakemake and recorded in dvc.lock; yields it and the environment its stages import ``mylab`` in (this process
    imports it too, until the generator ends)."""
    for package in ("mylab", "mylab-0.1.dist-info"):
        shutil.copytree(EXTERNAL / package, ws / package)
    sys.path.insert(0, str(ws))  # this process's planner (load, dag.build, the export) imports it too
    try:
        prepare(ws)
        assert export.main(["--params", str(ws / "params.yaml")]) == 0
        run(["git", "init", "-q"], ws)
        env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ws), ENV.get("PYTHONPATH", "")])}
        out = run([BIN / "snakemake", "--cores", "2"], ws, env=env)
        n = len(dag.build(load(ws / "params.yaml")))
        assert f"recorded {n} of {n} stages in dvc.lock" in out.stdout + out.stderr
        yield ws, env
    finally:
        sys.path.remove(str(ws))
        for name in [m for m in sys.modules if m == "mylab" or m.startswith("mylab.")]:
            del sys.modules[name]


def edited_member_reruns(ws: Path, env: dict, copy: Path, module: str) -> tuple[set[str], set[str]]:
    """In a copy of an outside workspace, a comment appended to ``mylab/<module>``: the stages whose code it is (by
    ``dag.code``) and the jobs ``snakemake -n`` plans, asserted to be those and what reads their outputs, with
    ``dvc status`` naming the same stages."""
    shutil.copytree(ws, copy, symlinks=True)
    with (copy / "mylab" / module).open("a") as f:
        f.write("# touched\n")
    env = {**env, "PYTHONPATH": env["PYTHONPATH"].replace(str(ws), str(copy))}
    stages = dag.build(load(copy / "params.yaml"))
    users = {s.name for s in stages if f"mylab/{module}" in dag.code(s, copy)}
    names = set(planned(run([BIN / "snakemake", "-n", "--cores", "2"], copy, env=env).stdout))
    assert names == downstream(stages, users)
    status = yaml.safe_load(run([BIN / "dvc", "status", "--json"], copy, env=env).stdout)
    addresses = export.addresses(copy / "params.yaml")
    assert set(status) == {addresses[n] for n in users}
    return users, names
