"""The DAG as data: names, order, deps, outputs and params granularity (pure Python, fast)."""

from __future__ import annotations

import graphlib
import itertools
import shutil
from pathlib import Path

import pytest
import yaml
from helpers import downstream

from ddmrl.config import Config, load, profile_path
from ddmrl.pipeline import dag, layout

REPO = Path(__file__).resolve().parents[2]
PARAMS = REPO / "params.yaml"


ALL_METHODS = ["diffu_grpo", "unigrpo", "maskgrpo", "rebrl", "tracerl", "gdpo", "spg", "wd1"]


def with_all_methods(raw: dict) -> None:
    """Every method section runs (the code default of grpo.methods; the main job runs the four core methods)."""
    raw["grpo"]["methods"] = ALL_METHODS


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> Config:
    return edited_config(tmp_path_factory.mktemp("params"), lambda raw: None)


@pytest.fixture(scope="module")
def stages(cfg: Config) -> list[dag.Stage]:
    return dag.build(cfg)


def edited_config(tmp_path: Path, edit) -> Config:
    """Load a copy of the repo's params.yaml with every method section running, after ``edit(raw_dict)`` (the
    profile overlay copied along)."""
    raw = yaml.safe_load(PARAMS.read_text())
    with_all_methods(raw)
    edit(raw)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    overlay = profile_path(PARAMS, raw.get("profile", "tiny"))
    if overlay.exists():
        shutil.copytree(overlay.parent, tmp_path / "profiles")
    return load(path)


def params_by_stage(cfg: Config) -> dict[str, dict]:
    return {s.name: dag.param_values(cfg, s) for s in dag.build(cfg)}


def test_stage_names_are_unique_and_valid_for_both_engines(stages):
    dag.check_names(stages)
    assert all(s.name.isidentifier() for s in stages)


