"""The commands of the README and of the cluster quick start (docs/cluster.md) work as written, in their order.

Every shell block of those documents runs here, command by command, in a workspace copied from the repository (its
tracked configuration unedited), with the environment the documents' own ``export`` lines build, unless the block
is marked illustrative (``<!-- illustrative: why -->``: it needs the network, GPUs or running jobs). What would start
real work runs in dry-run form:

* ``snakemake ...``: its ``--cores`` checked by Snakemake's own parser (a local run without it stops Snakemake 9),
  then a dry run of the same arguments (``-n``; ``--report FILE`` dropped, it renders finished results);
* ``snakemake ... download`` (and ``download_image``) also puts a tiny random instance of the profile's model class
  where the download would put the checkpoint, so what follows finds it, and what comes before it does not;
* ``python -m ddmrl.plan ...``: run as written, on that instance;
* ``dvc ...``: parsed by DVC's own parser; ``-S key=value`` applied to params.yaml and validated by ``ddmrl.config``,
  and it must change the value (an experiment that sets what params.yaml has already is no experiment);
* ``pip install ...``: each extra exists in pyproject.toml, each pinned package has pyproject's pin;
* ``pytest ...``: its options parsed (``--help``); ``python3 -m venv`` and ``. .venv/bin/activate``: nothing to run.

Any other command fails the test until it gets a dry form here or its block is marked illustrative. A renamed key,
a missing ``--cores`` or a planner before the download then fails, with the document, line and command.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from doc_commands import Command, Dry, base_env, commands, dry_form, expand, run_dry, shell_blocks, workspace
from helpers import REPO
from real_families import missing, place_model

from ddmrl import config, plan

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
#: the example profile of docs/cluster.md's commands (its `export PROFILE=` line), whose family's real class the
#: planner there needs
CLUSTER = "docs/cluster.md"


class Session:
    """One document's commands in one workspace, in order: the shell's variables, the Snakemake dry runs (run
    together, :func:`run_all`), the commands run on the spot, and every failure."""

    def __init__(self, ws: Path) -> None:
        self.ws, self.env = ws, base_env()
        self.dry: list[tuple[Command, Dry]] = []
        self.live: list[tuple[Command, Callable[[], None]]] = []
        self.failures: list[str] = []

    def read(self, doc: str) -> None:
        """Interpret every command of ``doc``'s shell blocks (the static checks now, the rest scheduled)."""
        for block in shell_blocks(REPO / doc, REPO):
            if block.illustrative:
                continue
            try:
                cmds = commands(block)
            except ValueError as e:
                self.failures.append(str(e))
                continue
            for cmd in cmds:
                try:
                    self.interpret(cmd)
                except (AssertionError, KeyError, ValueError) as e:
                    self.failures.append(f"{cmd.where()}: {e}")

    def interpret(self, cmd: Command) -> None:
        argv, env = expand(cmd.argv, self.env), self.env | {k: expand([v], self.env)[0] for k, v in cmd.env.items()}
        program, args = argv[0], argv[1:]
        if program == "export":
            self.env |= dict(word.split("=", 1) for word in args)
        elif program in (".", "source"):
            assert args and args[0].endswith("bin/activate"), "only a virtual environment's activate script is read"
        elif program in ("python", "python3") and args[:2] == ["-m", "venv"]:
            assert len(args) == 3, "python -m venv DIR"
        elif program == "pip":
            check_pip(args)
        elif program == "snakemake":
            self.dry.append((cmd, Dry(self.ws, tuple(dry_form(args)), tuple(sorted(env.items())), tuple(args))))
            if targets := {"download", "download_image"} & set(args):
                self.live.append((cmd, lambda: self.download(args, env, targets)))
        elif program == "dvc":
            check_dvc(args, self.ws)
        elif program in ("python", "python3") and args[:2] == ["-m", "ddmrl.plan"]:
            self.live.append((cmd, lambda: self.plan(args[2:])))
        elif program == "pytest":
            self.live.append((cmd, lambda: check_pytest(args)))
        else:
            raise AssertionError("no dry form for this command here: give it one or mark its block illustrative")

    def download(self, args: list[str], env: dict[str, str], targets: set[str]) -> None:
        """What the download stage leaves behind for the commands after it: the profile's model, a tiny instance of
        its real class, where its ``path_or_id`` says (``HF_HUB_OFFLINE=0`` is what lets the real stage fetch)."""
        assert env.get("HF_HUB_OFFLINE") == "0", "the download needs HF_HUB_OFFLINE=0 (the workflow's default is 1)"
        cfg = config.load(self.ws / "params.yaml", profile_of(args))
        spec = cfg.image.model if targets == {"download_image"} else cfg.model
        if not (self.ws / spec.path_or_id / "config.json").exists():
            place_model(self.ws, spec)

    def plan(self, args: list[str]) -> None:
        with contextlib.chdir(self.ws), contextlib.redirect_stdout(io.StringIO()) as out:
            with contextlib.redirect_stderr(io.StringIO()) as err:
                code = plan.main(args)
        assert code == 0, f"exit {code}: {(err.getvalue() or out.getvalue()).strip()[-500:]}"

    def run_live(self) -> None:
        """The commands run on the spot, in their order."""
        for cmd, action in self.live:
            try:
                action()
            except (Exception, SystemExit) as e:  # the command's own error, reported with where it was written
                self.failures.append(f"{cmd.where()}: {type(e).__name__ if not str(e) else e}")


