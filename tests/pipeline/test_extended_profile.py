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
    section is a run of every task of its own (IGPO: chain, the task with traces) and seed, with its evaluation and
    credit stages; `snakemake -n` lists it all."""
    default = yaml.safe_load(REPO_PARAMS.read_text())["grpo"]["methods"]
    root = copy_repo(tmp_path, profile="extended")
    cfg = load(root / "params.yaml")
    added = cfg.grpo.methods[len(default) :]
    assert list(cfg.grpo.methods[: len(default)]) == default and {"mdpo", "mdpo_rcr", "cj_grpo"} <= set(added)
    names = {s.name for s in dag.build(cfg)}
    assert [t for t in cfg.tasks if cfg.runs_on("igpo", t)] == ["chain"]
    for section in added:
        for task in cfg.tasks:
            stages = {f"credit_{section}_{task}"}
            stages |= {f"{k}_{section}_{task}_s{seed}" for k in ("grpo", "evaluate") for seed in cfg.grpo.seeds}
            assert stages <= names if cfg.runs_on(section, task) else not stages & names
    assert cfg.methods["mdpo_rcr"].sampler.remasking == "rcr" and cfg.methods["cj_grpo"].sampler.schedule == "ass"
    assert planned_names(root) == names


def test_the_flexibility_profile_puts_left_to_right_beside_arbitrary_order_with_pass_at_k():
    """profiles/flexibility.yaml: JustGRPO (blocks of one token) beside diffu-GRPO and UniGRPO from the same SFT model
    on the same budget, every text evaluation with pass@k, the tables with its table."""
    cfg = load(REPO_PARAMS, "flexibility")
    assert tuple(cfg.grpo.methods) == ("diffu_grpo", "unigrpo", "justgrpo") and cfg.evaluate.pass_at_k.n == 16
    just, diffu = cfg.methods["justgrpo"], cfg.methods["diffu_grpo"]
    assert (just.sampler.block_length, diffu.sampler.block_length) == (1, 4)
    for key in ("max_steps", "num_prompts", "num_generations", "num_iterations", "learning_rate"):
        assert getattr(just, key) == getattr(diffu, key), key
    tables = next(s for s in dag.build(cfg) if s.name == "tables")
    assert {"data/tables/pass_at_k.md", "data/tables/pass_at_k.csv"} <= set(tables.outs)