def test_dag_is_acyclic_and_every_artifact_dep_comes_from_an_earlier_stage(stages):
    produced_by: dict[str, str] = {}
    graph: dict[str, set[str]] = {}
    for s in stages:
        graph[s.name] = set()
        for dep in s.deps:
            if dep.startswith("data/"):
                assert dep in produced_by, f"{s.name}: {dep} is not an output of an earlier stage"
                graph[s.name].add(produced_by[dep])
            else:  # a tracked input: the profile overlay
                assert dep.startswith("profiles/"), f"{s.name}: unexpected dep {dep}"
        for out in s.outputs:
            produced_by[out] = s.name
    order = list(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError on a cycle
    assert set(order) == {s.name for s in stages}


def test_every_script_is_in_its_own_deps_and_starts_its_command(stages):
    for s in stages:
        assert s.script.startswith("stages/") and s.script.endswith(".py")
        assert s.script in dag.inputs(s, REPO)
        assert s.cmd.startswith(f"python {s.script} --params params.yaml")


def test_stage_scripts_exist(stages):
    scripts = sorted({s.script for s in stages})
    if not any((REPO / p).exists() for p in scripts):
        pytest.skip("no stage script written yet (stages/*.py)")
    assert [p for p in scripts if not (REPO / p).exists()] == []


def test_every_path_travels_as_a_flag(stages):
    """Scripts never hard-code paths: each dep under data/ and each output is a CLI value, and vice versa; the
    tables stage gets directories (DVC's deps), and its inputs and outputs lie under them."""
    for s in stages:
        values = set()
        for _, v in s.args:
            values.update(v if isinstance(v, tuple) else (v,))
        paths = {v for v in values if v.startswith("data/")}
        declared = {d for d in s.deps if d.startswith("data/")} | set(s.outputs)
        # checkpoints are the one path that is neither a dep nor an output: no engine may delete them
        checkpoints = {v for flag, v in s.args if flag == "--checkpoints"}
        assert checkpoints <= {dag.checkpoints(s.name)}, s.name
        if s.kind != "tables":
            assert paths - checkpoints == declared and not s.dvc_deps, s.name
            continue
        out = dict(s.args)["--out"]
        assert paths == {*s.dvc_deps, out}
        assert all(any(d.startswith(f"{root}/") for root in s.dvc_deps) for d in s.deps if d.startswith("data/"))
        assert all(o.startswith(f"{out}/") for o in s.outputs)


def test_checkpoints_are_never_outputs(stages):
    """A killed training job's checkpoints must survive both engines' cleanup (Snakemake removes the outputs of
    incomplete jobs, DVC removes a stage's outputs before running it)."""
    trainers = [s for s in stages if s.script in ("stages/download.py", "stages/sft.py", "stages/grpo.py")]
    assert trainers
    for s in trainers:
        ckpt = dag.checkpoints(s.name)
        assert ("--checkpoints", ckpt) in s.args
        for out in (o for t in stages for o in t.outputs):
            assert not ckpt.startswith(out) and not out.startswith(ckpt), (s.name, out)


def test_no_output_overlaps_another(stages):
    outputs = [o for s in stages for o in s.outputs]
    assert len(outputs) == len(set(outputs)), "two stages write the same path"
    dirs = [d for s in stages for d in s.dir_outs]
    for out in outputs:
        for d in dirs:
            assert not out.startswith(d + "/"), f"{out} lies inside the directory output {d}"


def test_outputs_follow_the_path_convention(stages):
    for s in stages:
        kind = Path(s.script).stem
        for out in s.outputs:
            assert (out + "/").startswith(f"data/{kind}/"), f"{s.name}: {out} is not under data/{kind}/"


def test_stages_are_their_kinds_expanded_over_the_sweep(cfg, stages):
    """Each kind's stages are exactly the product of its wildcards' values, and the pattern stage (wildcards in
    braces) formats into each of them: what Snakemake's rule matches."""
    for kind in dag.kinds(cfg):
        mine = [s for s in stages if s.kind == kind.name]
        assert [tuple(v for _, v in s.wildcards) for s in mine] == list(
            itertools.product(*(dag.values(cfg, d) for d in kind.dims))
        )
        pattern = dag.pattern(cfg, kind.name)
        for s in mine:
            w = dict(s.wildcards)
            assert [o.format(**w) for o in pattern.outputs] == list(s.outputs)
            assert pattern.name.format(**w) == s.name


def test_build_expands_runs_and_tasks(cfg, stages):
    names = [s.name for s in stages]
    runs, tasks, images = cfg.run_names(), cfg.tasks, cfg.image.tasks
    image_seeds = cfg.image.seeds or cfg.grpo.seeds
    assert len(runs) == len(cfg.grpo.methods) * len(tasks) * len(cfg.grpo.seeds) + len(cfg.image.methods) * len(
        images
    ) * len(image_seeds)
    bases = layout.base_seeds(cfg)  # the main job: one base model (and SFT model) per GRPO seed
    assert bases == tuple(cfg.grpo.seeds)
    per_base = [f"download_s{b}" for b in bases] + [f"sft_s{b}" for b in bases]
    assert names[: 2 * len(bases)] == per_base and names[-1] == "tables"
    assert ("download_image" in names) == bool(images)
    assert [n for n in names if n.startswith("grpo_")] == [f"grpo_{r}" for r in runs]
    first = f"sft_s{bases[0]}"  # rollouts, rewards and credit: on the first seed's start model
    assert sorted(n for n in names if n.startswith("rollout_")) == sorted(f"rollout_{first}_{t}" for t in tasks)
    assert sorted(n for n in names if n.startswith("reward_")) == sorted(f"reward_{first}_{t}" for t in tasks)
    evals = {f"evaluate_{m}_s{b}_{t}" for m in ("base", "sft") for b in bases for t in tasks}
    evals |= {f"evaluate_{r}" for r in runs} | {f"evaluate_base_{t}" for t in images}  # image: no SFT row
    assert {n for n in names if n.startswith("evaluate_")} == evals
    credit = len(cfg.grpo.methods) * len(tasks)
    text = 2 * len(bases) + 2 * len(tasks) * len(bases) + 2 * len(tasks) + 2 * len(runs) + credit + 1
    assert len(stages) == text + bool(images) + len(images)
    by_name = {s.name: s for s in stages}
    for r in runs:  # each run is evaluated on its own task; a text run of seed s starts from SFT model s
        _, task, seed = cfg.run(r)
        assert dict(by_name[f"evaluate_{r}"].args)["--task"] == task
        if task in tasks:
            assert dict(by_name[f"grpo_{r}"].args)["--model"] == layout.sft_dir(seed) == f"data/sft/s{seed}/model"
            assert dict(by_name[f"sft_s{seed}"].args)["--model"] == layout.base_dir(seed)
    assert [dict(by_name[f"download_s{b}"].args)["--seed"] for b in bases] == [str(b) for b in bases]
    reads = layout.tables_inputs(cfg)  # what the tables stage reads: every evaluation, curve, score and credit
    image_evals = {e for e in evals if any(f"_{t}" in e for t in images)}
    assert len(reads["evals"]) == len(evals - image_evals)
    assert len(reads["image_results"]) == len(reads["image_folders"]) == len(image_evals)
    assert len(reads["curves"]) == len(runs) and len(reads["rollouts"]) == len(tasks)
    assert len(reads["credit"]) == credit
    produced = {o for s in stages for o in s.outputs}
    assert set(by_name["tables"].deps) - {"profiles/smoke.yaml"} == {p for v in reads.values() for p in v} <= produced


def test_changing_one_method_section_touches_only_its_runs(tmp_path, cfg):
    def edit(raw):
        raw["methods"]["rebrl"]["rebrl_mode"] = "t1"

    before, after = params_by_stage(cfg), params_by_stage(edited_config(tmp_path, edit))
    changed = {name for name in before if before[name] != after[name]}
    rebrl = {f"grpo_{r}" for r in cfg.run_names() if r.startswith("rebrl_")}
    rebrl |= {f"credit_rebrl_{t}" for t in cfg.tasks}  # the method's own credit measurement
    assert rebrl and changed == rebrl


def test_adding_a_seed_retrains_no_existing_run(tmp_path, cfg):
    def edit(raw):
        raw["grpo"]["seeds"] = [*cfg.grpo.seeds, max(cfg.grpo.seeds) + 1]

    before, after = params_by_stage(cfg), params_by_stage(edited_config(tmp_path, edit))
    changed = {name for name in before if before[name] != after.get(name)}
    assert changed == {"tables"}
    assert len(after) > len(before)


def test_params_name_keys_that_exist(cfg, stages):
    for s in stages:
        for key in s.params:
            assert dag.has_key(cfg.raw, key), f"{s.name}: {key}"
    grpo = next(s for s in stages if s.name.startswith("grpo_"))
    assert "grpo.methods" not in grpo.params and "grpo.seeds" not in grpo.params


def test_cmd_quotes_values_and_repeats_flags():
    s = dag.Stage(
        name="x",
        kind="x",
        wildcards=(),
        script="stages/x.py",
        args=(("--params", "params.yaml"), ("--in", ("a b", "c")), ("--out", "d")),
        deps=(),
    )
    assert s.cmd == "python stages/x.py --params params.yaml --in 'a b' --in c --out d"


def test_the_packaged_base_models_index_is_a_dep_where_the_workspace_holds_the_library(tmp_path, stages):
    """The text download reads ``src/ddmrl/embedded/bases.json``: a dep in the repository, as the library's modules
    are; a workspace without ``src/`` (the package installed) has neither, and its DAG still runs."""
    download = next(s for s in stages if s.kind.startswith("download") and dag.PACKAGED_BASES in s.data)
    assert dag.PACKAGED_BASES in dag.code(download, REPO)
    shutil.copytree(REPO / "stages", tmp_path / "stages")
    assert dag.code(download, tmp_path) == (download.script,)


def test_code_files_follow_imports_transitively(tmp_path):
    """A script's code deps are the ddmrl modules it imports, through other modules and package __init__s."""
    src = tmp_path / "src" / "ddmrl"
    (src / "pkg").mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "pkg" / "__init__.py").write_text("from ddmrl.pkg.b import f\n")
    (src / "pkg" / "b.py").write_text("import ddmrl.mod\n")
    (src / "mod.py").write_text("import os\n")
    (src / "unused.py").write_text("")
    (tmp_path / "stages").mkdir()
    (tmp_path / "stages" / "x.py").write_text("from ddmrl.pkg import f\n")
    assert dag.code_files("stages/x.py", tmp_path) == (
        "src/ddmrl/__init__.py",
        "src/ddmrl/mod.py",
        "src/ddmrl/pkg/__init__.py",
        "src/ddmrl/pkg/b.py",
    )


