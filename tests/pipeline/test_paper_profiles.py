"""The paper profiles: their runs launch with accelerate, their values are the papers', and offline the download
stage fails first, with one line naming every missing download and the command that fetches it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ENV, copy_repo

from ddmrl.config import load
from ddmrl.pipeline import dag

PAPER_PROFILES = ["paper_llada_math", "paper_mmada_geneval"]  # 8 GPUs under ZeRO-2, LoRA
ALL_PAPER_PROFILES = [*PAPER_PROFILES, "paper_dream_math", "paper_sdar_math", "paper_llada2_math"]


def paper_repo(tmp_path, profile):
    root = copy_repo(tmp_path, profile=profile)
    return root, load(root / "params.yaml")


@pytest.mark.parametrize("profile", PAPER_PROFILES)
def test_paper_runs_launch_with_accelerate(tmp_path, profile):
    """Every GRPO run of a paper profile is launched the way GPU users launch training (both engines run
    ``Stage.cmd``: tests/pipeline/test_engines.py)."""
    root, cfg = paper_repo(tmp_path, profile)
    grpo = [s for s in dag.build(cfg) if s.script == "stages/grpo.py"]
    assert len(grpo) == len(cfg.runs()) >= 4
    for s in grpo:
        assert s.cmd.startswith(
            "accelerate launch --config_file configs/accelerate/zero2.yaml --num_processes 8 stages/grpo.py"
        )
        assert dict(s.resources) == {"gpu": 8}


def test_llada_math_profile_has_the_papers_values(tmp_path):
    cfg = paper_repo(tmp_path, "paper_llada_math")[1]
    assert cfg.model.spec().kind == "llada" and cfg.model.trust_remote_code and cfg.sft.max_steps == 0
    d1, mask = cfg.methods["diffu_grpo"], cfg.methods["maskgrpo"]
    for run in (d1, mask):
        assert (run.learning_rate, run.num_generations, run.num_iterations, run.num_prompts) == (3e-6, 6, 12, 16)
        assert (run.max_grad_norm, run.weight_decay, run.mixed_precision, run.lora.r) == (0.2, 0.1, "bf16", 128)
    assert (d1.beta, d1.epsilon, d1.p_mask_prompt, d1.scale_rewards, d1.sampler.block_length) == (
        0.04, 0.5, 0.15, "none", 32
    )  # fmt: skip
    assert (mask.beta, mask.epsilon, mask.gamma, mask.scale_rewards, mask.sampler.block_length) == (
        0.01, 0.2, 0.6, "group", 16
    )  # fmt: skip
    assert cfg.evaluate.sampler.temperature == 0 and cfg.evaluate.sampler.block_length == 32


def test_llada_math_profile_has_mdpo_and_cj_grpo_with_their_papers_values(tmp_path):
    """Sections for MDPO and CJ-GRPO with their papers' hyperparameters, not in the default run list."""
    cfg = paper_repo(tmp_path, "paper_llada_math")[1]
    mdpo, cj = cfg.methods["mdpo"], cfg.methods["cj_grpo"]
    assert "mdpo" not in cfg.grpo.methods and "cj_grpo" not in cfg.grpo.methods
    assert (mdpo.learning_rate, mdpo.beta, mdpo.num_generations, mdpo.num_iterations, mdpo.sample_train_steps) == (
        7e-7, 0.02, 4, 1, 8
    )  # fmt: skip
    assert (mdpo.sampler.steps, mdpo.sampler.block_length, mdpo.sampler.temperature) == (128, 256, 0.4)
    assert (cj.learning_rate, cj.beta, cj.epsilon, cj.num_generations, cj.num_iterations, cj.scale_rewards) == (
        3e-6, 0.04, 0.5, 6, 12, "none"
    )  # fmt: skip
    assert (cj.sampler.schedule, cj.sampler.eoser, cj.sampler.eos_min_gamma, cj.lora.r) == ("ass", True, 0.01, 128)


def test_mmada_geneval_profile_has_rebrls_setup(tmp_path):
    cfg = paper_repo(tmp_path, "paper_mmada_geneval")[1]
    assert cfg.tasks == () and cfg.image.tasks == ("geneval",) and cfg.image.model.spec().kind == "mmada"
    runs = cfg.image_methods
    assert list(runs) == ["diffu_grpo", "unigrpo", "maskgrpo", "rebrl"]
    for run in runs.values():  # RebRL: lr 3e-6, global batch 72 (G 9), 12 steps with CFG 3.5, 1800 steps
        assert (run.learning_rate, run.num_prompts * run.num_generations, run.num_generations) == (3e-6, 72, 9)
        assert (run.sampler.steps, run.sampler.cfg_scale, run.max_steps) == (12, 3.5, 1800)
    assert {run.num_iterations for run in runs.values()} == {6}  # equal budgets (RebRL's own mu 8: a rebrl_mu8 row)
    assert (runs["rebrl"].remasking, runs["rebrl"].rebrl_mode) == ("unigrpo", "token")
    assert (runs["maskgrpo"].remasking, runs["maskgrpo"].gamma) == ("maskgrpo_random", 0.8)
    assert cfg.image.evaluate.samples_per_prompt == 4 and cfg.image.download.num_eval == 553


