"""A researcher's own model family, from a module outside ``src/ddmrl`` (``tests/pipeline/external/mylab/models.py``):
validated, run and rerun like a built-in one.

The workspace is the smoke profile with ``model: {kind: "mylab.models:load", path_or_id: <a checkpoint directory>}``
on the outside task (``reverse``), UniGRPO alone, no image branch: the download stage fetches the checkpoint (a local
path) and writes a pointer, and every later stage loads the model through the family's ``load``. The checkpoint is a
freshly initialised TinyDDM saved by the test (untrained: the DAG's plumbing is under test, not its accuracy).
"""

from __future__ import annotations

import json

import pytest
from helpers import copy_repo, edit_params, edited_member_reruns, outside_workspace

from ddmrl.config import load
from ddmrl.models.checkpoint import load_checkpoint, save_checkpoint
from ddmrl.models.tiny import new_tiny_model
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.tasks import make_task
from ddmrl.tasks.encoding import prompt_length

FAMILY = "mylab.models:load"
TASK = "reverse"  # mylab.tasks:Reverse, by its entry point


def _checkpoint(ws, path) -> None:
    """A fresh TinyDDM over the task's tokens, saved at ``path`` (the researcher's checkpoint)."""
    cfg, task = load(ws / "params.yaml"), make_task(TASK)
    tok = build_tokenizer([task.alphabet], list(task.special_tokens))
    positions = prompt_length(task) + task.completion_length + len(task.completion_suffix)
    save_checkpoint(new_tiny_model(cfg.model, tok, positions), tok, path)


def _own_family(checkpoint: str):
    def edit(raw: dict) -> None:
        raw.update(profile="smoke", seed=0, tasks=[TASK])
        raw["grpo"] = {**raw.get("grpo", {}), "methods": ["unigrpo"], "seeds": [0]}
        raw["model"] = {**raw.get("model", {}), "kind": FAMILY, "path_or_id": checkpoint, "revision": None}
        raw["download"] = {**raw.get("download", {}), "hub": [{"name": "mine", "repo_id": checkpoint}]}
        raw["image"] = {**raw.get("image", {}), "tasks": [], "methods": []}
        raw["rebrl_ablation"] = {**raw.get("rebrl_ablation", {}), "enabled": False}

    return edit


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    def prepare(ws):
        edit_params(
            ws, lambda raw: raw.update(tasks=[TASK], image={"tasks": [], "methods": []}), "profiles/smoke.yaml"
        )
        checkpoint = ws.parent / "checkpoint"
        edit_params(ws, _own_family(str(checkpoint)))
        _checkpoint(ws, checkpoint)

    yield from outside_workspace(copy_repo(tmp_path_factory.mktemp("family") / "ws"), prepare)


def test_an_outside_family_runs_through_the_dag(workspace):
    """Its checkpoint is fetched and pointed to, trained and saved with a pointer to the family, and evaluated."""
    ws, _ = workspace
    data = ws / "data"
    pointer = json.loads((data / "download" / "base" / "ddmrl_model.json").read_text())
    assert pointer["kind"] == FAMILY
    saved = data / "grpo" / "unigrpo_reverse_s0" / "model"
    assert json.loads((saved / "ddmrl_model.json").read_text())["kind"] == FAMILY  # reloads through the family
    model, _ = load_checkpoint(saved)
    assert type(model).__name__ == "TinyDDMForMaskedLM"
    assert (data / "evaluate" / "unigrpo_reverse_s0" / f"{TASK}.json").is_file()
    assert "| UniGRPO |" in (data / "tables" / "text_table.md").read_text()


def test_editing_an_outside_family_reruns_the_stages_that_load_it(workspace, tmp_path):
    """Every stage that loads the model depends on the family's module; Snakemake plans those and what reads their
    outputs, and ``dvc status`` names the same stages."""
    ws, env = workspace
    users, _ = edited_member_reruns(ws, env, tmp_path / "ws", "models.py")
    assert {"sft", "grpo_unigrpo_reverse_s0", "evaluate_base_reverse", "evaluate_unigrpo_reverse_s0"} <= users
