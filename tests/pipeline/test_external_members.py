"""A researcher's own members, from modules outside ``src/ddmrl`` (``tests/pipeline/external/mylab``, copied into
the workspace and put on ``PYTHONPATH``): validated, run and rerun like built-in ones.

A method (``method: mylab.methods:REBALANCED``) drawing its views with a view sampler of its own (``remasking:
mylab.views:halves``) and its rollouts with a sampler of its own (``sampler: {name: mylab.samplers:generate}``,
with an option of its own), on a task of its own (``tasks: [reverse]``, an entry point of ``ddmrl.tasks`` declared
by ``external/mylab-0.1.dist-info``). The workspace is the smoke profile on that one task, no image branch, the
external method beside UniGRPO (a few minutes on 2 cores).
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest
import yaml
from helpers import BIN, ENV, REPO, copy_repo, edit_params, planned, run

from ddmrl.config import ConfigError, load
from ddmrl.pipeline import dag
from ddmrl.rollout import sampler_kwargs

MINE = "mylab.methods:REBALANCED"
HALVES = "mylab.views:halves"
SAMPLER = "mylab.samplers:generate"
TASK = "reverse"  # mylab.tasks:Reverse, by its entry point


def _own_method(raw: dict) -> None:
    raw.update(profile="smoke", seed=0)
    raw["grpo"] = {**raw.get("grpo", {}), "methods": ["unigrpo", "mine"], "seeds": [0]}
    sampler = {"name": SAMPLER, "kv_cache": "none", "options": {SAMPLER: {"order": "random"}}}
    mine = {"method": MINE, "remasking": HALVES, "sampler": sampler}
    raw["methods"] = {**(raw.get("methods") or {}), "mine": mine}
    raw["image"] = {**raw.get("image", {}), "tasks": [], "methods": []}
    raw["rebrl_ablation"] = {**raw.get("rebrl_ablation", {}), "enabled": False}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    ws = copy_repo(tmp_path_factory.mktemp("external") / "ws")
    for package in ("mylab", "mylab-0.1.dist-info"):
        shutil.copytree(REPO / "tests" / "pipeline" / "external" / package, ws / package)
    edit_params(ws, _own_method)
    edit_params(ws, lambda raw: raw.update(tasks=[TASK], image={"tasks": [], "methods": []}), "profiles/smoke.yaml")
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
    assert sampler_kwargs(mine.sampler, 8)["order"] == "random"  # its own option, validated by its Params
    (ws / "bad.yaml").write_text((ws / "params.yaml").read_text().replace("order: random", "order: backwards"))
    with pytest.raises(ConfigError, match=r"options\.mylab\.samplers:generate\.order = 'backwards'"):
        load(ws / "bad.yaml")
    (ws / "bad.yaml").write_text((ws / "params.yaml").read_text().replace("method: " + MINE, "method: mylab.nope:X"))
    with pytest.raises(ConfigError, match=r"methods\.mine\.method = 'mylab\.nope:X': cannot be imported"):
        load(ws / "bad.yaml")
    (ws / "bad.yaml").write_text((ws / "params.yaml").read_text().replace(HALVES, "halvez"))
    with pytest.raises(ConfigError, match=r"methods\.mine\.remasking = 'halvez': unknown value; choose one of "):
        load(ws / "bad.yaml")


def test_an_outside_task_is_validated_like_a_built_in_one(workspace):
    ws, _ = workspace
    assert load(ws / "params.yaml").tasks == (TASK,)
    raw = yaml.safe_load((ws / "params.yaml").read_text())
    (ws / "bad.yaml").write_text(yaml.safe_dump({**raw, "task_params": {TASK: {"length": 1}}}))
    with pytest.raises(ConfigError, match=r"task_params\.reverse\.length = 1: must be in \[2, 8\]"):
        load(ws / "bad.yaml")
    (ws / "bad.yaml").write_text(yaml.safe_dump({**raw, "profile": "tiny", "tasks": ["mylab.tasks:Reverse"]}))
    with pytest.raises(ConfigError, match=r"named by an entry point of the ddmrl\.tasks group"):
        load(ws / "bad.yaml")


def test_an_outside_method_runs_through_the_dag_tables_included(workspace):
    ws, _ = workspace
    metrics = ws / "data" / "grpo" / "mine_reverse_s0" / "metrics.json"
    assert metrics.is_file() and (ws / "data" / "evaluate" / "mine_reverse_s0" / f"{TASK}.json").is_file()
    assert "| mine |" in (ws / "data" / "tables" / "text_table.md").read_text()
    resolved = (ws / "data" / "grpo" / "mine_reverse_s0" / "config.yaml").read_text()
    assert f"remasking: {HALVES}" in resolved and f"name: {SAMPLER}" in resolved
    stages = {s.name: s for s in dag.build(load(ws / "params.yaml"))}
    assert "mylab/tasks.py" in dag.code(stages["download"], ws)  # the task's module: a code dep of its stages


@pytest.mark.parametrize(
    ("module", "users"),
    [
        ("methods.py", {"grpo_mine_reverse_s0", "credit_mine_reverse", "tables"}),  # tables: the display name
        ("views.py", {"grpo_mine_reverse_s0", "credit_mine_reverse"}),
        ("samplers.py", {"grpo_mine_reverse_s0"}),  # the credit stage reads the stored rollouts
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
    assert names == {*users, "evaluate_mine_reverse_s0", "tables"}