def test_dream_math_profile_has_dares_values(tmp_path):
    """DARE's d1 recipe on Dream-v0-Instruct-7B (recipe/dream/run_d1_dream_7b_instruct.sh, --task math)."""
    cfg = paper_repo(tmp_path, "paper_dream_math")[1]
    assert cfg.model.spec().kind == "dream" and cfg.model.trust_remote_code and cfg.sft.max_steps == 0
    run = cfg.methods["diffu_grpo"]
    assert tuple(cfg.grpo.methods) == ("diffu_grpo",)
    assert (run.method, run.learning_rate, run.num_prompts, run.num_generations, run.num_iterations) == (
        "diffu_grpo", 5e-7, 16, 8, 1
    )  # fmt: skip
    assert (run.beta, run.epsilon, run.weight_decay, run.lora.r, run.gradient_checkpointing) == (
        0,
        0.2,
        0.01,
        0,
        False,
    )
    for sampler in (run.sampler, cfg.rollout.sampler, cfg.evaluate.sampler):
        assert (sampler.name, sampler.temperature) == ("dream", 0.2)
        assert sampler.options["dream"] == {"alg": "entropy", "top_p": 0.95, "alg_temp": 0.0}
    assert (run.sampler.steps, cfg.evaluate.sampler.steps, cfg.task_params["gsm8k"]["completion_length"]) == (
        256, 512, 512
    )  # fmt: skip
    grpo = [s for s in dag.build(cfg) if s.script == "stages/grpo.py"]
    assert all(s.cmd.startswith("accelerate launch --config_file configs/accelerate/fsdp.yaml") for s in grpo)


def test_block_diffusion_profiles_have_their_recipes_values(tmp_path):
    """TraceRL on SDAR-8B-Chat (dLLM-RL's configs/rl_sdar.yaml) and EBPO on LLaDA2.0-mini (DARE's
    run_ebpo_llada2_mini.sh), both sampled by the block sampler."""
    sdar = paper_repo(tmp_path / "sdar", "paper_sdar_math")[1]
    run = sdar.methods["tracerl"]
    assert sdar.model.spec().kind == "sdar" and tuple(sdar.grpo.methods) == ("tracerl",)
    assert (run.num_prompts, run.num_generations, run.learning_rate, run.beta, run.epsilon, run.shrink) == (
        64, 16, 1e-6, 0.01, 0.2, 1
    )  # fmt: skip
    assert (run.sampler.name, run.sampler.block_length, run.sampler.parallel, run.sampler.threshold) == (
        "block", 4, "threshold", 0.9
    )  # fmt: skip
    llada2 = paper_repo(tmp_path / "llada2", "paper_llada2_math")[1]
    run = llada2.methods["ebpo"]
    assert llada2.model.spec().kind == "llada2" and tuple(llada2.grpo.methods) == ("ebpo",)
    assert (run.num_prompts, run.num_generations, run.learning_rate, run.beta, run.views_per_step) == (
        16, 8, 5e-7, 0.0, 16
    )  # fmt: skip
    assert (run.sampler.name, run.sampler.block_length, run.sampler.temperature) == ("block", 32, 0.6)


@pytest.mark.parametrize("profile", ALL_PAPER_PROFILES)
def test_offline_the_download_stage_names_every_missing_item(tmp_path, profile):
    root, cfg = paper_repo(tmp_path, profile)
    download = next(s for s in dag.build(cfg) if s.script == "stages/download.py")
    cmd = [sys.executable, *download.cmd.split()[1:]]
    result = subprocess.run(cmd, cwd=root, env=ENV, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    branch = cfg.image if download.name == "download_image" else cfg
    items = branch.download.hub_items()
    assert f"{len(items)} of {len(items)} downloads missing" in lines[0]
    for item in items:
        assert f"[{item.name}] " in lines[0] and item.repo_id in lines[0]
        if item.repo_id.count("/") == 1:  # a hub id: the command that fetches it
            assert f"hf download {item.repo_id}" in lines[0] and f"--local-dir data/hub/{item.name}" in lines[0]
    assert not list(root.glob("data/download/**/ddmrl_model.json")), "nothing that looks complete is left behind"
