"""The whole DAG on the smoke profile, under Snakemake and under DVC, in temporary copies of the repository.

Snakemake (the session's smoke workspace, tests/pipeline/conftest.py): the main job finishes and writes the tables
and plots; a second run does nothing; changing one method's params reruns only that method's stages and the tables;
DVC records what Snakemake made, so `dvc status` is clean and a fresh clone pulls the results with nothing to run
(DVC running the DAG itself: test_dvc.py). A few minutes on 2 cores.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import BIN, commit, downstream, edit_params, planned_names, run

from ddmrl.config import load
from ddmrl.geneval import summarize
from ddmrl.methods import METHODS
from ddmrl.pipeline import dag, export
from ddmrl.tables import IMAGE_COLUMNS
from ddmrl.tasks import TASKS

pytestmark = pytest.mark.slow


def change_rebrl(ws: Path) -> None:
    edit_params(ws, lambda raw: raw["methods"]["rebrl"].update(epsilon=0.3))


# ------------------------------------------------------------------------------------------------ Snakemake


def test_snakemake_runs_the_whole_dag_and_writes_tables(smoke_workspace):
    tables = smoke_workspace / "data" / "tables"
    for s in dag.build(load(smoke_workspace / "params.yaml")):
        for out in s.outputs:
            assert (smoke_workspace / out).exists(), out
    for name in (*dag.TABLES_TEXT, *dag.TABLES_CREDIT, "curves.csv", "metrics.json"):
        assert (tables / name).stat().st_size > 0, name
    text = (tables / "text_table.md").read_text()
    for row in ("base", "SFT", "diffu-GRPO", "UniGRPO", "MaskGRPO", "RebRL", "TraceRL", "GDPO", "SPG", "wd1"):
        assert f"| {row} |" in text
    assert not list((smoke_workspace / "data" / "checkpoints").glob("*/step-*")), "checkpoints cleared after success"
    metrics = json.loads((tables / "metrics.json").read_text())
    table = pd.read_csv(tables / "text_table.csv").set_index("model")
    assert metrics["accuracy"]["sudoku4"]["rebrl"] == pytest.approx(
        float(table.loc["RebRL", "sudoku4 acc"]), abs=0.005
    )
    curves = pd.read_csv(tables / "curves.csv")
    assert set(curves["series"]) == set(load(smoke_workspace / "params.yaml").run_names())


def test_image_branch_writes_geneval_layout_table_and_contact_sheets(smoke_workspace):
    """The text-to-image runs: GenEval's folder layout per model, the table computed from the results JSONL, the
    curves and one contact sheet per model."""
    data, tables = smoke_workspace / "data", smoke_workspace / "data" / "tables"
    for name in dag.TABLES_IMAGE:
        assert (tables / name).stat().st_size > 0, name
    models = ["base", "unigrpo_geneval_mini_s0", "rebrl_geneval_mini_s0"]
    for model in models:
        assert (tables / "contact_sheets" / f"{model}.png").stat().st_size > 0
        folder = data / "evaluate" / model / "geneval_mini"
        prompts = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))  # Snakemake's timestamp
        assert prompts == [f"{i:05d}" for i in range(len(prompts))] and len(prompts) >= 6
        for name in prompts:
            assert json.loads((folder / name / "metadata.jsonl").read_text())["tag"] in IMAGE_COLUMNS
            assert sorted(p.name for p in (folder / name / "samples").iterdir()) == ["0000.png", "0001.png"]
    table = pd.read_csv(tables / "image_table.csv").set_index("model")
    assert list(table.index) == ["base", "UniGRPO", "RebRL"]
    for model, row in zip(models, table.index, strict=True):
        summary = summarize(data / "evaluate" / model / "geneval_mini_results.jsonl")
        assert float(table.loc[row, "Overall"]) == pytest.approx(summary["overall"], abs=0.051)
        for tag, col in IMAGE_COLUMNS.items():
            assert float(table.loc[row, col]) == pytest.approx(summary["tags"][tag]["accuracy"], abs=0.051)


def test_second_run_has_nothing_to_do(smoke_workspace):
    assert planned_names(smoke_workspace) == set()


def test_changing_one_method_reruns_only_its_stages_and_the_tables(smoke_workspace, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(smoke_workspace, ws, symlinks=True)
    change_rebrl(ws)
    assert planned_names(ws) == {
        "grpo_rebrl_sudoku4_s0",
        "credit_rebrl_sudoku4",
        "evaluate_rebrl_sudoku4_s0",
        "grpo_rebrl_geneval_mini_s0",  # the image run starts from methods.rebrl too
        "evaluate_rebrl_geneval_mini_s0",
        "tables",
    }


def test_dvc_records_what_snakemake_made(smoke_workspace, tmp_path):
    """The run ended by committing every stage to dvc.lock and the cache: `dvc status` is clean; `dvc push` to a
    local remote, then on a fresh clone `dvc pull` restores the tables and models with nothing to rerun (and
    `snakemake --touch` tells Snakemake so)."""
    ws = tmp_path / "ws"
    shutil.copytree(smoke_workspace, ws, symlinks=True)
    n = len(dag.build(load(ws / "params.yaml")))
    assert f"recorded {n} of {n} stages in dvc.lock" in (ws / "snakemake.log").read_text()
    assert "Data and pipelines are up to date" in run([BIN / "dvc", "status"], ws).stdout
    run([BIN / "dvc", "remote", "add", "-d", "store", tmp_path / "remote"], ws)
    run([BIN / "dvc", "push", "-q"], ws)
    commit(ws, "smoke run")

    clone = tmp_path / "clone"
    run(["git", "clone", "-q", ws, clone], tmp_path)
    assert not (clone / "data" / "tables").exists()
    run([BIN / "dvc", "pull", "-q"], clone)
    for p in (ws / "data" / "tables").rglob("*"):
        if p.is_file():
            assert (clone / p.relative_to(ws)).read_bytes() == p.read_bytes(), p
    assert (clone / "data" / "grpo" / "rebrl_sudoku4_s0" / "model" / "model.safetensors").exists()
    assert "Data and pipelines are up to date" in run([BIN / "dvc", "status"], clone).stdout
    assert "Running stage" not in run([BIN / "dvc", "repro", "--dry"], clone).stdout
    run([BIN / "snakemake", "--touch", "--cores", "2"], clone)
    assert planned_names(clone) == set()


# ------------------------------------------------------------------------------------------------ code deps


def imported(log: Path) -> set[str]:
    """The ddmrl modules a stage imported (Python's -X importtime lines in its log)."""
    return set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(ddmrl[\w.]*)\s*$", log.read_text(), flags=re.M))


def test_every_module_a_stage_ran_is_one_of_its_code_deps(smoke_workspace):
    """Sound precision: the library modules each job actually imported (Python's import log, kept in the job's log)
    are all among its declared code deps, which leave out other tasks, objectives and samplers."""
    cfg = load(smoke_workspace / "params.yaml")
    # validating params.yaml imports every section's method module and what it imports at module level (the mixins
    # of ddmrl.methods.mixins its Params builds on); a stage's own are among its deps (asserted by
    # test_touching_library_code_reruns_only_the_stages_that_run_it), the others decide nothing it writes
    validated = {METHODS.module(r.method) for r in (*cfg.methods.values(), *cfg.image_sections.values())}
    # it also imports the module of every task it names (the task's class declares its Params and its kind), and so
    # what that module imports at module level (ddmrl.tasks.base, the d1 scorers, ...): a stage's own tasks are among
    # its deps (its uses; test_dag asserts which stages run a task's module), the others decide nothing it writes.
    # Unlike a method's module, a task's imports reach beyond ddmrl.config's, so the whole closure is left out.
    named = {*cfg.tasks, *cfg.task_params, *cfg.image.tasks, *cfg.image.eval_tasks, *cfg.image.task_params}
    validated_files = {
        f
        for module in [*validated, *(TASKS.module(t) for t in named)]
        for f in dag.code_files(dag._module_files(module, smoke_workspace)[-1], smoke_workspace)
    }
    for s in dag.build(cfg):
        deps = set(dag.code(s, smoke_workspace))
        ran = imported(smoke_workspace / "logs" / f"{s.name}.log")
        assert "ddmrl.cli" in ran, s.name
        files = {
            f.relative_to(smoke_workspace).as_posix()
            for m in ran - validated
            for f in dag._module_files(m, smoke_workspace)
        }
        assert files - validated_files <= deps, (s.name, sorted(files - validated_files - deps))


@pytest.mark.parametrize(
    "touched",
    [
        "src/ddmrl/hub.py",  # run by no stage here (test_dag asserts the same of sandbox.py and rewards/remote.py)
        "src/ddmrl/objectives/spg.py",
        "src/ddmrl/methods/spg.py",
        "src/ddmrl/tables.py",
    ],
)
def test_touching_library_code_reruns_only_the_stages_that_run_it(smoke_workspace, tmp_path, touched):
    """A comment appended to one library file: `snakemake -n` plans the stages that run it and what is downstream;
    `dvc status` names the stages that run it."""
    ws = tmp_path / "ws"
    shutil.copytree(smoke_workspace, ws, symlinks=True)
    with (ws / touched).open("a") as f:
        f.write("# touched\n")
    stages = dag.build(load(ws / "params.yaml"))
    users = {s.name for s in stages if touched in dag.code(s, ws)}
    expected = {
        "src/ddmrl/objectives/spg.py": {"grpo_spg_sudoku4_s0", "credit_spg_sudoku4"},
        "src/ddmrl/methods/spg.py": {"grpo_spg_sudoku4_s0", "credit_spg_sudoku4", "tables"},
        "src/ddmrl/tables.py": {"tables"},
    }.get(touched, set())
    assert users == expected
    assert planned_names(ws) == downstream(stages, users)
    status = yaml.safe_load(run([BIN / "dvc", "status", "--json"], ws).stdout)
    addresses = export.addresses(ws / "params.yaml")
    assert set(status) == {addresses[n] for n in users}
