"""A researcher's own member, from a module outside ``src/ddmrl`` (``tests/pipeline/external/mylab``, copied into
the workspace and put on ``PYTHONPATH``): validated, run and rerun like a built-in one.

Today: a method (``method: mylab.methods:REBALANCED``) drawing its views with a view sampler of its own
(``remasking: mylab.views:halves``) and its rollouts with a sampler of its own (``sampler: {name:
mylab.samplers:generate}``). The workspace is the smoke profile cut to one task, no image
branch and the external method beside UniGRPO (about a minute on 2 cores).
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest
from helpers import BIN, ENV, REPO, copy_repo, edit_params, planned, run

from ddmrl.config import ConfigError, load
from ddmrl.pipeline import dag

MINE = "mylab.methods:REBALANCED"
HALVES = "mylab.views:halves"
SAMPLER = "mylab.samplers:generate"


def _own_method(raw: dict) -> None:
    raw.update(profile="smoke", seed=0)
    raw["grpo"] = {**raw.get("grpo", {}), "methods": ["unigrpo", "mine"], "seeds": [0]}
    mine = {"method": MINE, "remasking": HALVES, "sampler": {"name": SAMPLER, "kv_cache": "none"}}
    raw["methods"] = {**(raw.get("methods") or {}), "mine": mine}
    raw["image"] = {**raw.get("image", {}), "tasks": [], "methods": []}
    raw["rebrl_ablation"] = {**raw.get("rebrl_ablation", {}), "enabled": False}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    ws = copy_repo(tmp_path_factory.mktemp("external") / "ws")
    shutil.copytree(REPO / "tests" / "pipeline" / "external" / "mylab", ws / "mylab")
    edit_params(ws, _own_method)
    edit_params(ws, lambda raw: raw.update(image={"tasks": [], "methods": []}), "profiles/smoke.yaml")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ws), ENV.get("PYTHONPATH", "")])}
    run([BIN / "snakemake", "--cores", "2"], ws, env=env)
    sys.path.insert(0, str(ws))  # this process's planner (load, dag.build) imports it too
    yield ws, env
    sys.path.remove(str(ws))
    for name in [m for m in sys.modules if m == "mylab" or m.startswith("mylab.")]:
        del sys.modules[name]


def test_an_outside_method_is_validated_like_a_built_in_one(workspace):
    ws, _ = workspace
    cfg = load(ws / "params.yaml")
    mine = cfg.methods["mine"]
    assert mine.method == MINE and type(mine).__module__ == "mylab.methods"  # validated by its own Params
    assert mine.epsilon == cfg.methods["unigrpo"].epsilon != 0.1  # grpo:'s keys win over its defaults, as for any
    assert mine.remasking == HALVES and type(mine)().remasking == "unigrpo"  # the section's views, not its default
    assert mine.sampler.name == SAMPLER and mine.sampler.block_length == cfg.methods["unigrpo"].sampler.block_length
    (ws / "bad.yaml").write_text((ws / "params.yaml").read_text().replace("method: " + MINE, "method: mylab.nope:X"))
    with pytest.raises(ConfigError, match=r"methods\.mine\.method = 'mylab\.nope:X': cannot be imported"):
        load(ws / "bad.yaml")
    (ws / "bad.yaml").write_text((ws / "params.yaml").read_text().replace(HALVES, "halvez"))
    with pytest.raises(ConfigError, match=r"methods\.mine\.remasking = 'halvez': unknown value; choose one of "):
        load(ws / "bad.yaml")


def test_an_outside_method_runs_through_the_dag_tables_included(workspace):
    ws, _ = workspace
    metrics = ws / "data" / "grpo" / "mine_sudoku4_s0" / "metrics.json"
    assert metrics.is_file() and (ws / "data" / "evaluate" / "mine_sudoku4_s0" / "sudoku4.json").is_file()
    assert "| mine |" in (ws / "data" / "tables" / "text_table.md").read_text()
    resolved = (ws / "data" / "grpo" / "mine_sudoku4_s0" / "config.yaml").read_text()
    assert f"remasking: {HALVES}" in resolved and f"name: {SAMPLER}" in resolved


@pytest.mark.parametrize(
    ("module", "users"),
    [
        ("methods.py", {"grpo_mine_sudoku4_s0", "credit_mine_sudoku4", "tables"}),  # tables: the display name
        ("views.py", {"grpo_mine_sudoku4_s0", "credit_mine_sudoku4"}),
        ("samplers.py", {"grpo_mine_sudoku4_s0"}),  # the credit stage reads the stored rollouts
    ],
)
def test_editing_an_outside_member_reruns_only_its_runs(workspace, tmp_path, module, users):
    """The stages whose code the module is: its method's runs (and the tables, for the method's display name);
    Snakemake plans those and what reads their outputs."""
    ws, env = workspace
    copy = tmp_path / "ws"
    shutil.copytree(ws, copy, symlinks=True)
    with (copy / "mylab" / module).open("a") as f:
        f.write("# touched\n")
    env = {**env, "PYTHONPATH": env["PYTHONPATH"].replace(str(ws), str(copy))}
    stages = dag.build(load(copy / "params.yaml"))
    assert {s.name for s in stages if f"mylab/{module}" in dag.code(s, copy)} == users
    names = set(planned(run([BIN / "snakemake", "-n", "--cores", "2"], copy, env=env).stdout))
    assert names == {*users, "evaluate_mine_sudoku4_s0", "tables"}