def test_code_files_follow_module_level_imports_and_leave_the_others_to_uses(tmp_path):
    """A registry member is no dep (a stage names those it uses); a module imported inside a function is a dep only
    of a stage that uses it, imported at module level it always is; a package export names no module of its own."""
    src = tmp_path / "src" / "ddmrl"
    (src / "pkg").mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "pkg" / "__init__.py").write_text('REG = Registry({"c": "ddmrl.pkg.c:g"})\n')
    (src / "pkg" / "b.py").write_text("def f():\n    from ddmrl import hub\n")
    (src / "pkg" / "c.py").write_text("")
    (src / "hub.py").write_text("")
    (tmp_path / "stages").mkdir()
    (tmp_path / "stages" / "x.py").write_text("from ddmrl.pkg import REG\nfrom ddmrl.pkg.b import f\n")
    base = ("src/ddmrl/__init__.py", "src/ddmrl/pkg/__init__.py", "src/ddmrl/pkg/b.py")
    assert dag.code_files("stages/x.py", tmp_path) == base
    assert dag.code_files("stages/x.py", tmp_path, ("ddmrl.pkg.c",)) == (*base, "src/ddmrl/pkg/c.py")
    assert dag.code_files("stages/x.py", tmp_path, ("ddmrl.hub",)) == tuple(sorted((*base, "src/ddmrl/hub.py")))
    (tmp_path / "stages" / "y.py").write_text("from ddmrl.pkg.b import f\nimport ddmrl.hub\n")
    assert "src/ddmrl/hub.py" in dag.code_files("stages/y.py", tmp_path)
    (src / "pkg" / "b.py").write_text("from ddmrl import hub\n\n\ndef f():\n    pass\n")
    assert "src/ddmrl/hub.py" in dag.code_files("stages/x.py", tmp_path)


