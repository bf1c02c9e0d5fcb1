"""A researcher's own members, from modules outside ``src/ddmrl`` (``tests/pipeline/external/mylab``, copied into
the workspace and put on ``PYTHONPATH``): validated, run and rerun like built-in ones.

A method (``method: mylab.methods:REBALANCED``) with a weighting, group advantages and an objective of its own
(``mylab.objectives``; the objective logs a term of its own to the curve), a rollout augmenter of its own, drawing its
views with a view sampler of its own (``remasking: mylab.views:halves``) and its rollouts with a sampler of its own
(``sampler: {name: mylab.samplers:generate}``, with an option of its own); UniGRPO training an auxiliary policy of the
researcher's (``aux_policy: {kind: mylab.aux_policies:ThresholdPolicy}``); both on a task of its own (``tasks:
[reverse]``, an entry point of ``ddmrl.tasks`` declared by ``external/mylab-0.1.dist-info``); and UniGRPO on
geneval-mini rewarded by an image reward model of the researcher's (``reward_models: {colour: {model:
mylab.rewards:ColourShare}}``). The workspace is the smoke profile on that one text task, the two sections beside
UniGRPO and one image method (a few minutes on 2 cores), run by Snakemake and recorded in ``dvc.lock``, so that both
engines are asked what an edit reruns."""

from __future__ import annotations

import pytest
import yaml
from helpers import copy_repo, edit_params, edited_member_reruns, outside_workspace

from ddmrl.aux_policies.base import load_aux_policy
from ddmrl.config import ConfigError, load
from ddmrl.io import read_jsonl
from ddmrl.pipeline import dag
from ddmrl.rollout import sampler_kwargs
from ddmrl.tasks.geneval_mini import parse_grid, render_image

MINE = "mylab.methods:REBALANCED"
HALVES = "mylab.views:halves"
SAMPLER = "mylab.samplers:generate"
POLICY = "mylab.aux_policies:ThresholdPolicy"
REWARD = "mylab.rewards:ColourShare"
#: the stages of the image branch: geneval-mini builds its reward model wherever the task is made (its download too)
#: and scores with it in the run and both evaluations
IMAGE_STAGES = {"download_image", "grpo_unigrpo_geneval_mini_s0", "evaluate_base_geneval_mini",
                "evaluate_unigrpo_geneval_mini_s0"}  # fmt: skip
TASK = "reverse"  # mylab.tasks:Reverse, by its entry point
RANKS = "mylab.objectives:ranks"


def _own_method(raw: dict) -> None:
    raw.update(profile="smoke", seed=0)
    raw["grpo"] = {**raw.get("grpo", {}), "methods": ["unigrpo", "mine", "policy"], "seeds": [0]}
    sampler = {"name": SAMPLER, "kv_cache": "none", "options": {SAMPLER: {"order": "random"}}}
    # its own advantages named again: grpo:'s scale_rewards (params.yaml) wins over a method's defaults
    mine = {"method": MINE, "remasking": HALVES, "sampler": sampler, "scale_rewards": RANKS}
    policy = {"method": "unigrpo", "aux_policy": {"kind": POLICY}, "sampler": {"kv_cache": "none"}}
    raw["methods"] = {**(raw.get("methods") or {}), "mine": mine, "policy": policy}
    image_params = {"geneval_mini": {"reward_models": {"colour": {"model": REWARD, "floor": 0.01}}}}
    raw["image"] = {**raw.get("image", {}), "methods": ["unigrpo"], "task_params": image_params}
    raw["rebrl_ablation"] = {**raw.get("rebrl_ablation", {}), "enabled": False}


