"""Snakemake and DVC run the same DAG: the committed dvc.yaml is current; for every profile and after a sweep change
both engines expand the same jobs with the same command lines (DVC from params.yaml at run time, without a new
export); Snakemake has one rule per kind and takes `--config`; a bad params.yaml stops Snakemake with one line; each
Snakemake job runs its own command.

Everything runs in a temporary copy of the repository (a few seconds per Snakemake call).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from helpers import REPO, copy_repo, edit_params, planned, planned_names, snakemake

from ddmrl.config import ConfigError, load
from ddmrl.pipeline import dag, engines, export

PROFILES = ["tiny", "smoke", "paper_llada_math", "paper_mmada_geneval", "extended"]

# Stands in for every stage script in the run test: echoes its command line (to the job's log) and writes the
# outputs the DAG gives its command (outputs.json, written by the test), so Snakemake accepts the job.
RECORDER = """\
import json, os, shlex, sys
cmd = shlex.join(["python", *sys.argv])
print(cmd)
for out, is_dir in json.load(open("outputs.json"))[cmd]:
    if is_dir:
        os.makedirs(out, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(out), exist_ok=True)
        open(out, "w").write("{}")
"""


def override(root: Path, values: dict) -> Path:
    """The params file a Snakemake run with ``values`` as its ``--config`` / ``--configfile`` gives its stages."""
    return Path(engines.params_file(values, str(root / "params.yaml")))


def test_each_override_has_its_own_params_file(tmp_path):
    """A run (or a dry run) with other values beside a running workflow leaves that workflow's params as they were."""
    root = copy_repo(tmp_path)
    smoke = override(root, {"profile": "smoke"})
    first = smoke.read_text()
    seeds = override(root, {"grpo": {"seeds": [0, 1]}})
    assert seeds != smoke and smoke.read_text() == first
    assert list(load(seeds).grpo.seeds) == [0, 1] and load(smoke).profile == "smoke"
    assert override(root, {"profile": "smoke"}) == smoke  # the same values: the same file, nothing reruns
    assert (smoke.parent / "profiles" / "smoke.yaml").read_text() == (root / "profiles" / "smoke.yaml").read_text()


def expected(root) -> dict[str, tuple[tuple[str, ...], str]]:
    """Stage name -> (sorted outputs, command) of the DAG for the workspace's params.yaml."""
    return {s.name: (tuple(sorted(s.outputs)), s.cmd) for s in dag.build(load(root / "params.yaml"))}


def snakemake_expands(root) -> dict[str, tuple[tuple[str, ...], str]]:
    result = snakemake(root, "-n", "--forceall", "-p")
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = planned(result.stdout)
    for job in jobs.values():  # the rule is the job's kind
        assert job.rule == next(s.kind for s in dag.build(load(root / "params.yaml")) if s.name == job.name)
    return {name: (job.outputs, job.cmd) for name, job in jobs.items()}


def dvc_expands(root) -> dict[str, tuple[tuple[str, ...], str]]:
    """What DVC itself expands from dvc.yaml and params.yaml, by stage name (through the export's addresses)."""
    repo_mod = pytest.importorskip("dvc.repo")
    with repo_mod.Repo(str(root), config={"core": {"no_scm": True}}) as repo:
        graph = repo.index.graph  # builds the DAG: raises on overlapping outputs or cycles
        stages = {s.name: s for s in repo.index.stages}
        assert graph.number_of_nodes() == len(stages)
        by_address = {a: (tuple(sorted(str(o) for o in s.outs)), s.cmd) for a, s in stages.items()}
    names = export.addresses(root / "params.yaml")
    assert sorted(names.values()) == sorted(by_address)
    return {name: by_address[address] for name, address in names.items()}


# ------------------------------------------------------------------------------------------------ dvc.yaml


def test_committed_dvc_yaml_is_a_fresh_export():
    assert (REPO / "dvc.yaml").read_text(encoding="utf-8") == export.render(REPO / "params.yaml"), (
        "dvc.yaml is out of date: run python -m ddmrl.pipeline.export"
    )