def test_code_files_skip_imports_for_type_checkers(tmp_path):
    """An import under ``if TYPE_CHECKING:`` never runs, so it is no dep; its ``else`` branch runs."""
    src = tmp_path / "src" / "ddmrl"
    src.mkdir(parents=True)
    for name in ("__init__", "typed", "other"):
        (src / f"{name}.py").write_text("")
    (tmp_path / "stages").mkdir()
    (tmp_path / "stages" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ddmrl.typed\nelse:\n    import ddmrl.other\n"
    )
    assert dag.code_files("stages/x.py", tmp_path) == ("src/ddmrl/__init__.py", "src/ddmrl/other.py")


def test_an_auxiliary_policy_is_a_dep_of_its_methods_runs_only(tmp_path):
    """In the extended profile the unmasking policy's code (and the sampler it drives) is a dep of the
    unmask_policy runs and their evaluations, the schedule policy's of the Co-GRPO runs and theirs; neither of any
    other stage."""
    cfg = edited_config(tmp_path, lambda raw: raw.update(profile="extended"))
    stages = dag.build(cfg)
    by_method = {
        m: {s.name for s in stages if dict(s.wildcards).get("method") == m and s.kind.startswith(("grpo", "evaluate"))}
        for m in ("unmask_policy", "cogrpo", "cogrpo_schedule_only")
    }
    assert all(by_method.values()), by_method
    unmasking = by_method["unmask_policy"]
    assert users(stages, "src/ddmrl/aux_policies/unmasking.py") == unmasking
    assert users(stages, "src/ddmrl/samplers/unmasking.py") == unmasking
    assert (
        users(stages, "src/ddmrl/aux_policies/schedule.py") == by_method["cogrpo"] | by_method["cogrpo_schedule_only"]
    )


