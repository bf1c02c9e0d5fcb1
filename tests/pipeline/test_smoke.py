"""The whole DAG on the smoke profile, under Snakemake and under DVC, in temporary copies of the repository.

Checks the acceptance of the foundation issue on real stages: the main job finishes and writes the table and
plots; a second run does nothing; changing one method's params reruns only that method's stages and the tables;
DVC runs the same stages and agrees on what a params change invalidates. A few minutes on 2 cores.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ddmrl.geneval import summarize
from ddmrl.tables import IMAGE_COLUMNS

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def _copy_repo(dst: Path) -> Path:
    for name in ("workflow", "stages", "profiles"):
        shutil.copytree(REPO / name, dst / name)
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["profile"] = "smoke"
    (dst / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    run([BIN / "python", "-m", "ddmrl.pipeline.export"], dst)
    return dst


def run(cmd: list, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=900)
    if check and out.returncode != 0:
        raise AssertionError(f"{cmd} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def planned_jobs(ws: Path) -> set[str]:
    """Job names Snakemake would run now (dry run)."""
    out = run([BIN / "snakemake", "-n", "--cores", "2"], ws).stdout
    return set(re.findall(r"^rule (\w+):", out, flags=re.M)) - {"all"}


def change_rebrl(ws: Path) -> None:
    raw = yaml.safe_load((ws / "params.yaml").read_text())
    raw["methods"]["rebrl"]["epsilon"] = 0.3
    (ws / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))


@pytest.fixture(scope="module")
def snakemake_ws(tmp_path_factory):
    ws = _copy_repo(tmp_path_factory.mktemp("smk"))
    run([BIN / "snakemake", "--cores", "2"], ws)
    return ws


def test_snakemake_runs_the_whole_dag_and_writes_tables(snakemake_ws):
    tables = snakemake_ws / "data" / "tables"
    for name in (
        "text_table.md",
        "text_table.csv",
        "reward_curves.png",
        "kl_curves.png",
        "sft_rollouts.md",
        "credit_by_reveal_step.png",
    ):
        assert (tables / name).stat().st_size > 0, name
    text = (tables / "text_table.md").read_text()
    for row in (
        "| base |",
        "| SFT |",
        "| diffu-GRPO |",
        "| UniGRPO |",
        "| MaskGRPO |",
        "| RebRL |",
        "| TraceRL |",
        "| GDPO |",
        "| SPG |",
        "| wd1 |",
    ):
        assert row in text
    assert not list((snakemake_ws / "data" / "checkpoints").glob("*/step-*")), "checkpoints are cleared after success"


def test_image_branch_writes_geneval_layout_table_and_contact_sheets(snakemake_ws):
    """The text-to-image runs: GenEval's folder layout per model, the table computed from the results JSONL, the
    curves and one contact sheet per model."""
    data, tables = snakemake_ws / "data", snakemake_ws / "data" / "tables"
    for name in ("image_table.md", "image_table.csv", "image_reward_curves.png", "image_kl_curves.png"):
        assert (tables / name).stat().st_size > 0, name
    models = ["base", "unigrpo_geneval_mini_s0", "rebrl_geneval_mini_s0"]
    for model in models:
        assert (tables / f"contact_sheet_{model}.png").stat().st_size > 0
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


def test_second_run_has_nothing_to_do(snakemake_ws):
    assert planned_jobs(snakemake_ws) == set()


def test_changing_one_method_reruns_only_its_stages_and_the_tables(snakemake_ws, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(snakemake_ws, ws, symlinks=True)
    change_rebrl(ws)
    jobs = planned_jobs(ws)
    assert jobs == {
        "grpo_rebrl_sudoku4_s0",
        "credit_rebrl_sudoku4",
        "evaluate_rebrl_sudoku4_s0",
        "grpo_rebrl_geneval_mini_s0",  # the image run starts from methods.rebrl too
        "evaluate_rebrl_geneval_mini_s0",
        "tables",
    }


def test_dvc_repro_runs_the_same_dag_and_agrees_on_reruns(tmp_path):
    ws = _copy_repo(tmp_path)
    run(["git", "init", "-q"], ws)
    run([BIN / "dvc", "init", "-q"], ws)
    run([BIN / "dvc", "repro", "-q"], ws)
    assert (ws / "data" / "tables" / "text_table.md").exists()
    assert "up to date" in run([BIN / "dvc", "status"], ws).stdout
    change_rebrl(ws)
    status = yaml.safe_load(run([BIN / "dvc", "status", "--json"], ws).stdout)
    # the stages whose own params changed; their downstream (evaluations, tables) follows on repro
    assert set(status) == {"grpo_rebrl_sudoku4_s0", "credit_rebrl_sudoku4", "grpo_rebrl_geneval_mini_s0"}
