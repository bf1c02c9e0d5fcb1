"""ddmrl.training.tracking: a run's rows reach curve.csv and the trackers while it runs (one row per GRPO rollout
batch, before the next batch starts), TensorBoard and DVCLive write their files by default, W&B is wired through
accelerate's tracker when configured, and DVCLive inside a DVC experiment leaves dvc.yaml and git alone."""

from __future__ import annotations

import copy
import csv
import dataclasses
import importlib.machinery
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml
from accelerate.state import AcceleratorState, GradientState
from fake_rewards import varied_reward

import ddmrl.training.grpo as grpo_module
from ddmrl.config import DEFAULT_TRACKERS, ConfigError, GRPOConfig, SamplerConfig
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.tasks import make_task
from ddmrl.training import distributed as dist
from ddmrl.training import tracking
from ddmrl.training.grpo import train_grpo
from ddmrl.training.tracking import RunLog

BIN = Path(sys.executable).parent


@pytest.fixture
def setup(monkeypatch, make_model):
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    return task, tok, policy


@pytest.fixture
def fresh_state(tmp_path, monkeypatch):
    """accelerate's process-wide state: start and leave clean (trackers belong to one Accelerator). The tests run in
    ``tmp_path``: a DVCLive that looked for a DVC repository from the working directory must never find this one."""
    monkeypatch.chdir(tmp_path)
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def config(**kw) -> GRPOConfig:
    base = dict(
        method="rebrl",
        max_steps=8,
        num_prompts=2,
        num_generations=4,
        num_iterations=2,
        learning_rate=1e-2,
        beta=0.04,
        sampler=SamplerConfig(block_length=4, steps=4, temperature=1.0),
    )
    return GRPOConfig(**{**base, **kw})


def draws(task):
    return lambda it: task.generate(2, seed=100 + it)


def run_grpo(setup, log_dir: Path, curve: Path, report_to=DEFAULT_TRACKERS):
    """A 4-batch GRPO run through the stage's tracker wiring; returns its curve."""
    task, tok, policy = setup
    acc = dist.make_accelerator(cpu=True, log_with=tracking.trackers(report_to, log_dir, "grpo_x", "grpo.report_to"))
    tracking.start_trackers(acc, "grpo_x", {"grpo": {"beta": 0.04, "lora": {"r": 0}}, "seed": 0}, log_dir)
    out, _ = train_grpo(
        policy, copy.deepcopy(policy), tok, task, draws(task), config(), 0, RunLog(curve), accelerator=acc
    )
    acc.end_training()
    return out


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------------------ the curve file


def test_curve_csv_grows_by_one_row_per_rollout_batch_as_the_run_goes(setup, tmp_path, monkeypatch):
    """Read the file at the start of every rollout batch: batch i finds exactly the i rows of the batches before."""
    curve, seen = tmp_path / "curve.csv", []
    real = grpo_module.rollout

    def watching(*args, **kw):
        seen.append(len(read_csv(curve)) if curve.exists() and curve.stat().st_size else 0)
        return real(*args, **kw)

    monkeypatch.setattr(grpo_module, "rollout", watching)
    task, tok, policy = setup
    rows, _ = train_grpo(policy, copy.deepcopy(policy), tok, task, draws(task), config(), 0, RunLog(curve))
    assert seen == [0, 1, 2, 3] and len(rows) == 4
    assert [int(r["step"]) for r in read_csv(curve)] == [2, 4, 6, 8]
    assert [float(r["reward"]) for r in read_csv(curve)] == [r["reward"] for r in rows]


def test_the_progress_bar_shows_reward_kl_and_seconds_per_step(setup, capsys):
    task, tok, policy = setup
    rows, _ = train_grpo(policy, copy.deepcopy(policy), tok, task, draws(task), config(max_steps=2), 0)
    err = capsys.readouterr().err
    assert f"reward={rows[-1]['reward']:.3f}" in err and f"kl={rows[-1]['kl']:.4f}" in err and "s/step=" in err


# ------------------------------------------------------------------------------------------------ trackers


