"""The shell blocks of the docs as commands, and Snakemake dry runs of many commands for one import of Snakemake.

A shell block is a fenced block labelled ``bash``, ``sh``, ``shell`` or ``console``, or not labelled at all (label
other blocks: ``text``, ``yaml``). An HTML comment ``<!-- illustrative: why -->`` on the line before its fence marks
it as not run (it needs the network, GPUs or running jobs). tests/pipeline/test_doc_commands.py runs the others.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from helpers import COPIED, REPO

SHELL = ("bash", "sh", "shell", "console", "")
ILLUSTRATIVE = re.compile(r"<!--\s*illustrative:\s*(.+?)\s*-->")
FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass(frozen=True)
class Block:
    """A shell block of ``doc``: its first line's number (1-based), text, and the reason it is not run (None: run)."""

    doc: str
    line: int
    text: str
    illustrative: str | None


@dataclass
class Command:
    """One command of a block: ``argv`` with the ``VAR=value`` assignments written before it (``env``)."""

    doc: str
    line: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def where(self) -> str:
        return f"{self.doc}:{self.line}: `{shlex.join(self.argv)}`"


def shell_blocks(path: Path, root: Path) -> list[Block]:
    """Every shell block of the Markdown file ``path`` (named relative to ``root``), in order."""
    lines, blocks, i = path.read_text(encoding="utf-8").splitlines(), [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if fence[1] in SHELL:
            marker = ILLUSTRATIVE.search(lines[i - 1]) if i else None
            doc = path.relative_to(root).as_posix()
            blocks.append(Block(doc, i + 2, "\n".join(lines[i + 1 : end]), marker[1] if marker else None))
        i = end + 1
    return blocks


def commands(block: Block) -> list[Command]:
    """The commands of ``block``: lines joined at a trailing backslash, comments dropped, split at ``&&`` and ``;``,
    leading ``VAR=value`` words taken as the command's environment. A pipe or redirection is refused (a command the
    test cannot run as written: mark the block illustrative)."""
    out, pending, start = [], "", None
    for n, line in enumerate(block.text.splitlines(), start=block.line):
        start = n if start is None else start
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        words, at, pending, start = shlex.split(pending + line, comments=True), start, "", None
        for part in _split(words):
            if bad := {"|", ">", "<", ">>", "&"} & set(part):
                where = f"{block.doc}:{at}: {' '.join(bad)} in `{' '.join(part)}`"
                raise ValueError(f"{where}: the test cannot run it as written; mark the block illustrative")
            env = {}
            while part and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", part[0]) and len(part) > 1:
                key, value = part.pop(0).split("=", 1)
                env[key] = value
            out.append(Command(block.doc, at, part, env))
    return out


def _split(words: list[str]) -> list[list[str]]:
    parts, current = [], []
    for word in words:
        if word in ("&&", ";"):
            parts.append(current)
            current = []
        else:
            current.append(word)
    return [p for p in [*parts, current] if p]


def expand(words: list[str], env: dict[str, str]) -> list[str]:
    """``$VAR`` and ``${VAR}`` replaced from ``env``; an unset variable is an error naming it."""

    def one(word: str) -> str:
        def value(m: re.Match) -> str:
            name = m[1] or m[2]
            if name not in env:
                raise KeyError(f"${name} is not set by the docs before this command")
            return env[name]

        return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, word)

    return [one(w) for w in words]


# ------------------------------------------------------------------------------------------------ Snakemake


#: one process imports Snakemake once (with its SLURM plugin: a few seconds where SLURM's tools answer slowly), then
#: forks a child per command, which takes the command's directory and environment, checks the ``--cores`` that
#: Snakemake requires of a run that executes locally (read with Snakemake's own parser, profiles included) and runs
#: Snakemake's command line in-process
DRIVER = r"""
import json, os, sys
jobs = json.load(sys.stdin)
from snakemake.cli import main, parse_args
codes = []
for job in jobs:
    pid = os.fork()
    if pid == 0:
        fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        code = 0
        try:
            if job["check"] is not None:
                _, args = parse_args(job["check"])
                local = getattr(args, "executor", None) in (None, "local")
                executes = not (args.dryrun or args.touch or args.report)
                if local and executes and args.cores is None:
                    print("snakemake: no --cores for a local run (Snakemake 9 requires it)")
                    os._exit(3)
            if job["argv"] is not None:
                main(job["argv"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
json.dump(codes, sys.stdout)
"""


@dataclass(frozen=True)
class Dry:
    """A Snakemake command line to dry-run in ``cwd`` with ``env``: ``argv`` (the arguments after ``snakemake``),
    ``check``: the command as written, whose ``--cores`` is checked (None: none)."""

    cwd: Path
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    check: tuple[str, ...] | None = None


def dry_form(argv: list[str]) -> list[str]:
    """Snakemake's arguments as a dry run: ``--report FILE`` dropped (it renders finished results) and ``--cores N``
    (a dry run plans the same jobs with any; the command's own ``--cores`` is checked apart), ``-n`` added."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in ("--report", "--cores", "-c"):
            skip = True
        elif not word.startswith(("--report=", "--cores=")):
            out.append(word)
    return out if {"-n", "--dry-run", "--dryrun"} & set(out) else [*out, "-n"]


def run_dry(runs: list[Dry], logs: Path, timeout: float = 600) -> list[tuple[int, str]]:
    """(exit code, output) of each of ``runs``, in one process (:data:`DRIVER`): each command's ``--cores`` check,
    then each distinct dry run once (exit 3: the check failed)."""
    logs.mkdir(parents=True, exist_ok=True)
    distinct = list(dict.fromkeys((r.cwd, r.argv, r.env) for r in runs))
    jobs = [{"cwd": str(cwd), "argv": list(argv), "env": dict(env), "check": None} for cwd, argv, env in distinct]
    jobs += [{"cwd": str(r.cwd), "argv": None, "env": dict(r.env), "check": list(r.check)} for r in runs if r.check]
    for i, job in enumerate(jobs):
        job["log"] = str(logs / f"{i}.log")
    done = subprocess.run(
        [sys.executable, "-c", DRIVER], input=json.dumps(jobs), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    codes = json.loads(done.stdout.strip().splitlines()[-1])
    results = [(code, Path(job["log"]).read_text()) for code, job in zip(codes, jobs, strict=True)]
    checks = iter(results[len(distinct) :])
    out = []
    for r in runs:
        check = next(checks) if r.check else (0, "")
        out.append(check if check[0] else results[distinct.index((r.cwd, r.argv, r.env))])
    return out


def job_counts(output: str) -> dict[str, int]:
    """Snakemake's "Job stats" table of a dry run: rule -> number of jobs."""
    table = output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    rows = (line.split() for line in table.splitlines()[3:])
    return {row[0]: int(row[1]) for row in rows if len(row) == 2 and row[1].isdigit()}


def base_env() -> dict[str, str]:
    """The environment a user's shell has before following the docs: none of ddmrl's own variables."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "SHELL", "VIRTUAL_ENV")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    return env | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def workspace(root: Path) -> Path:
    """A copy of what the commands read: params.yaml, profiles/, workflow/, stages/, src/, configs/, DVC's config."""
    for name in (*COPIED, "configs", "params.yaml", ".gitignore"):
        src, dst = REPO / name, root / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", ".snakemake"))
        else:
            shutil.copy2(src, dst)
    return root
