"""ddmrl.training.resume in one process: checkpoints are accelerate's save_state plus meta and a SHA-256 manifest,
renamed into place whole; a corrupt, stale-layout or foreign checkpoint is skipped; a run resumed from a checkpoint
ends exactly where the uninterrupted run ends, curve file included. Kills of real processes (one, and two over
gloo) are tested in tests/stages/test_kill_and_resume.py and tests/stages/test_accelerate_launch.py."""

from __future__ import annotations

import copy
import csv
import json

import pytest
import torch
from accelerate import Accelerator
from fake_rewards import varied_reward

from ddmrl.config import GRPOConfig, SamplerConfig, TrainConfig
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.tasks import make_task
from ddmrl.tasks.encoding import encode_examples
from ddmrl.training.grpo import train_grpo
from ddmrl.training.mdm import train_mdm
from ddmrl.training.resume import FORMAT, Checkpointer, tree_digests
from ddmrl.training.tracking import RunLog


@pytest.fixture
def sudoku(monkeypatch, make_model):
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    length = task.prompt_length + 1 + task.completion_length
    return task, tok, lambda: make_model(max_positions=length, tokenizer=tok)


def rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k != "time"} for r in csv.DictReader(f)]


def state(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


# ------------------------------------------------------------------------------------------------ the checkpointer


def saved(tmp_path, make_model, steps=(2, 4), keep=2, fingerprint="run-a"):
    """A model + AdamW + LambdaLR prepared by one accelerator, a step taken and saved at each of ``steps``."""
    acc = Accelerator(cpu=True)
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    model, opt, sched = acc.prepare(model, opt, sched)
    gen = torch.Generator().manual_seed(3)
    ckpt = Checkpointer(tmp_path / "ckpt", fingerprint, keep)
    for step in steps:
        model(torch.randint(0, 5, (2, 6), generator=gen)).logits.square().mean().backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        ckpt.save(acc, step, {"curve": [{"step": step}]}, {"mask": gen})
    return acc, model, opt, sched, gen, ckpt


def test_a_checkpoint_is_save_state_plus_meta_and_a_manifest_of_every_file(tmp_path, make_model):
    _, model, opt, sched, gen, ckpt = saved(tmp_path, make_model, steps=(2,))
    path = tmp_path / "ckpt" / "step-00000002"
    names = {p.name for p in path.iterdir()}
    assert {"model.safetensors", "optimizer.bin", "scheduler.bin", "random_states_0.pkl"} <= names
    assert {"generators_0.pt", "meta.json", "manifest.json"} <= names
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest == {k: v for k, v in tree_digests(path).items() if k != "manifest.json"}
    meta = json.loads((path / "meta.json").read_text())
    assert meta["step"] == 2 and meta["fingerprint"] == "run-a" and meta["format"] == FORMAT
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["step-00000002"], "a temporary directory was left"


def test_restore_brings_back_model_optimizer_scheduler_and_generators(tmp_path, make_model):
    acc, model, opt, sched, gen, ckpt = saved(tmp_path, make_model, steps=(2,))
    want_model, want_opt = state(model), copy.deepcopy(opt.state_dict())
    want_lr, want_gen, want_rng = sched.get_last_lr(), gen.get_state(), torch.get_rng_state()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    opt.state_dict()["state"][0]["exp_avg"].zero_()
    sched.step()
    gen.manual_seed(99)
    torch.manual_seed(99)

    path, meta = ckpt.latest(acc)
    assert path.name == "step-00000002" and meta["curve"] == [{"step": 2}]
    ckpt.restore(acc, path, {"mask": gen})
    assert_same(state(model), want_model)
    got = opt.state_dict()["state"]
    for i, s in want_opt["state"].items():
        assert torch.equal(got[i]["exp_avg"], s["exp_avg"]) and torch.equal(got[i]["exp_avg_sq"], s["exp_avg_sq"])
    assert sched.get_last_lr() == want_lr
    assert torch.equal(gen.get_state(), want_gen) and torch.equal(torch.get_rng_state(), want_rng)


def test_only_the_newest_keep_checkpoints_are_kept(tmp_path, make_model):
    *_, ckpt = saved(tmp_path, make_model, steps=(1, 2, 3), keep=2)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-00000002", "step-00000003"]


def test_a_truncated_file_in_the_newest_checkpoint_falls_back_to_the_previous(tmp_path, make_model, capsys):
    acc, *_, ckpt = saved(tmp_path, make_model)
    victim = tmp_path / "ckpt" / "step-00000004" / "optimizer.bin"
    victim.write_bytes(victim.read_bytes()[:-10])
    path, meta = ckpt.latest(acc)
    assert path.name == "step-00000002" and meta["step"] == 2
    out = capsys.readouterr().out
    assert "skipping checkpoint" in out and "step-00000004: optimizer.bin fails its checksum" in out


def test_a_checkpoint_missing_a_file_of_its_manifest_is_skipped(tmp_path, make_model, capsys):
    acc, *_, ckpt = saved(tmp_path, make_model)
    (tmp_path / "ckpt" / "step-00000004" / "model.safetensors").unlink()
    assert ckpt.latest(acc)[0].name == "step-00000002"
    assert "step-00000004: unreadable" in capsys.readouterr().out


def test_checkpoints_of_other_parameters_or_an_older_layout_are_ignored(tmp_path, make_model, capsys):
    acc, *_ = saved(tmp_path, make_model, steps=(2,), fingerprint="run-a")
    assert Checkpointer(tmp_path / "ckpt", "run-b").latest(acc) is None
    assert "belongs to a run with other parameters or inputs" in capsys.readouterr().out
    old = tmp_path / "ckpt" / "step-00000002"
    meta = json.loads((old / "meta.json").read_text())
    del meta["format"]  # what the previous layout (ddmrl's own files) wrote
    (old / "meta.json").write_text(json.dumps(meta))
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["meta.json"] = tree_digests(old)["meta.json"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert Checkpointer(tmp_path / "ckpt", "run-a").latest(acc) is None
    assert "an older layout (format 1" in capsys.readouterr().out


def test_a_killed_save_leaves_only_a_hidden_temporary_directory(tmp_path, make_model, monkeypatch):
    acc, *_, ckpt = saved(tmp_path, make_model, steps=(2,))

    def killed(*a, **kw):
        raise KeyboardInterrupt  # stands for the SIGKILL: the save stops half way

    monkeypatch.setattr(acc, "save_state", killed)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save(acc, 4, {"curve": []})
    assert [p.name for p in (tmp_path / "ckpt").glob("step-*")] == ["step-00000002"]
    partial = tmp_path / "ckpt" / ".step-00000006.k1ll3d" / "step-00000006"  # a SIGKILL leaves atomic_path's temp
    partial.mkdir(parents=True)
    (partial / "model.safetensors").write_bytes(b"half")
    assert ckpt.latest(acc)[0].name == "step-00000002"
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["step-00000002"], "the partial save was not removed"


def test_no_root_means_no_checkpoints(tmp_path):
    acc = Accelerator(cpu=True)
    ckpt = Checkpointer(None, "x")
    ckpt.save(acc, 1, {})
    assert ckpt.latest(acc) is None
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ resumed runs


def grpo_config(**kw) -> GRPOConfig:
    base = dict(
        method="rebrl",
        max_steps=8,
        num_prompts=2,
        num_generations=4,
        num_iterations=2,
        learning_rate=1e-2,
        beta=0.04,
        save_steps=3,
        sampler=SamplerConfig(block_length=4, steps=4, temperature=1.0),
    )
    return GRPOConfig(**{**base, **kw})


def test_grpo_resumed_from_a_checkpoint_ends_as_the_uninterrupted_run(sudoku, tmp_path, monkeypatch):
    """The killed run is stood for by a finished run whose checkpoints were kept: its newest checkpoint (step 6 of 8)
    is where a kill after it would have resumed, and its curve file holds rows past that checkpoint, as a killed
    run's does."""
    task, tok, new_model = sudoku
    draw = lambda it: task.generate(2, seed=100 + it)  # noqa: E731
    cfg = grpo_config()
    ref_curve, _ = train_grpo(new_model(), new_model(), tok, task, draw, cfg, 0, RunLog(tmp_path / "ref.csv"))

    ckpt = Checkpointer(tmp_path / "ckpt", "grpo", keep=1)
    policy = new_model()
    train_grpo(policy, new_model(), tok, task, draw, cfg, 0, RunLog(tmp_path / "curve.csv"), ckpt)
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["step-00000006"]
    assert len(rows(tmp_path / "curve.csv")) == 4  # every row, past the checkpoint too

    resumed = new_model()
    curve, _ = train_grpo(resumed, new_model(), tok, task, draw, cfg, 0, RunLog(tmp_path / "curve.csv"), ckpt)
    assert_same(state(resumed), state(policy))
    assert [{k: v for k, v in r.items() if k != "time"} for r in curve] == [
        {k: v for k, v in r.items() if k != "time"} for r in ref_curve
    ]
    assert rows(tmp_path / "curve.csv") == rows(tmp_path / "ref.csv"), "rows lost or repeated across the resume"


def test_sft_resumed_from_a_checkpoint_ends_as_the_uninterrupted_run(sudoku, tmp_path):
    task, tok, new_model = sudoku
    cfg = TrainConfig(max_steps=9, batch_size=4, learning_rate=3e-3, warmup_steps=2, log_every=2, save_steps=4)
    batches = lambda step: encode_examples(tok, task, task.generate(4, seed=50 + step))  # noqa: E731
    ref = new_model()
    train_mdm(ref, batches, cfg, "sft", torch.Generator().manual_seed(1), run_log=RunLog(tmp_path / "ref.csv"))

    ckpt = Checkpointer(tmp_path / "ckpt", "sft", keep=1)
    train_mdm(new_model(), batches, cfg, "sft", torch.Generator().manual_seed(1), "sft", ckpt)
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["step-00000008"]
    resumed = new_model()
    gen = torch.Generator().manual_seed(12345)  # restored from the checkpoint
    train_mdm(resumed, batches, cfg, "sft", gen, "sft", ckpt, run_log=RunLog(tmp_path / "curve.csv"))
    assert_same(state(resumed), state(ref))  # scheduler and masking generator restored too
    assert rows(tmp_path / "curve.csv") == rows(tmp_path / "ref.csv")