def test_editing_gdsd_reruns_only_its_runs_in_the_extended_profile(tmp_path):
    """GDSD's modules are code of their own runs only (DAG data): its objective, weightings and advantages
    (``ddmrl.objectives.gdsd``) and its method module, which GDSD-TLC's imports, are deps of the gdsd and gdsd_tlc
    runs and credit stages (the tables read every method's module); gdsd_tlc's module of its own stages only; their
    downstream is those runs' evaluations and the tables."""
    cfg = edited_config(tmp_path, lambda raw: raw.update(profile="extended"))
    stages = dag.build(cfg)

    def own(method: str) -> set[str]:
        runs = {f"grpo_{method}_{t}_s{s}" for t in cfg.tasks for s in cfg.grpo.seeds}
        return runs | {f"credit_{method}_{t}" for t in cfg.tasks}

    both = own("gdsd") | own("gdsd_tlc")
    assert own("gdsd") <= {s.name for s in stages} and own("gdsd_tlc") <= {s.name for s in stages}
    assert users(stages, "src/ddmrl/objectives/gdsd.py") == both
    assert users(stages, "src/ddmrl/methods/gdsd.py") == both | {"tables"}
    assert users(stages, "src/ddmrl/methods/gdsd_tlc.py") == own("gdsd_tlc") | {"tables"}
    evaluations = {f"evaluate_{m}_{t}_s{s}" for m in ("gdsd", "gdsd_tlc") for t in cfg.tasks for s in cfg.grpo.seeds}
    assert downstream(stages, both) == both | evaluations | {"tables"}


def test_tracerl_value_model_code_is_a_dep_of_its_own_stages_only(tmp_path):
    """In the extended profile editing TraceRL's value model (its method module, its objective and value model module)
    reruns its own runs and credit measurement (and the tables for the method module, which label its rows), nothing
    else; TraceRL's own module is not its dep."""
    cfg = edited_config(tmp_path, lambda raw: raw.update(profile="extended"))
    stages = dag.build(cfg)
    runs = {f"grpo_tracerl_value_{t}_s{s}" for t in cfg.tasks for s in cfg.grpo.seeds}
    own = runs | {f"credit_tracerl_value_{t}" for t in cfg.tasks}
    assert runs <= {s.name for s in stages}
    assert users(stages, "src/ddmrl/objectives/value.py") == own
    assert users(stages, "src/ddmrl/methods/tracerl_value.py") == own | {"tables"}
    assert not own & users(stages, "src/ddmrl/methods/tracerl.py")
    evaluations = {f"evaluate_tracerl_value_{t}_s{s}" for t in cfg.tasks for s in cfg.grpo.seeds}
    assert downstream(stages, own) == own | evaluations | {"tables"}


def test_the_mar_branch_runs_in_the_extended_profile_only_and_its_code_is_its_own(tmp_path, cfg, stages):
    """The default profile has no MAR stage; in the extended one the MAR stages read the MAR base model and its
    tasks, the tables read their GenEval results and curves, and ddmrl.mar is code of the MAR stages alone."""
    assert not cfg.mar.methods and not [s for s in stages if "mar" in s.kind]
    ext = edited_config(tmp_path, lambda raw: raw.update(profile="extended"))
    every = dag.build(ext)
    mar = {s.name for s in every if s.kind in ("download_mar", "grpo_mar", "evaluate_mar_base", "evaluate_mar")}
    runs = [f"mar_{m}_geneval_mini_s{s}" for m in ext.mar.methods for s in ext.mar.seeds]
    assert mar == {"download_mar", "evaluate_mar_base"} | {f"{k}_{r}" for r in runs for k in ("grpo", "evaluate")}
    assert users(every, "src/ddmrl/mar/grpo.py") == {f"grpo_{r}" for r in runs}
    assert users(every, "src/ddmrl/mar/model.py") == mar
    tables = next(s for s in every if s.kind == "tables")
    for r in ("mar_base", *runs):
        assert layout.image_results(layout.EVALUATE_DIR, r, "geneval_mini") in tables.deps
    assert {layout.curve(layout.GRPO_DIR, r) for r in runs} <= set(tables.deps)
    grpo = {s.name: s for s in every}[f"grpo_{runs[0]}"]
    assert layout.MAR_BASE_DIR in grpo.deps and f"mar.sections.{ext.mar.methods[0]}" in grpo.params


