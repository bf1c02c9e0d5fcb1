"""ddmrl.training.distributed in one process: sharding and seeds, the single-process identities, LoRA (adapters only,
reference = adapters off, merged save), gradient checkpointing (same gradients, recomputed blocks) and bf16 autocast.
Two real processes are tested in tests/stages/test_accelerate_launch.py."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from fake_rewards import varied_reward

import ddmrl.objectives.token_clip as losses_module
from ddmrl.config import ConfigError, GRPOConfig, LoraConfig, SamplerConfig
from ddmrl.masking.views import Views
from ddmrl.models.checkpoint import load_checkpoint
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.seeding import derive_seed, generator
from ddmrl.tasks import make_task
from ddmrl.training import distributed as dist
from ddmrl.training.grpo import train_grpo


@pytest.fixture
def setup(monkeypatch, make_model):
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    return task, tok, policy


def config(**kw) -> GRPOConfig:
    base = dict(
        method="rebrl",
        max_steps=2,
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


# ------------------------------------------------------------------------------------------------ helpers


def test_shard_gives_contiguous_even_shares_and_refuses_a_remainder():
    items = list(range(6))
    assert [dist.shard(items, r, 3) for r in range(3)] == [[0, 1], [2, 3], [4, 5]]
    assert dist.shard(items, 0, 1) == items
    with pytest.raises(ConfigError, match=r"grpo.num_prompts = 6: does not split over 4 processes"):
        dist.shard(items, 0, 4, "grpo.num_prompts")


def test_process_zero_keeps_the_seed_and_the_others_get_their_own():
    assert dist.rank_seed(7, 0) == 7
    seeds = {dist.rank_seed(7, r) for r in range(4)}
    assert len(seeds) == 4 and dist.rank_seed(7, 1) == derive_seed(7, "rank", 1)


def test_single_process_collectives_are_identities():
    acc = Accelerator(cpu=True)
    x = torch.tensor([0.25, 1.5])
    assert dist.gather(acc, x) is x
    stats = {"loss": 0.1 + 0.2, "kl": 1 / 3}
    assert dist.mean_over_processes(acc, stats) is stats
    assert dist.all_processes(acc, True) and not dist.all_processes(acc, False)
    assert dist.fingerprint_parts(acc) == ()


def test_device_generator_on_the_cpu_is_the_seeding_generator():
    a, b = dist.device_generator(torch.device("cpu"), 3, "rollout", 0), generator(3, "rollout", 0)
    assert torch.equal(torch.rand(5, generator=a), torch.rand(5, generator=b))


def test_to_device_rebuilds_named_tuples_and_keeps_everything_else():
    views = Views(torch.ones(2, 1, 3, dtype=torch.bool), torch.zeros(2, 1, 0), torch.ones(2, 1), 5, None, ((0,), (1,)))
    moved = dist.to_device((views, [torch.zeros(1)], "text", None), torch.device("cpu"))
    assert type(moved[0]) is Views and moved[0].seed == 5 and moved[0].schedule == ((0,), (1,))
    assert torch.equal(moved[0].masks, views.masks) and moved[2:] == ("text", None)


# ------------------------------------------------------------------------------------------------ training


def test_an_explicit_accelerator_trains_exactly_like_the_default(setup):
    """The stage passes its Accelerator; the unit tests pass none: one process gives the same run either way."""
    task, tok, policy = setup
    twin = copy.deepcopy(policy)
    cfg = config(gradient_accumulation_steps=2)
    a, _ = train_grpo(policy, copy.deepcopy(policy), tok, task, draws(task), cfg, 3)
    b, _ = train_grpo(twin, copy.deepcopy(twin), tok, task, draws(task), cfg, 3, accelerator=Accelerator(cpu=True))
    assert [{k: v for k, v in r.items() if k != "time"} for r in a] == [
        {k: v for k, v in r.items() if k != "time"} for r in b
    ]
    assert all(torch.equal(p, q) for p, q in zip(policy.parameters(), twin.parameters(), strict=True))


def test_gradient_checkpointing_recomputes_blocks_and_trains_identically(setup):
    task, tok, policy = setup
    plain = copy.deepcopy(policy)
    checkpointed = dist.prepare_model(copy.deepcopy(policy), "no", True, LoraConfig())
    assert checkpointed.blocks[0].gradient_checkpointing
    calls = []
    checkpointed.blocks[0].ln1.register_forward_hook(lambda *_: calls.append(1))
    x = torch.randint(5, len(tok), (3, 10))
    for m in (plain, checkpointed):
        m.train()
        m(x).logits.square().mean().backward()
    assert len(calls) == 2, "the block's forward did not run again in the backward pass"
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), name
    # and whole GRPO runs agree bit for bit
    a = dist.prepare_model(copy.deepcopy(policy), "no", True, LoraConfig())
    b = copy.deepcopy(policy)
    ca, _ = train_grpo(a, copy.deepcopy(policy), tok, task, draws(task), config(), 1)
    cb, _ = train_grpo(b, copy.deepcopy(policy), tok, task, draws(task), config(), 1)
    assert ca[0]["loss"] == cb[0]["loss"]
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_models_without_checkpointing_support_train_without_it_and_say_so(capsys, fixed_logits_model):
    model = fixed_logits_model(torch.zeros(4, 3))
    assert dist.prepare_model(model, "no", True, LoraConfig()) is model
    assert "does not support gradient checkpointing" in capsys.readouterr().out


def test_lora_trains_only_the_adapters_against_the_disabled_adapter_reference(setup, monkeypatch, tmp_path):
    """d1's setup (TRL's PEFT path): the reference is the base with the adapters off. B starts at 0, so on the first
    inner step the policy is the base exactly: ratio 1 and k3 KL 0. The saved model is plain, adapters merged."""
    task, tok, policy = setup
    base = copy.deepcopy(policy)
    lora = LoraConfig(r=4, alpha=8.0, target_modules=("qkv", "proj"))
    peft_policy = dist.prepare_model(policy, "no", False, lora)
    names = [n for n, p in peft_policy.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    seen = []
    real = losses_module.clipped_token_loss

    def spy(logps, old, refl, adv, eps, beta, eps_high=0.0):
        out = real(logps, old, refl, adv, eps, beta, eps_high)
        seen.append(out)
        return out

    monkeypatch.setattr(losses_module, "clipped_token_loss", spy)
    curve, _ = train_grpo(peft_policy, None, tok, task, draws(task), config(lora=lora), 0)
    assert math.isfinite(curve[0]["loss"])
    assert torch.equal(seen[0].kl, torch.zeros_like(seen[0].kl))
    assert torch.equal(seen[0].ratio, torch.ones_like(seen[0].ratio))
    assert not torch.equal(seen[1].ratio, torch.ones_like(seen[1].ratio))  # the adapters moved
    plain = lambda name: name.replace("base_model.model.", "").replace("base_layer.", "")  # noqa: E731
    frozen = {plain(n): p for n, p in peft_policy.named_parameters()}
    assert all(torch.equal(frozen[n], p) for n, p in base.named_parameters()), "the base weights moved"

    x = torch.randint(5, len(tok), (2, 12))
    with torch.no_grad():
        want = peft_policy(x).logits
    dist.save_policy(Accelerator(cpu=True), peft_policy, tok, tmp_path / "model")
    merged, _ = load_checkpoint(tmp_path / "model")
    assert type(merged).__name__ == "TinyDDMForMaskedLM"
    assert torch.allclose(merged(x).logits, want, atol=1e-5)
    assert any(not torch.equal(p, q) for p, q in zip(merged.parameters(), base.parameters(), strict=True))


def test_adapters_are_seen_through_an_image_layout(setup):
    """Image runs wrap the (peft) policy in MMaDA's layout: its adapters still count, and switch off."""
    from ddmrl.models.layout import ImageLayout

    task, tok, policy = setup
    base = ImageLayout(copy.deepcopy(policy), [], [5, 6], 4)
    peft_policy = dist.prepare_model(policy, "no", False, LoraConfig(r=4, alpha=8.0, target_modules=("qkv",)))
    wrapped = ImageLayout(peft_policy, [], [5, 6], 4)
    assert dist.is_peft(wrapped) and not dist.is_peft(base)
    with torch.no_grad():
        next(p for n, p in peft_policy.named_parameters() if "lora_B" in n).fill_(1.0)  # the adapters now matter
        x = torch.randint(5, len(tok), (2, 8))
        moved = wrapped(x).logits
        with dist.adapters_disabled(Accelerator(cpu=True), wrapped):
            off = wrapped(x).logits
        plain = base(x).logits
    assert not torch.equal(moved, off) and torch.allclose(off, plain, atol=1e-6)


def test_a_missing_reference_needs_adapters(setup):
    task, tok, policy = setup
    with pytest.raises(ValueError, match="ref is None but the policy has no adapters"):
        train_grpo(policy, None, tok, task, draws(task), config(), 0)


@pytest.fixture
def fresh_accelerate_state():
    """accelerate's process-wide state fixes the precision once; start and leave clean."""
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def test_bf16_mixed_precision_trains_with_finite_losses(setup, fresh_accelerate_state):
    """bf16 autocast (on the CPU here): the policy's forward passes run in bf16, the weights stay fp32."""
    task, tok, policy = setup
    acc = dist.make_accelerator("bf16", 1, cpu=True)
    seen = []
    real = policy.forward

    def spy(*args, **kw):
        out = real(*args, **kw)
        seen.append(out.logits.dtype)
        return out

    policy.forward = spy
    curve, _ = train_grpo(policy, copy.deepcopy(policy), tok, task, draws(task), config(), 0, accelerator=acc)
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["kl"]) for r in curve)
    assert torch.bfloat16 in seen
    assert all(p.dtype == torch.float32 for p in policy.parameters())
