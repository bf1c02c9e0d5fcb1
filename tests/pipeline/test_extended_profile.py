"""The extended profile (profiles/extended.yaml): the embedded default plus the rows its budget cannot hold."""

from __future__ import annotations

from pathlib import Path

import yaml
from helpers import copy_repo, planned_names

from ddmrl.config import load
from ddmrl.pipeline import dag

REPO_PARAMS = Path(__file__).resolve().parents[2] / "params.yaml"


def test_extended_keeps_every_default_row_and_adds_its_own(tmp_path):
    """Its run list starts with the default's (a row added to params.yaml must be added here too), and every added
    section is a run of every task and seed, with its evaluation and credit stages; `snakemake -n` lists it all."""
    default = yaml.safe_load(REPO_PARAMS.read_text())["grpo"]["methods"]
    root = copy_repo(tmp_path, profile="extended")
    cfg = load(root / "params.yaml")
    added = cfg.grpo.methods[len(default) :]
    assert list(cfg.grpo.methods[: len(default)]) == default and {"mdpo", "mdpo_rcr", "cj_grpo"} <= set(added)
    names = {s.name for s in dag.build(cfg)}
    for section in added:
        for task in cfg.tasks:
            for seed in cfg.grpo.seeds:
                assert {f"grpo_{section}_{task}_s{seed}", f"evaluate_{section}_{task}_s{seed}"} <= names
            assert f"credit_{section}_{task}" in names
    assert cfg.methods["mdpo_rcr"].sampler.remasking == "rcr" and cfg.methods["cj_grpo"].sampler.schedule == "ass"
    assert planned_names(root) == names