def users(stages, path: str) -> set[str]:
    return {s.name for s in stages if path in dag.code(s, REPO)}


def test_touching_library_code_reruns_only_the_stages_that_run_it(cfg, stages):
    """The embedded default, from the DAG data (test_smoke measures the same with both engines after a run)."""
    for path in ("src/ddmrl/sandbox.py", "src/ddmrl/hub.py", "src/ddmrl/rewards/remote.py"):
        assert users(stages, path) == set(), path
    assert users(stages, "src/ddmrl/tables.py") == {"tables"}
    assert downstream(stages, {"tables"}) == {"tables"}
    spg = {f"grpo_spg_{t}_s{s}" for t in cfg.tasks for s in cfg.grpo.seeds} | {f"credit_spg_{t}" for t in cfg.tasks}
    assert users(stages, "src/ddmrl/objectives/spg.py") == spg
    assert downstream(stages, spg) == spg | {f"evaluate_spg_{t}_s{s}" for t in cfg.tasks for s in cfg.grpo.seeds} | {
        "tables"
    }
    clipped = {r for r in cfg.run_names() if r.split("_")[0] in ("diffu", "unigrpo", "maskgrpo", "rebrl", "tracerl")}
    credit = {f"credit_{m}_{t}" for m in ("diffu_grpo", "unigrpo", "maskgrpo", "rebrl", "tracerl") for t in cfg.tasks}
    assert users(stages, "src/ddmrl/objectives/token_clip.py") == {f"grpo_{r}" for r in clipped} | credit
    rebrl = {f"grpo_rebrl_{t}_s{s}" for t in cfg.tasks for s in cfg.grpo.seeds} | {
        f"credit_rebrl_{t}" for t in cfg.tasks
    }
    assert users(stages, "src/ddmrl/methods/rebrl.py") == rebrl | {"tables"}  # a method's module: its runs, the rows
    task = cfg.tasks[-1]  # a task's module: the stages that build or train on every task, and its own stages
    every_task = {s.name for s in stages if s.kind in ("download", "sft")} | {"tables"}  # one per base model
    assert users(stages, f"src/ddmrl/tasks/{task}.py") == every_task | {
        s.name for s in stages if dict(s.wildcards).get("task") == task
    }
    for s in stages:  # what every stage runs, and what no stage but the tables does
        files = dag.code(s, REPO)
        assert "src/ddmrl/config/__init__.py" in files
        if s.kind == "grpo":
            assert "src/ddmrl/training/grpo.py" in files and "src/ddmrl/masking/views.py" in files


def test_editing_rldf_reruns_only_its_own_stages(tmp_path):
    """In the extended profile RLDF's three modules (its method, its objective with its weights and advantages, its
    view sampler) are code of its own GRPO runs and credit measurements only (the method's module also of the tables,
    which label its rows); what reruns after an edit is those, their evaluations and the tables."""
    ext = edited_config(tmp_path, lambda raw: raw.update(profile="extended"))
    every = dag.build(ext)
    runs = {f"grpo_rldf_{t}_s{s}" for t in ext.tasks for s in ext.grpo.seeds} | {f"credit_rldf_{t}" for t in ext.tasks}
    assert "rldf" in ext.grpo.methods and runs <= {s.name for s in every}
    assert users(every, "src/ddmrl/methods/rldf.py") == runs | {"tables"}
    for path in ("src/ddmrl/objectives/rldf.py", "src/ddmrl/masking/rldf.py"):
        assert users(every, path) == runs, path
    evaluations = {f"evaluate_rldf_{t}_s{s}" for t in ext.tasks for s in ext.grpo.seeds}
    assert downstream(every, runs) == runs | evaluations | {"tables"}