def test_export_is_deterministic_block_style_and_checkable(tmp_path):
    root = copy_repo(tmp_path)
    text = export.render(root / "params.yaml")
    assert text == export.render(root / "params.yaml")
    assert text.startswith(export.HEADER + "# profile: tiny\n")
    assert not re.search(r":\s*[\[{]", text), "flow-style YAML in dvc.yaml (DVC cannot interpolate inside it)"

    assert export.main(["--params", str(root / "params.yaml"), "--check"]) == 1  # missing
    assert export.main(["--params", str(root / "params.yaml")]) == 0
    assert (root / "dvc.yaml").read_text(encoding="utf-8") == text
    assert export.main(["--params", str(root / "params.yaml"), "--check"]) == 0
    edit_params(root, lambda raw: raw["methods"]["rebrl"].update(rebrl_mode="t1"))
    assert export.main(["--params", str(root / "params.yaml"), "--check"]) == 0  # a value, not the DAG, changed
    edit_params(root, lambda raw: raw["grpo"].update(seeds=[0, 1]))
    assert export.main(["--params", str(root / "params.yaml"), "--check"]) == 0  # DVC expands the seeds itself
    edit_params(root, lambda raw: raw["grpo"].update(methods=[*raw["grpo"]["methods"], "rebrl_t2"]))
    edit_params(root, lambda raw: raw["methods"].update(rebrl_t2={"method": "rebrl", "rebrl_mode": "t2"}))
    assert export.main(["--params", str(root / "params.yaml"), "--check"]) == 1  # a method section is an entry


def test_dvc_yaml_has_one_entry_per_kind_and_method_and_interpolates_the_sweep(tmp_path):
    root = copy_repo(tmp_path)
    edit_params(root, lambda raw: raw["image"].update(tasks=["geneval_mini"]))  # profiles/image.yaml's branch
    cfg = load(root / "params.yaml")
    entries = yaml.safe_load(export.render(root / "params.yaml"))["stages"]
    names = {k.name for k in dag.kinds(cfg) if not any(d.code for d in k.dims)}
    names |= {f"{k}_{m}" for k in ("credit", "grpo", "evaluate") for m in cfg.grpo.methods}
    names |= {f"{k}_{m}" for k in ("grpo_image", "evaluate_image") for m in cfg.image_methods}
    assert set(entries) == names
    assert entries["grpo_rebrl"]["matrix"] == {"task": "${tasks}", "seed": "${grpo.seeds}"}
    assert entries["grpo_image_rebrl"]["matrix"] == {"task": "${image.tasks}", "seed": "${grpo.seeds}"}
    assert entries["rollout"]["matrix"] == {"task": "${tasks}"}
    assert "--run rebrl_${item.task}_s${item.seed}" in entries["grpo_rebrl"]["cmd"]
    assert "methods.rebrl" in entries["grpo_rebrl"]["params"] and "grpo.seeds" not in entries["grpo_rebrl"]["params"]
    assert entries["tables"]["metrics"] == ["data/tables/metrics.json"]  # the headline numbers, nothing else
    assert not any("metrics" in e for n, e in entries.items() if n != "tables")
    assert entries["tables"]["deps"][:4] == ["data/evaluate", "data/grpo", "data/reward/sft_s0", "data/credit"]


def test_a_profile_that_sets_the_sweep_is_exported_with_its_lists(tmp_path):
    """DVC reads params.yaml alone: a list the overlay sets is written out, the others stay interpolated."""
    root = copy_repo(tmp_path, profile="smoke")
    entries = yaml.safe_load(export.render(root / "params.yaml"))["stages"]
    assert entries["grpo_rebrl"]["matrix"] == {"task": ["sudoku4"], "seed": "${grpo.seeds}"}
    assert "grpo_image_diffu_grpo" not in entries and "grpo_image_rebrl" in entries  # smoke: image.methods
    assert "profiles/smoke.yaml" in entries["grpo_rebrl"]["deps"]


def test_a_section_on_some_tasks_runs_on_those_only(tmp_path):
    """``methods.<section>.tasks``: the section's runs, evaluations and credit on those tasks only, in both engines
    (its dvc.yaml entry lists them); a task outside ``tasks:`` is refused with the key."""
    root = copy_repo(tmp_path)
    edit_params(root, lambda raw: raw["methods"]["unigrpo"].update(tasks=["chain"]))
    assert export.main(["--params", str(root / "params.yaml")]) == 0
    want = expected(root)
    unigrpo = {n for n in want if "unigrpo" in n and "geneval" not in n}  # its image runs are not text runs
    assert unigrpo and all("chain" in n for n in unigrpo) and any("maskgrpo_sudoku4" in n for n in want)
    assert {n for n in unigrpo if n.startswith("credit")} == {"credit_unigrpo_chain"}
    entries = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    assert entries["grpo_unigrpo"]["matrix"] == {"task": ["chain"], "seed": "${grpo.seeds}"}
    assert snakemake_expands(root) == want
    assert dvc_expands(root) == want
    edit_params(root, lambda raw: raw["methods"]["unigrpo"].update(tasks=["countdown3"]))
    with pytest.raises(ConfigError, match=r"methods\.unigrpo\.tasks = \['countdown3'\]: its tasks"):
        load(root / "params.yaml")


