"""The smoke workspace: a git and DVC repository copied from this one, on the smoke profile, where
``snakemake --cores 2`` has run the whole DAG once (a few minutes on 2 cores). Shared by test_smoke and
test_report."""

from __future__ import annotations

import pytest
from helpers import BIN, ENV, copy_repo, run

from ddmrl.pipeline import export

#: Python's import log of every stage (``-X importtime`` on stderr, so in each job's log): the modules it ran
IMPORT_LOG = {"PYTHONPROFILEIMPORTTIME": "1"}


@pytest.fixture(scope="session")
def smoke_workspace(tmp_path_factory):
    ws = copy_repo(tmp_path_factory.mktemp("smoke") / "ws", profile="smoke")
    assert export.main(["--params", str(ws / "params.yaml")]) == 0
    run(["git", "init", "-q"], ws)
    out = run([BIN / "snakemake", "--cores", "2"], ws, env={**ENV, **IMPORT_LOG})
    ws.joinpath("snakemake.log").write_text(out.stdout + out.stderr)
    return ws
