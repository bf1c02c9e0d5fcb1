"""The lm_eval stage (stages/lm_eval.py) by its DAG command on a tiny TinyDDM: lm-eval's results JSON for a local
generation task (few-shot count from params) and a multiple-choice task; a missing dataset refused in one line."""

from __future__ import annotations

import json
import runpy
import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("lm_eval")

from lmeval_tasks import write_tasks  # noqa: E402

from ddmrl import config  # noqa: E402
from ddmrl.models.checkpoint import save_checkpoint  # noqa: E402
from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM  # noqa: E402
from ddmrl.models.tokenizer import build_tokenizer  # noqa: E402
from ddmrl.pipeline import dag  # noqa: E402
from ddmrl.tasks import make_task  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def workspace(tmp_path):
    """params.yaml with lm_eval on (the local tasks, 1 shot for the generation task, 3 items each), a tiny base
    model where the download stage puts it, the tasks' folder."""
    arith = make_task("arith")
    (tmp_path / "lm_tasks").mkdir()
    write_tasks(tmp_path / "lm_tasks", arith, arith.held_out(4, seed=0))
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["lm_eval"] = {"tasks": ["arith_gsm8k", "arith_choice"], "include_path": "lm_tasks",
                      "num_fewshot": {"arith_gsm8k": 1}, "limit": 3, "mc_num": 4, "batch_size": 4}  # fmt: skip
    raw["evaluate"]["sampler"].update(block_length=10, steps=15)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    shutil.copytree(REPO / "stages", tmp_path / "stages")
    tok = build_tokenizer([arith.alphabet], arith.special_tokens)
    torch.manual_seed(0)
    cfg = TinyDDMConfig(vocab_size=len(tok), hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                        max_position_embeddings=128, mask_token_id=tok.mask_token_id)  # fmt: skip
    stage = next(s for s in dag.build(config.load(tmp_path / "params.yaml")) if s.kind == "lm_eval_base")
    save_checkpoint(TinyDDMForMaskedLM(cfg).eval(), tok, tmp_path / dict(stage.args)["--model"])
    return tmp_path, stage


def run(ws: Path, stage, monkeypatch) -> None:
    monkeypatch.chdir(ws)
    monkeypatch.setattr(sys, "argv", stage.words[1:])
    runpy.run_path(str(ws / stage.script), run_name="__main__")


def test_the_stage_writes_lm_evals_results(workspace, monkeypatch):
    ws, stage = workspace
    run(ws, stage, monkeypatch)
    out = json.loads((ws / stage.outputs[0]).read_text())
    assert out["model"] == dict(stage.args)["--name"]
    assert set(out["results"]) == {"arith_gsm8k", "arith_choice"}
    assert out["n-shot"] == {"arith_gsm8k": 1, "arith_choice": 0}
    assert out["n-samples"]["arith_gsm8k"]["effective"] == 3
    assert 0 <= out["results"]["arith_choice"]["acc,none"] <= 1


def test_a_missing_dataset_stops_the_stage_in_one_line(workspace, monkeypatch, capsys):
    ws, stage = workspace
    (ws / "lm_tasks" / "gsm.jsonl").unlink()
    with pytest.raises(SystemExit) as exit_:
        run(ws, stage, monkeypatch)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: lm_eval task 'arith_gsm8k': dataset file ") and err.endswith("gsm.jsonl is missing")
    assert not (ws / stage.outputs[0]).exists() and "Loading weights" not in capsys.readouterr().err