def test_dvc_yaml_names_the_same_code(tmp_path):
    """In dvc.yaml (tasks expanded by DVC, as src/ddmrl/tasks/${item.task}.py) an objective is a dep of its
    methods' entries only, and the tables code of the tables entry only."""
    from ddmrl.pipeline import export

    entries = yaml.safe_load(export.render(PARAMS))["stages"]
    methods = load(PARAMS).grpo.methods

    def entries_with(path):
        return {name for name, e in entries.items() if path in e["deps"]}

    assert entries_with("src/ddmrl/objectives/spg.py") == ({"credit_spg", "grpo_spg"} if "spg" in methods else set())
    assert entries_with("src/ddmrl/objectives/token_clip.py") >= {"credit_rebrl", "grpo_rebrl", "grpo_unigrpo"}
    assert entries_with("src/ddmrl/tables.py") == {"tables"}
    assert entries_with("src/ddmrl/sandbox.py") == entries_with("src/ddmrl/hub.py") == set()
    assert "src/ddmrl/tasks/${item.task}.py" in entries["grpo_rebrl"]["deps"]
    assert not entries_with("src/ddmrl/tasks/sudoku4.py") - {"download", "sft", "tables"}


def test_non_default_profile_makes_the_overlay_a_dep(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mini.yaml").write_text("seed: 1\n")
    raw = yaml.safe_load(PARAMS.read_text())
    raw["profile"] = "mini"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    stages = dag.build(load(tmp_path / "params.yaml"))
    assert all("profiles/mini.yaml" in s.deps for s in stages)


def test_image_branch_stages(tmp_path):
    """With image tasks: download_image builds the branch, image runs start from its base model (no SFT), their
    evaluations write GenEval's layout and results, and the tables read those."""
    raw = yaml.safe_load(PARAMS.read_text())
    raw["image"]["tasks"] = ["geneval_mini"]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load(path)
    by_name = {s.name: s for s in dag.build(cfg)}
    download = by_name["download_image"]
    assert dict(download.args)["--modality"] == "image"
    assert set(download.dir_outs) == {"data/download/image/tasks", "data/download/image/base"}
    assert "image.model" in download.params and "model" not in download.params
    for m in cfg.image.methods:
        run = by_name[f"grpo_{m}_geneval_mini_s0"]
        assert dict(run.args)["--model"] == "data/download/image/base"
        assert dict(run.args)["--tasks"] == "data/download/image/tasks"
        assert "image.grpo" in run.params
        ev = by_name[f"evaluate_{m}_geneval_mini_s0"]
        assert dict(ev.args)["--images"] == f"data/evaluate/{m}_geneval_mini_s0/geneval_mini"
        assert ev.dir_outs == (dict(ev.args)["--images"],) and "image.evaluate" in ev.params
    assert "evaluate_sft_geneval_mini" not in by_name and "credit_unigrpo_geneval_mini" not in by_name
    reads = layout.tables_inputs(cfg)
    assert len(reads["image_results"]) == len(reads["image_folders"]) == 1 + len(cfg.image.methods)
    assert set(reads["image_folders"]) <= set(by_name["tables"].deps)
    assert f"data/tables/{dag.CONTACT_SHEETS}" in by_name["tables"].dir_outs


def test_training_stages_launch_with_python_unless_params_say_accelerate(tmp_path, stages):
    """The default commands stay ``python stages/...``; ``launch: {launcher: accelerate}`` prefixes the same script
    and flags with ``accelerate launch`` and asks the scheduler for one GPU per process."""
    assert all(s.launcher == ("python",) and s.resources == () for s in stages)

    def edit(raw):
        raw["sft"]["launch"] = {"launcher": "accelerate", "num_processes": 4}
        raw["methods"]["rebrl"]["launch"] = {
            "launcher": "accelerate",
            "config_file": "configs/accelerate/zero2.yaml",
            "num_processes": 8,
        }

    after = {s.name: s for s in dag.build(edited_config(tmp_path, edit))}
    before = {s.name: s for s in stages}
    assert after["sft_s0"].cmd == (
        "accelerate launch --config_file configs/accelerate/ddp.yaml --num_processes 4 "
        + before["sft_s0"].cmd.removeprefix("python ")
    )
    sft = {n for n in before if n.startswith("sft_s")}  # one SFT stage per base model
    assert all(after[n].resources == (("gpu", 4),) for n in sft)
    changed = {n for n in before if before[n].cmd != after[n].cmd}
    rebrl = {n for n in before if n.startswith("grpo_rebrl_")}
    assert rebrl and changed == sft | rebrl
    for n in rebrl:
        assert after[n].cmd.startswith(
            "accelerate launch --config_file configs/accelerate/zero2.yaml --num_processes 8 stages/grpo.py --params"
        )
        assert after[n].resources == (("gpu", 8),)


def test_a_run_across_nodes_runs_one_launcher_per_node_through_srun(tmp_path, stages):
    """``launch.num_machines: 2``: the same script and flags behind srun (one task per node) and the per-node
    launcher, in a job of two nodes whose command runs srun itself (the SLURM plugin's mpi resource), with the
    processes' GPUs split over the nodes (``gres`` is per node)."""

    def edit(raw):
        raw["methods"]["rebrl"]["launch"] = {"launcher": "accelerate", "num_processes": 16, "num_machines": 2}

    after = {s.name: s for s in dag.build(edited_config(tmp_path, edit))}
    rebrl = [n for n in after if n.startswith("grpo_rebrl_")]
    assert rebrl
    for n in rebrl:
        before = next(s for s in stages if s.name == n)
        assert after[n].cmd == (
            "srun --nodes 2 --ntasks 2 --ntasks-per-node 1 --kill-on-bad-exit=1 python -m ddmrl.training.nodes "
            "--config_file configs/accelerate/ddp.yaml --num_processes 16 --num_machines 2 "
            + before.cmd.removeprefix("python ")
        )
        assert dict(after[n].resources) == {"nodes": 2, "tasks": 2, "mpi": "srun", "tasks_per_gpu": 0, "gres": "gpu:8"}
    assert all(s.cmd == after[s.name].cmd for s in stages if s.name not in rebrl)


def test_lm_eval_stages_are_off_by_default_and_their_adapter_reruns_only_them(tmp_path, stages):
    """lm_eval.tasks empty (params.yaml): no lm_eval stage. Named: one per model (base, SFT, every GRPO run), each
    reading the model, the YAML tasks' folder and the keys it uses; the harness adapter (ddmrl.lmeval) is a dep of
    those stages only, and the tables stage alone reads what they write (its lm_eval table)."""
    assert not any(s.kind.startswith("lm_eval") for s in stages)

    def on(raw):
        raw["lm_eval"] = {"tasks": ["gsm8k_local"], "include_path": "lm_tasks", "num_fewshot": {"gsm8k_local": 2}}

    cfg = edited_config(tmp_path, on)
    built = dag.build(cfg)
    lm = {s.name: s for s in built if s.kind.startswith("lm_eval")}
    evaluated = {dict(s.args)["--name"]: dict(s.args)["--model"] for s in built if s.kind.startswith("evaluate")}
    assert set(lm) == {f"lm_eval_{name}" for name in evaluated}  # every model ddmrl evaluates
    for s in lm.values():
        name = dict(s.args)["--name"]
        assert s.deps == (evaluated[name], "lm_tasks") and s.outputs == (f"data/lm_eval/{name}/results.json",)
        assert s.params == ("profile", "seed", "lm_eval", "evaluate.sampler")
    assert users(built, "src/ddmrl/lmeval.py") == set(lm)
    assert users(built, "src/ddmrl/likelihood/sequence.py") == set(lm)
    assert downstream(built, set(lm)) == {*lm, "tables"}
    tables = next(s for s in built if s.name == "tables")
    assert {s.outputs[0] for s in lm.values()} <= set(tables.deps) and dict(tables.args)["--lm-eval"] == "data/lm_eval"
    assert {"data/tables/lm_eval.md", "data/tables/lm_eval.csv"} <= set(tables.outputs)
    assert {s.name for s in built} - set(lm) == {s.name for s in stages}  # every other stage as it was