def test_dvc_plots_cover_every_curve_and_the_credit():
    plots = {k: v for p in yaml.safe_load((REPO / "dvc.yaml").read_text())["plots"] for k, v in p.items()}
    assert set(plots) == {"reward", "kl", "loss", "clip_ratio", "credit"}
    for key in ("reward", "kl", "loss", "clip_ratio"):
        assert plots[key]["y"] == {"data/tables/curves.csv": key} and plots[key]["x"] == "step"
    assert plots["credit"]["y"] == {"data/tables/credit.csv": "relative_credit"}
    template = json.loads((REPO / ".dvc" / "plots" / "series.json").read_text())
    assert template["encoding"]["color"]["field"] == "series"  # one line per run, as the tables stage writes


# ------------------------------------------------------------------------------------------------ parity


@pytest.mark.parametrize("profile", PROFILES)
def test_both_engines_expand_the_same_jobs_with_the_same_commands(tmp_path, profile):
    root = copy_repo(tmp_path, profile=profile)
    assert export.main(["--params", str(root / "params.yaml")]) == 0
    want = expected(root)
    assert snakemake_expands(root) == want
    assert dvc_expands(root) == want


def test_a_sweep_change_needs_no_export(tmp_path):
    """More seeds and fewer tasks: DVC expands them from params.yaml with the dvc.yaml exported before, Snakemake
    from its wildcards, and both match the DAG of the new params."""
    root = copy_repo(tmp_path)
    edit_params(root, lambda raw: raw["image"].update(tasks=["geneval_mini"]))  # profiles/image.yaml's branch
    assert export.main(["--params", str(root / "params.yaml")]) == 0
    edit_params(root, lambda raw: raw.update(tasks=["countdown3"]))
    edit_params(root, lambda raw: raw["grpo"].update(seeds=[0, 3]))
    want = expected(root)
    assert sum(name.startswith("grpo_") for name in want) == 2 * (8 + 4)
    assert snakemake_expands(root) == want
    assert dvc_expands(root) == want


# ------------------------------------------------------------------------------------------------ Snakemake


def test_snakemake_has_one_rule_per_kind(tmp_path):
    root = copy_repo(tmp_path)
    listing = snakemake(root, "--list-rules", check=True).stdout.splitlines()
    rules = {line.split()[0] for line in listing if line.strip() and not line[0].isspace()}
    assert rules == {k.name for k in dag.all_kinds(load(root / "params.yaml"))} | {"all"}


def test_snakemake_config_switches_the_profile(tmp_path):
    root = copy_repo(tmp_path)
    result = snakemake(root, "-n", "-p", "--config", "profile=smoke")
    assert result.returncode == 0, result.stderr[-2000:]
    override_file = override(root, {"profile": "smoke"}).relative_to(root).as_posix()
    assert yaml.safe_load((root / override_file).read_text())["profile"] == "smoke"
    (root / "params.yaml").write_text((root / override_file).read_text())
    smoke = {name: (outs, cmd.replace(override_file, "params.yaml")) for name, (outs, cmd) in expected(root).items()}
    jobs = planned(result.stdout)
    assert {n: (j.outputs, j.cmd.replace(override_file, "params.yaml")) for n, j in jobs.items()} == smoke
    assert all(f"--params {override_file}" in j.cmd for j in jobs.values())


#: the extras whose packages the paper profiles' stages import (DeepSpeed, MMaDA's models/ package, math-verify)
CONDA_EXTRAS = ("gpu", "mmada", "math")