def run_all(sessions: list[Session], logs: Path) -> None:
    """Every session's scheduled commands: all their dry runs in one process (one import of Snakemake) beside the
    commands run on the spot; each failure goes to its session."""
    with ThreadPoolExecutor(1) as pool:
        dry = pool.submit(run_dry, [d for session in sessions for _, d in session.dry], logs)
        for session in sessions:
            session.run_live()
        results = iter(dry.result())
        for session in sessions:
            for cmd, _ in session.dry:
                code, output = next(results)
                if code != 0:
                    tail = [line for line in output.splitlines() if line.strip()][-3:]
                    session.failures.append(f"{cmd.where()}: exit {code}: {' | '.join(tail)}")


def profile_of(args: list[str]) -> str | None:
    """The profile a Snakemake command line selects (``--config profile=X``), or None (params.yaml's)."""
    words = " ".join(args).split()
    return next((w.split("=", 1)[1] for w in words if w.startswith("profile=")), None)


def check_pip(args: list[str]) -> None:
    """``pip install``: every extra of ``.[...]`` is pyproject's, every ``name==version`` has pyproject's pin."""
    assert args[:1] == ["install"], "pip install only"
    pins = {d.split("==")[0].strip().lower(): d.split("#")[0].strip() for d in _requirements() if "==" in d}
    words = iter(args[1:])
    for word in words:
        if word in ("--index-url", "--extra-index-url"):
            assert next(words).startswith("https://"), f"{word} needs an https URL"
        elif word.startswith("-"):
            assert word in ("-e", "-q", "--upgrade"), f"pip option {word} is not expected in the docs"
        elif word.startswith("."):
            extras = word.partition("[")[2].rstrip("]")
            unknown = {e for e in extras.split(",") if e} - set(PYPROJECT["optional-dependencies"])
            assert not unknown, f"no extra {sorted(unknown)} in pyproject.toml"
        else:
            name = word.split("==")[0].lower()
            assert name in pins and pins[name] == word, f"{word}: pyproject.toml pins {pins.get(name, 'nothing')}"


def _requirements() -> list[str]:
    return [*PYPROJECT["dependencies"], *(r for extra in PYPROJECT["optional-dependencies"].values() for r in extra)]