def _one_of_each(raw: dict) -> None:
    """The smoke profile on the outside task and one image method."""
    raw.update(tasks=[TASK])
    raw["image"].update(methods=["unigrpo"])


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    def prepare(ws):
        edit_params(ws, _own_method)
        edit_params(ws, _one_of_each, "profiles/smoke.yaml")

    yield from outside_workspace(copy_repo(tmp_path_factory.mktemp("external") / "ws"), prepare)


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
    curve = (ws / "data" / "grpo" / "mine_reverse_s0" / "curve.csv").read_text()
    assert "augment/tied_groups" in curve.splitlines()[0]  # its augmenter's counts, a column of the curve
    # its objective's own term, logged as the built-in ones are; its weighting, advantages and objective resolved
    header = curve.splitlines()[0].split(",")
    assert {"kl", "clip_ratio", "mylab/confidence"} <= set(header)
    confidence = [float(row.split(",")[header.index("mylab/confidence")]) for row in curve.splitlines()[1:]]
    assert confidence and all(c < 0 for c in confidence)  # a mean log-prob
    assert f"scale_rewards: {RANKS}" in resolved
    code = dag.code(stages["grpo_mine_reverse_s0"], ws)
    assert "mylab/objectives.py" in code and "mylab/objectives.py" not in dag.code(
        stages["grpo_unigrpo_reverse_s0"], ws
    )


def test_an_outside_reward_model_rewards_the_image_run(workspace):
    """The image run trained on its reward and the evaluation recorded its score of every image, recomputed here
    from the generations (a malformed scene scores 0)."""
    ws, _ = workspace
    from mylab.rewards import ColourShare

    assert (ws / "data" / "grpo" / "unigrpo_geneval_mini_s0" / "metrics.json").is_file()
    rows = read_jsonl(ws / "data" / "evaluate" / "unigrpo_geneval_mini_s0" / "geneval_mini.jsonl")
    scorer = ColourShare(floor=0.01)
    for row in rows:
        try:
            image = render_image(parse_grid(row["generation"]))
        except ValueError:
            assert row["reward"] == 0.0
            continue
        assert row["reward"] == pytest.approx(scorer.score([image], [row["prompt"]])[0])
    assert any(r["reward"] not in (0.0, 1.0) for r in rows)  # not GenEval's verdict


def test_an_outside_aux_policy_is_trained_saved_and_evaluated(workspace):
    ws, _ = workspace
    run_dir = ws / "data" / "grpo" / "policy_reverse_s0"
    policy = load_aux_policy(run_dir / "model")
    assert type(policy).__name__ == "ThresholdPolicy" and policy.kind == POLICY
    assert float(policy.bias) != load(ws / "params.yaml").methods["policy"].aux_policy.init_bias  # trained
    assert "aux/steps" in (run_dir / "curve.csv").read_text().splitlines()[0]
    assert (ws / "data" / "evaluate" / "policy_reverse_s0" / f"{TASK}.json").is_file()


@pytest.mark.parametrize(
    ("module", "users"),
    [
        ("methods.py", {"grpo_mine_reverse_s0", "credit_mine_reverse", "tables"}),  # tables: the display name
        ("views.py", {"grpo_mine_reverse_s0", "credit_mine_reverse"}),
        ("objectives.py", {"grpo_mine_reverse_s0", "credit_mine_reverse"}),  # its weighting, advantages, objective
        ("samplers.py", {"grpo_mine_reverse_s0"}),  # the credit stage reads the stored rollouts
        ("augmenters.py", {"grpo_mine_reverse_s0"}),
        ("aux_policies.py", {"grpo_policy_reverse_s0", "evaluate_policy_reverse_s0"}),  # evaluated with it
        ("rewards.py", IMAGE_STAGES),
    ],
)
def test_editing_an_outside_member_reruns_only_its_runs(workspace, tmp_path, module, users):
    """The stages whose code the module is: its method's runs (and the tables, for the method's display name);
    Snakemake plans those and what reads their outputs, and ``dvc status`` names those stages."""
    ws, env = workspace
    found, planned_jobs = edited_member_reruns(ws, env, tmp_path / "ws", module)
    assert found == users and "tables" in planned_jobs and "grpo_unigrpo_reverse_s0" not in planned_jobs