def test_conda_env_and_slurm_profile_follow_the_project():
    """workflow/envs/ddmrl.yaml pins exactly pyproject's dependencies and the extras the paper profiles import, at
    pyproject's pins; the SLURM profile sets resources per kind."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = [p for name in CONDA_EXTRAS for p in project["optional-dependencies"][name]]
    wanted = {d.split("#")[0].strip() for d in [*project["dependencies"], *extras]}
    env = yaml.safe_load((REPO / "workflow" / "envs" / "ddmrl.yaml").read_text())["dependencies"]
    pins = [p for d in env if isinstance(d, dict) for p in d["pip"] if "==" in p]
    assert sorted(pins) == sorted(wanted)
    assert all("==" in p for p in wanted), "every package the environment lists is pinned exactly"
    slurm = yaml.safe_load((REPO / "workflow" / "profiles" / "slurm" / "config.yaml").read_text())
    kinds = {k.name for k in dag.all_kinds(load(REPO / "params.yaml"))}
    assert set(slurm["set-resources"]) == kinds - {"reward", "tables"}  # those two run on the default CPU slot


# ------------------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("key", "edit"),
    [
        ("grpo.methods", lambda raw: raw["grpo"].update(methods=["nope"])),
        ("grpo.num_generations", lambda raw: raw["grpo"].update(num_generations=1)),
        ("methods.maskgrpo.gamma", lambda raw: raw["methods"].setdefault("maskgrpo", {}).update(gamma=1.0)),
    ],
)
def test_bad_params_stop_snakemake_with_one_line(tmp_path, key, edit):
    root = copy_repo(tmp_path)
    edit_params(root, edit)
    result = snakemake(root, "-n")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    errors = [line for line in output.splitlines() if "error:" in line]
    assert len(errors) == 1 and key in errors[0], output[-2000:]
    assert errors[0].startswith("error: params.yaml: ")
    assert "Traceback" not in output
    assert not (root / "data").exists()


# ------------------------------------------------------------------------------------------------ a real run


def test_each_snakemake_job_runs_its_own_command(tmp_path):
    """Every job of a rule runs the command of its own wildcards (the DAG's stage); a second run does nothing, a run
    with `--config` values or a profile plans only the jobs whose values change, and ``--forcerun grpo`` plans every
    GRPO run and what depends on it."""
    root = copy_repo(tmp_path)

    def shrink(raw):  # two text methods (the image branch is off; profiles/image.yaml's one image method below)
        raw["grpo"]["methods"] = raw["grpo"]["methods"][-2:]
        raw["image"]["methods"] = raw["image"]["methods"][-1:]

    edit_params(root, shrink)
    stages = dag.build(load(root / "params.yaml"))
    outputs = {s.cmd: [(o, o in s.dir_outs) for o in s.outputs] for s in stages}
    (root / "outputs.json").write_text(json.dumps(outputs))
    for script in {s.script for s in stages}:
        (root / script).write_text(RECORDER)
    result = snakemake(root, "--cores", "2")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    for s in stages:
        assert (root / "logs" / f"{s.name}.log").read_text().strip() == s.cmd, s.name
        assert (root / "logs" / f"{s.name}.benchmark.tsv").exists()
    assert "Nothing to be done" in snakemake(root, "-n").stdout
    # a --config run passes the override's copy as --params: it reruns only what its values change
    assert "Nothing to be done" in snakemake(root, "-n", "--config", "seed=0").stdout
    (root / "more_seeds.yaml").write_text(yaml.safe_dump({"grpo": {"seeds": [0, 1]}}))
    assert snakemake(root, "-n", "--configfile", "more_seeds.yaml").returncode == 0  # writes the override's copy
    added = {s.name for s in dag.build(load(override(root, {"grpo": {"seeds": [0, 1]}})))} - {s.name for s in stages}
    assert added and planned_names(root, "--configfile", "more_seeds.yaml") == added | {"tables"}
    # a profile too: RebRL's ablation rows, one seed, beside what ran
    assert snakemake(root, "-n", "--config", "profile=rebrl_ablation").returncode == 0
    added = {s.name for s in dag.build(load(override(root, {"profile": "rebrl_ablation"})))} - {s.name for s in stages}
    assert any(n.startswith("grpo_rebrl_t1_") for n in added)
    assert planned_names(root, "--config", "profile=rebrl_ablation") == added | {"tables"}
    # and the image branch after the main job: its own jobs and the tables, none of the text runs again
    assert snakemake(root, "-n", "--config", "profile=image").returncode == 0
    added = {s.name for s in dag.build(load(override(root, {"profile": "image"})))} - {s.name for s in stages}
    assert "download_image" in added and any(n.startswith("grpo_image_") or "geneval" in n for n in added)
    assert planned_names(root, "--config", "profile=image") == added | {"tables"}
    runs = {s.name for s in stages if s.kind == "grpo"}
    assert planned_names(root, "--forcerun", "grpo") == runs | {f"evaluate_{r[5:]}" for r in runs} | {"tables"}