def check_dvc(args: list[str], ws: Path) -> None:
    """DVC's own parser takes the arguments; each ``-S key=value`` names a params key, validates, and changes it."""
    from dvc.cli import DvcParserError, parse_args

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            parsed = parse_args(args)
        except (SystemExit, DvcParserError):
            raise AssertionError(f"dvc refuses the arguments: {err.getvalue().strip().splitlines()[-1:]}") from None
    for assignment in getattr(parsed, "set_param", None) or []:
        key, value = assignment.split("=", 1)
        raw = yaml.safe_load((ws / "params.yaml").read_text())
        *parents, leaf = key.split(".")
        section = raw
        for name in parents:
            assert isinstance(section.get(name), dict), f"-S {key}: params.yaml has no section {name}"
            section = section[name]
        assert leaf in section, f"-S {key}: params.yaml has no key {key}"
        assert section[leaf] != yaml.safe_load(value), f"-S {key}: params.yaml already has {value}"
        section[leaf] = yaml.safe_load(value)
        edited = ws / "dvc-exp" / "params.yaml"
        edited.parent.mkdir(exist_ok=True)
        shutil.copytree(ws / "profiles", edited.parent / "profiles", dirs_exist_ok=True)
        edited.write_text(yaml.safe_dump(raw, sort_keys=False))
        config.load(edited)  # a value params.yaml's schema refuses: one line naming the key


def check_pytest(args: list[str]) -> None:
    """pytest's own parser takes the options (``--help``: nothing is collected)."""
    done = subprocess.run([sys.executable, "-m", "pytest", *args, "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr.strip()[-500:]


def example_family() -> str:
    """The model family of docs/cluster.md's example profile (its `export PROFILE=...` line)."""
    profile = re.search(r"export PROFILE=(\w+)", (REPO / CLUSTER).read_text())[1]
    cfg = config.load(REPO / "params.yaml", profile)
    return (cfg.model if cfg.tasks else cfg.image.model).kind


#: the breakages the documents' commands are guarded against, one per line (broken.md, lines 2 to 6)
BROKEN = [
    "dvc exp run -S 'grpo.seedz=[0,1,2,3]'",  # a renamed key
    "dvc exp run -S 'grpo.seeds=[0,1,2]'",  # what params.yaml has already
    "snakemake --config profile=smoke",  # no --cores
    "python -m ddmrl.plan --profile paper_llada_math",  # before the download
    "HF_HUB_OFFLINE=0 snakemake download --cores 4 --config profile=paper_llada_math",
]


def read_broken(session: Session, root: Path) -> None:
    (root / "broken.md").write_text("```bash\n" + "\n".join(BROKEN) + "\n```\n")
    for block in shell_blocks(root / "broken.md", root):
        for cmd in commands(block):
            try:
                session.interpret(cmd)
            except AssertionError as e:
                session.failures.append(f"{cmd.where()}: {e}")


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> dict[str, Session | str]:
    """README.md's, docs/cluster.md's and the broken lines' commands, run together; a session that cannot run here
    is the reason (the real class its planner needs is absent)."""
    root = tmp_path_factory.mktemp("docs")
    needs = {"README.md": None, CLUSTER: missing(example_family()), "broken": missing("llada")}
    out: dict[str, Session | str] = {}
    for name, why in needs.items():
        if why:
            out[name] = why
            continue
        session = out[name] = Session(workspace(root / name.replace("/", "_") / "ws"))
        if name == "broken":
            read_broken(session, root)
        else:
            session.read(name)
    run_all([s for s in out.values() if isinstance(s, Session)], root / "snakemake-logs")
    return out


@pytest.mark.parametrize("doc", ["README.md", CLUSTER])
def test_the_documented_commands_work_as_written(sessions, doc):
    session = sessions[doc]
    if isinstance(session, str):
        pytest.skip(session)
    assert session.dry, f"{doc}: no snakemake command found"
    assert not session.failures, "\n".join(session.failures)


def test_a_renamed_key_a_missing_cores_and_a_plan_before_the_download_fail(sessions):
    """The checks themselves: the breakages the documents' commands are guarded against are caught, each at its
    line, and the download after them plans."""
    session = sessions["broken"]
    if isinstance(session, str):
        pytest.skip(session)
    failures = session.failures
    assert [f.split(":", 2)[1] for f in failures] == ["2", "3", "5", "4"], failures  # the download (6) plans
    assert "params.yaml has no key grpo.seedz" in failures[0]
    assert "params.yaml already has [0,1,2]" in failures[1]
    assert "data/hub/llada-8b-instruct/config.json" in failures[2]
    assert "no --cores for a local run" in failures[3]
