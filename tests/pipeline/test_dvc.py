"""The whole DAG on the smoke profile under DVC, in a temporary copy of the repository: `dvc repro` runs the DAG,
agrees on what a params change invalidates, and `dvc exp run -S grpo.seeds=[0,1]` runs exactly the new seed's stages,
with the headline metrics and curves comparable between experiments. Its own module (and xdist group), beside the
modules that share the smoke workspace: a few minutes on 2 cores.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from helpers import BIN, commit, copy_repo, edit_params, run

from ddmrl.pipeline import export

pytestmark = pytest.mark.slow


def change_rebrl(ws) -> None:
    edit_params(ws, lambda raw: raw["methods"]["rebrl"].update(epsilon=0.3))


def ran(output: str) -> set[str]:
    return set(re.findall(r"^Running stage '([^']+)'", output, flags=re.M))


def test_dvc_repro_runs_the_dag_and_experiments_run_exactly_the_new_seed(tmp_path):
    """One text method and one image method keep this short; every kind of stage runs."""
    ws = copy_repo(tmp_path / "ws", profile="smoke")
    edit_params(ws, lambda raw: raw["grpo"].update(methods=["rebrl"]))
    edit_params(ws, lambda raw: raw["image"].update(methods=["rebrl"]), file="profiles/smoke.yaml")
    assert export.main(["--params", str(ws / "params.yaml")]) == 0
    run(["git", "init", "-q"], ws)
    first = run([BIN / "dvc", "repro"], ws).stdout
    assert ran(first) == set(export.addresses(ws / "params.yaml").values())
    assert (ws / "data" / "tables" / "text_table.md").exists()
    assert "up to date" in run([BIN / "dvc", "status"], ws).stdout

    params = (ws / "params.yaml").read_text()
    change_rebrl(ws)
    status = yaml.safe_load(run([BIN / "dvc", "status", "--json"], ws).stdout)
    # the stages whose own params changed; their downstream (evaluations, tables) follows on repro
    assert set(status) == {"grpo_rebrl@sudoku4-0", "credit_rebrl@sudoku4", "grpo_image_rebrl@geneval_mini-0"}
    (ws / "params.yaml").write_text(params)

    commit(ws, "smoke with DVC")
    exp = run([BIN / "dvc", "exp", "run", "-n", "seeds01", "-S", "grpo.seeds=[0,1]"], ws).stdout
    assert ran(exp) == {
        "grpo_rebrl@sudoku4-1",
        "grpo_image_rebrl@geneval_mini-1",  # image runs follow grpo.seeds
        "evaluate_rebrl@sudoku4-1",
        "evaluate_image_rebrl@geneval_mini-1",
        "tables",
    }
    shown = json.loads(run([BIN / "dvc", "exp", "show", "--json"], ws).stdout)
    metrics = {}
    for rev in shown:
        for exp_rev in [rev, *(e for x in rev.get("experiments") or [] for e in x["revs"])]:
            data = exp_rev.get("data") or {}
            headline = (data.get("metrics") or {}).get("data/tables/metrics.json", {}).get("data")
            metrics[exp_rev.get("name") or exp_rev["rev"]] = headline
    assert {"seeds01", "workspace"} <= set(metrics) and all(metrics.values())
    assert set(metrics["seeds01"]["accuracy"]["sudoku4"]) == {"base", "sft", "rebrl"}

    diff = json.loads(run([BIN / "dvc", "metrics", "diff", "HEAD", "seeds01", "--all", "--json"], ws).stdout)
    assert "accuracy.sudoku4.rebrl" in diff["data/tables/metrics.json"]
    plots = json.loads(run([BIN / "dvc", "plots", "diff", "HEAD", "seeds01", "--json"], ws).stdout)["data"]
    assert set(plots) == {"reward", "kl", "loss", "clip_ratio", "credit"}
    series = {(p["rev"], p["series"]) for p in plots["reward"][0]["content"]["data"]["values"]}
    assert ("seeds01", "rebrl_sudoku4_s1") in series and ("HEAD", "rebrl_sudoku4_s0") in series
    assert ("HEAD", "rebrl_sudoku4_s1") not in series