def test_tensorboard_and_dvclive_record_every_row_by_default(setup, tmp_path, fresh_state):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rows = run_grpo(setup, tmp_path / "logs", tmp_path / "curve.csv")
    events = list((tmp_path / "logs" / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    for key in ("reward", "kl", "loss"):
        assert [(e.step, e.value) for e in acc.Scalars(key)] == [
            (r["step"], pytest.approx(r[key], rel=1e-6)) for r in rows
        ], key
    live = tmp_path / "logs" / "dvclive"
    with open(live / "plots" / "metrics" / "reward.tsv", newline="") as f:
        tsv = list(csv.DictReader(f, delimiter="\t"))
    assert [(int(r["step"]), float(r["reward"])) for r in tsv] == [(r["step"], r["reward"]) for r in rows]
    assert json.loads((live / "metrics.json").read_text())["step"] == rows[-1]["step"]
    assert yaml.safe_load((live / "params.yaml").read_text())["grpo.lora.r"] == 0  # the run's configuration
    assert not (live / "dvc.yaml").exists() and not (tmp_path / "dvc.yaml").exists()


def test_a_restart_replays_the_kept_rows_so_each_step_is_recorded_once(setup, tmp_path, fresh_state):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_grpo(setup, tmp_path / "logs", tmp_path / "curve.csv")  # a first attempt (as if killed after its rows)
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    acc = dist.make_accelerator(cpu=True, log_with=tracking.trackers(DEFAULT_TRACKERS, tmp_path / "logs", "r", "k"))
    tracking.start_trackers(acc, "r", {}, tmp_path / "logs")
    kept = [{"step": 2, "reward": 0.5}, {"step": 4, "reward": 0.25}]
    log = RunLog(tmp_path / "curve.csv")
    log.start(acc, kept)
    log.log({"step": 6, "reward": 0.75})
    acc.end_training()
    events = EventAccumulator(str(tmp_path / "logs" / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward")] == [(2, 0.5), (4, 0.25), (6, 0.75)]
    with open(tmp_path / "logs" / "dvclive" / "plots" / "metrics" / "reward.tsv", newline="") as f:
        assert [int(r["step"]) for r in csv.DictReader(f, delimiter="\t")] == [2, 4, 6]
    assert [r["step"] for r in read_csv(tmp_path / "curve.csv")] == ["2", "4", "6"]


def test_without_a_log_dir_there_are_no_trackers(tmp_path):
    assert tracking.trackers(DEFAULT_TRACKERS, None, "x", "grpo.report_to") == []


def test_a_tracker_whose_package_is_missing_is_refused_naming_the_key(monkeypatch, tmp_path):
    real = tracking.importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda n: None if n == "wandb" else real(n))
    with pytest.raises(ConfigError, match=r"grpo.report_to = \['wandb'\]: wandb is not installed \(pip install"):
        tracking.trackers(("wandb",), tmp_path, "x", "grpo.report_to")


def test_report_to_accepts_only_known_trackers():
    assert config(report_to=()).report_to == ()
    with pytest.raises(ConfigError, match=r"report_to\[0\] = 'mlflow': unknown value; choose one of tensorboard"):
        config(report_to=("mlflow",))


def test_wandb_gets_the_project_run_name_log_dir_configuration_and_rows(setup, tmp_path, monkeypatch, fresh_state):
    calls = {}

    class Run:
        def log(self, values, step=None, **kw):
            calls.setdefault("log", []).append((step, dict(values)))

        def finish(self):
            calls["finished"] = True

    fake = types.ModuleType("wandb")
    fake.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    fake.init = lambda **kw: calls.setdefault("init", kw) and Run()
    fake.config = types.SimpleNamespace(update=lambda values, **kw: calls.setdefault("config", values))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    rows = run_grpo(setup, tmp_path / "logs", tmp_path / "curve.csv", report_to=("wandb",))
    assert calls["init"] == {"project": "ddmrl", "name": "grpo_x", "dir": str(tmp_path / "logs")}
    assert calls["config"]["grpo.beta"] == 0.04
    assert [(s, v["reward"]) for s, v in calls["log"]] == [(r["step"], r["reward"]) for r in rows]
    assert calls["finished"]


def test_flat_config_has_dotted_keys_and_scalar_values():
    assert tracking.flat({"grpo": {"lora": {"r": 4}, "report_to": ["tensorboard"]}, "seed": 0, "x": None}) == {
        "grpo.lora.r": 4,
        "grpo.report_to": '["tensorboard"]',
        "seed": 0,
        "x": "null",
    }


@pytest.mark.parametrize("repo", ["git without commits", "git without dvc"])
def test_dvclive_in_a_bare_repository_neither_fails_nor_initialises_dvc(tmp_path, repo, fresh_state):
    """``git init`` (+ ``dvc init``) before the first commit, as a new user's first ``dvc repro``: DVCLive's own
    repository hooks would fail there (empty git repository) or run ``dvc init`` (git without DVC)."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    if repo == "git without commits":
        subprocess.run(
            [BIN / "dvc", "init", "-q"], cwd=tmp_path, check=True, env={**os.environ, "DVC_NO_ANALYTICS": "1"}
        )
    before = sorted(p.name for p in tmp_path.iterdir())
    acc = dist.make_accelerator(cpu=True, log_with=tracking.trackers(("dvclive",), "logs/x", "x", "k"))
    tracking.start_trackers(acc, "x", {"beta": 0.04}, "logs/x")
    RunLog().start(acc, [{"step": 1, "reward": 0.5}])
    acc.end_training()
    assert json.loads((tmp_path / "logs/x/dvclive/metrics.json").read_text()) == {"step": 1, "reward": 0.5}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "logs"]), "DVCLive wrote outside its dir"


def test_dvclive_inside_a_dvc_experiment_leaves_dvc_yaml_and_git_alone(tmp_path):
    """Run the tracker as a stage of ``dvc exp run`` would (DVC_ROOT and DVC_EXP_BASELINE_REV set) in a committed git +
    DVC repository whose logs/ is ignored, as the project's is: DVCLive must not write dvc.yaml, stage or commit."""
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "DVC_NO_ANALYTICS": "1"}  # fmt: skip
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, env=env, check=True, capture_output=True, text=True)  # noqa: E731
    git("init", "-q")
    subprocess.run([BIN / "dvc", "init", "-q"], cwd=repo, env=env, check=True)
    (repo / ".gitignore").write_text("logs/\n")
    (repo / "dvc.yaml").write_text("stages:\n  s:\n    cmd: python s.py\n")
    git("add", "-A")
    git("commit", "-qm", "init")
    head = git("rev-parse", "HEAD").stdout.strip()
    script = """
from ddmrl.training import distributed as dist, tracking
acc = dist.make_accelerator(cpu=True, log_with=tracking.trackers(("dvclive",), "logs/grpo_x", "grpo_x", "k"))
tracking.start_trackers(acc, "grpo_x", {"beta": 0.04}, "logs/grpo_x")
tracking.RunLog().start(acc, [{"step": 2, "reward": 0.5}])
acc.end_training()
"""
    dvc_env = {**env, "DVC_ROOT": str(repo), "DVC_EXP_BASELINE_REV": head, "DVC_EXP_NAME": "e"}
    subprocess.run([sys.executable, "-c", script], cwd=repo, env=dvc_env, check=True, capture_output=True)
    assert (repo / "logs" / "grpo_x" / "dvclive" / "metrics.json").exists()
    assert (repo / "dvc.yaml").read_text() == "stages:\n  s:\n    cmd: python s.py\n"
    assert git("status", "--porcelain").stdout == "" and git("rev-parse", "HEAD").stdout.strip() == head


def test_the_fingerprint_leaves_trackers_out_at_any_depth():
    """Changing report_to must not invalidate a run's checkpoints: the training is the same."""
    a = GRPOConfig(report_to=("tensorboard",))
    b = GRPOConfig(report_to=())
    strip = tracking.without_trackers
    assert strip(dataclasses.asdict(a)) == strip(dataclasses.asdict(b)) and "report_to" not in strip(
        dataclasses.asdict(a)
    )
    assert strip({"pretrain": {"report_to": ["dvclive"], "lr": 1.0}}) == {"pretrain": {"lr": 1.0}}
