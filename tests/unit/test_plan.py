"""ddmrl.plan: the planner's traces on fake tensors equal the same code on real ones; its FLOPs shortcut equals the
full trace; the engines' sharding; and its per-process peak against the peak a real GRPO run holds (three CPU-sized
configurations), within the tolerance docs/real_scale.md states; the command line refuses what does not fit."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from torch.utils.flop_counter import FlopCounterMode

from ddmrl import config, plan
from ddmrl.config import GRPOConfig, LoraConfig, SamplerConfig
from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.tasks import make_task
from ddmrl.tasks.encoding import encode_prompts
from ddmrl.training import distributed as dist
from ddmrl.training.grpo import train_grpo

#: the plan's peak over the measured one: the bounds docs/real_scale.md states for CPU-sized runs
TOLERANCE = (0.85, 1.15)


def tiny_builder(tok, task, width: int = 64, layers: int = 2):
    """``build()``: a TinyDDM for ``task`` (the planner's model builder, as ``plan.model_builder`` returns)."""
    cfg = TinyDDMConfig(
        vocab_size=len(tok), hidden_size=width, num_layers=layers, num_heads=4, intermediate_size=4 * width,
        max_position_embeddings=task.prompt_length + task.completion_length + 2, mask_token_id=tok.mask_token_id,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip

    def build() -> TinyDDMForMaskedLM:
        return TinyDDMForMaskedLM(cfg)

    return build


@pytest.fixture(scope="module")
def chain():
    task = make_task("chain", hops=2)
    return task, build_tokenizer(task.alphabet, task.special_tokens)


def test_live_bytes_counts_storages_once_and_frees_them():
    counter = plan.LiveBytes()
    with counter:
        a = torch.zeros(256)  # 1 KiB
        view = a[:10]  # no new storage
        b = torch.ones(512, dtype=torch.float64)  # 4 KiB
        assert counter.live == 1024 + 4096
        del b
        assert counter.live == 1024
    assert counter.peak == 1024 + 4096 and view.numel() == 10


def test_fake_traces_equal_the_same_code_on_real_tensors(chain):
    task, tok = chain
    build = tiny_builder(tok, task)
    kw = {"steps": 8, "temperature": 1.0, "block_length": 4, "kv_cache": "prefix"}
    shapes = (3, task.prompt_length, task.completion_length)
    torch.manual_seed(0)
    real_sample = plan.trace_sampling(build(), *shapes, tok.mask_token_id, kw, len(tok))
    real_train = plan.trace_training(build(), 3, task.prompt_length, task.completion_length, "no", len(tok))
    with plan.fake_tensors():
        fake_sample = plan.trace_sampling(plan.to_fake(plan.on_meta(build)), *shapes, tok.mask_token_id, kw, len(tok))
        model = plan.to_fake(plan.on_meta(build))
        fake_train = plan.trace_training(model, 3, task.prompt_length, task.completion_length, "no", len(tok))
    assert fake_sample == real_sample
    assert fake_train == real_train
    params = list(build().parameters())
    assert real_train.gradients == 4 * sum(p.numel() for p in params)
    assert real_train.optimizer == 2 * real_train.gradients + 4 * len(params)  # AdamW's two moments and its step
    # the foreach step (CUDA's default) holds sqrt(v) of every parameter at once: one more copy of the weights,
    # the 1.25 GiB (LoRA r 128 on LLaDA-8B) that the H200 measured above the plan before it was counted
    assert real_train.optimizer_step >= real_train.gradients


@pytest.mark.parametrize(("kv_cache", "parallel"), [("none", "none"), ("prefix", "none"), ("dual", "threshold")])
def test_the_sampler_flops_shortcut_equals_the_full_trace(chain, kv_cache, parallel):
    task, tok = chain
    kw = {"steps": 16, "temperature": 1.0, "block_length": 4, "kv_cache": kv_cache, "parallel": parallel}
    shapes = (2, task.prompt_length, 16, tok.mask_token_id, kw, len(tok))
    with plan.fake_tensors():
        model = plan.to_fake(plan.on_meta(tiny_builder(tok, task)))
        shortcut, full = (plan.trace_sampling(model, *shapes, shortcut=s) for s in (True, False))
    assert shortcut.flops == full.flops > 0 and shortcut.nfe == full.nfe == 16


def test_the_block_trace_makes_the_block_samplers_model_calls(chain):
    """``trace_block_sampling`` (the planner's trace of ``SAMPLERS["block"]``, whose position choices fake tensors
    cannot follow) makes the model calls of the real sampler: on TinyBlockDDM and real tensors, the same number of
    calls and the same FLOPs as ``ddmrl.samplers.block.generate`` with its cache and without
    (``sampler.options.block.kv_cache: false``); its shortcut (one traced pass per block) equals tracing every pass.
    (Fake tensors: the real families, tests/pipeline/test_paper_launch.py; TinyBlockDDM reads its position
    values.)"""
    from ddmrl.models.tiny_block import TinyBlockDDMConfig, TinyBlockDDMForMaskedLM
    from ddmrl.samplers.block import generate as block_generate

    task, tok = chain
    config = TinyBlockDDMConfig(vocab_size=len(tok), hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                                max_position_embeddings=64, block_size=4)  # fmt: skip
    model = TinyBlockDDMForMaskedLM(config).eval()
    prompts = torch.randint(0, len(tok), (3, task.prompt_length))
    flops = []
    for kv_cache in (True, False):
        counter = plan.LiveBytes()
        with counter:
            out = block_generate(model, prompts, 12, mask_id=tok.mask_token_id, block_length=4, steps=2,
                                 kv_cache=kv_cache)  # fmt: skip
        shortcut, full = (
            plan.trace_block_sampling(model, 3, task.prompt_length, 12, 4, 2, len(tok), shortcut=s, kv_cache=kv_cache)
            for s in (True, False)
        )  # fmt: skip
        assert (full.nfe, full.flops) == (out.nfe, counter.flops) and full.flops > 0
        assert shortcut == full and (full.kv_cache > 0) == kv_cache
        flops.append(full.flops)
    assert flops[1] > flops[0], "recomputing costs more than the cache"


def test_flops_are_torchs_and_cpu_attention_counts_as_flash_attention(chain):
    """Matrix products as torch's FlopCounterMode counts them; PyTorch's CPU attention kernel (absent from its
    table) as FlashAttention: 4 B H T^2 d forward."""
    q = torch.randn(2, 4, 8, 16)
    counter, reference = plan.LiveBytes(), FlopCounterMode(display=False)
    with counter:
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert counter.flops == 4 * 2 * 4 * 8 * 8 * 16
    counter = plan.LiveBytes()
    with counter, reference:
        torch.randn(3, 5) @ torch.randn(5, 7)
    assert counter.flops == reference.get_total_flops() == 2 * 3 * 5 * 7


def test_engines_shard_what_they_shard():
    t = plan.TrainTrace(weights=800, trainable_params=100, gradients=400, optimizer=800, activations=50, flops=0,
                        forward_flops=0)  # fmt: skip
    assert plan.per_gpu(t, "ddp", 8) == {"weights": 800, "gradients": 400, "optimizer": 800,
                                          "ddp gradient buckets": 400, "activations": 50}  # fmt: skip
    assert plan.per_gpu(t, "zero2", 8) == {"weights": 800, "gradients": 50, "optimizer": 100, "activations": 50}
    assert plan.per_gpu(t, "zero3", 8, gathered_block=30) == {
        "weights": 100, "gradients": 50, "optimizer": 100, "gathered blocks (ZeRO-3 / FSDP)": 60, "activations": 50
    }  # fmt: skip
    assert plan.per_gpu(t, "ddp", 1) == {"weights": 800, "gradients": 400, "optimizer": 800, "activations": 50}
    with pytest.raises(ValueError, match="engine 'zero1'"):
        plan.per_gpu(t, "zero1", 8)


def test_engine_of_reads_the_accelerate_configs():
    assert [plan.engine_of(f"configs/accelerate/{n}.yaml") for n in ("ddp", "zero2", "zero3", "fsdp")] == [
        "ddp", "zero2", "zero3", "fsdp"
    ]  # fmt: skip


CASES = {  # task, its parameters, G, LoRA rank, gradient checkpointing, width
    "chain, G 4, full fine-tune": ("chain", {"hops": 2}, 4, 0, False, 256),
    "longer chain, G 8, LoRA r 8": ("chain", {"hops": 5}, 8, 8, False, 256),
    "sudoku, G 6, LoRA r 16, checkpointing": ("sudoku4", {}, 6, 16, True, 256),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_plan_is_within_tolerance_of_a_real_grpo_runs_peak(case):
    """Two rollout batches of a real one-process GRPO run (so the second batch's old log-probs meet the optimiser's
    states) under LiveBytes, against the plan of the same run from fake tensors."""
    name, params, g, r, checkpointing, width = CASES[case]
    task = make_task(name, **params)
    task.reward = lambda completion, example: (sum(map(ord, completion)) % 7) / 7  # rewards that vary
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    build = tiny_builder(tok, task, width)
    mu = 2
    cfg = GRPOConfig(
        method="diffu_grpo", max_steps=2 * mu, num_prompts=2, num_generations=g, num_iterations=mu, beta=0.04,
        gradient_checkpointing=checkpointing, lora=LoraConfig(r=r, alpha=16.0),
        sampler=SamplerConfig(block_length=4, steps=0, temperature=1.0),
    )  # fmt: skip
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    torch.manual_seed(0)
    policy = dist.prepare_model(build(), "no", checkpointing, cfg.lora)
    ref = None if r else build().requires_grad_(False)
    counter = plan.LiveBytes()
    for m in (policy, ref):
        for p in () if m is None else m.parameters():
            counter.add(p)
    with counter:
        train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=it), cfg, seed=0,
                   accelerator=dist.make_accelerator("no", 1))  # fmt: skip
    prompt_length = encode_prompts(tok, task, task.generate(1, seed=0)).shape[1]
    planned = plan.grpo_plan(build, cfg, tok.mask_token_id, prompt_length, task.completion_length, plan.Hardware(),
                             "ddp")  # fmt: skip
    ratio = planned.peak / counter.peak
    assert TOLERANCE[0] <= ratio <= TOLERANCE[1], (ratio, counter.peak, planned.parts)


def test_the_command_line_plans_a_profile_and_refuses_what_does_not_fit(chain, tmp_path, capsys):
    task, tok = chain
    model_dir = tmp_path / "model"
    tiny_builder(tok, task)().save_pretrained(model_dir)
    (tmp_path / "params.yaml").write_text(
        "tasks: [chain]\nmodel: {kind: tiny}\ngrpo: {methods: [diffu_grpo], num_prompts: 2, num_generations: 4}\n"
    )
    args = ["--params", str(tmp_path / "params.yaml"), "--model-dir", str(model_dir), "--completion-length", "16",
            "--prompt-length", "12"]  # fmt: skip
    assert plan.main([*args, "--memory-gib", "80"]) == 0
    out = capsys.readouterr().out
    assert "| **peak** |" in out and "sampling" in out
    assert plan.main([*args, "--memory-gib", "0.001"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("does not fit: --memory-gib = 0.001: grpo needs ") and "\n" not in err
    assert plan.main([*args, "--gpus-per-node", "1"]) == 0  # one process
    (tmp_path / "params.yaml").write_text(
        "tasks: [chain]\nmodel: {kind: tiny}\ngrpo: {methods: [diffu_grpo], num_prompts: 2, num_generations: 4, "
        "launch: {launcher: accelerate, config_file: configs/accelerate/zero2.yaml, num_processes: 2}}\n"
    )
    assert plan.main([*args, "--gpus-per-node", "1"]) == 2
    assert capsys.readouterr().err.strip().endswith("launch.num_processes = 2: the hardware has 1 GPUs (1 x 1)")


def test_a_multi_node_run_is_planned_per_gpu_and_refused_in_one_line_naming_the_key(chain, tmp_path, capsys):
    """``launch.num_machines: 2`` with 4 processes: the plan is that of one of the 4 GPUs (2 nodes x 2), the nodes
    come from the launch, and a peak above the GPUs' memory (the stage's ``launch.gpu_memory_gib``, the command
    line's ``--memory-gib``) or nodes the hardware lacks are refused in one line naming the key."""
    task, tok = chain
    model_dir = tmp_path / "model"
    tiny_builder(tok, task)().save_pretrained(model_dir)
    launch = "{launcher: accelerate, config_file: configs/accelerate/zero2.yaml, num_processes: 4, num_machines: 2}"
    (tmp_path / "params.yaml").write_text(
        f"tasks: [chain]\nmodel: {{kind: tiny}}\ngrpo: {{methods: [diffu_grpo], num_prompts: 4, num_generations: 4, "
        f"launch: {launch}}}\n"
    )
    args = ["--params", str(tmp_path / "params.yaml"), "--model-dir", str(model_dir), "--completion-length", "16",
            "--prompt-length", "12", "--gpus-per-node", "2"]  # fmt: skip
    assert plan.main([*args, "--memory-gib", "80"]) == 0
    assert "(zero2, 4 processes)" in capsys.readouterr().out
    assert plan.main([*args, "--memory-gib", "0.001"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("does not fit: --memory-gib = 0.001: grpo needs ") and "\n" not in err
    assert "(zero2, 4 processes on 2 nodes; " in err
    assert plan.main([*args, "--nodes", "1"]) == 2
    assert capsys.readouterr().err.strip() == (
        "does not fit: launch.num_processes = 4: the hardware has 2 GPUs (1 x 2)"
    )
    assert plan.main([*args[:-2], "--gpus-per-node", "1", "--nodes", "4"]) == 2
    assert capsys.readouterr().err.strip() == (
        "does not fit: launch.num_machines = 2: 2 processes on each of 2 nodes; the hardware has 4 nodes of 1 GPUs"
    )
    # the stage's own check (launch.gpu_memory_gib): the same plan, refused naming its key
    cfg = config.load(tmp_path / "params.yaml")
    run, name, _ = cfg.run(cfg.run_names()[0])
    booked = dataclasses.replace(run, launch=dataclasses.replace(run.launch, gpu_memory_gib=0.001))
    with pytest.raises(plan.DoesNotFit, match=r"^launch.gpu_memory_gib = 0.001: grpo needs .* on 2 nodes; ") as e:
        plan.check_fits(booked, cfg.model, model_dir, tok, task)
    assert "\n" not in str(e.value)
