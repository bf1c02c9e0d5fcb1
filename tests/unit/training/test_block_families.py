"""Every method that applies to block diffusion on the real block-diffusion families (the family x method matrix of
docs/families.md): SDAR / TraDo and LLaDA 2.x, tiny random instances of their real classes loaded as ddmrl loads a
checkpoint (``load_checkpoint`` of a pointer of kind ``sdar`` / ``llada2``), one GRPO rollout batch each with the
block sampler on sudoku4 and a reward that varies across samples: finite loss, every parameter that should train
moved (MoE: the experts a batch never routes to keep their weights)."""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import pytest
import torch
from fake_rewards import varied_reward
from test_grpo_block import APPLY

from ddmrl.config import SamplerConfig, method_config
from ddmrl.models.checkpoint import load_checkpoint, write_pointer
from ddmrl.tasks import make_task
from ddmrl.training.grpo import train_grpo

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import real_llada2  # noqa: E402
import real_sdar  # noqa: E402

FAMILIES = {
    "sdar": (real_sdar, real_sdar.sdar_checkpoint, real_sdar.needs_sdar),
    "llada2": (real_llada2, real_llada2.llada2_checkpoint, real_llada2.needs_llada2),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    """A tiny random checkpoint of the family behind a pointer (as the download stage writes one), loaded once:
    (kind, model, tokenizer)."""
    kind = request.param
    module, build, needs = FAMILIES[kind]
    if needs.args[0]:  # skipif's condition: the reference code is absent
        pytest.skip(needs.kwargs["reason"])
    path = tmp_path_factory.mktemp("hub") / kind
    build(path, module.tokenizer())
    write_pointer(path, {"kind": kind, "path_or_id": str(path), "trust_remote_code": True, "dtype": "float32"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        model, tok = load_checkpoint(path)
    if tok.bos_token_id is None:  # SDAR's (Qwen's) has none; the embedded task's prompts open with one
        tok.bos_token = "<|im_start|>"
    return kind, model, tok


@pytest.fixture
def setup(family, monkeypatch):
    kind, model, tok = family
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    monkeypatch.setattr(task, "prompt_length", 32)  # the test tokenizers have one token per character
    policy = copy.deepcopy(model).train()
    return kind, task, tok, policy, copy.deepcopy(policy)


def run(setup, method: str, sampler: SamplerConfig, **kw) -> dict[str, torch.Tensor]:
    kind, task, tok, policy, ref = setup
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    base = dict(method=method, max_steps=2, num_prompts=2, num_generations=4, num_iterations=2, learning_rate=1e-2,
                beta=0.04, sampler=sampler)  # fmt: skip
    cfg = method_config(method, base, **kw)
    curve, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=100 + it), cfg, 0)
    assert curve[-1]["step"] == 2 and all(math.isfinite(row["loss"]) for row in curve)
    return {n: p for n, p in policy.named_parameters() if torch.equal(p, before[n])}


def expected_still(kind: str, unchanged: dict) -> bool:
    """Only MoE experts no token was routed to may keep their weights (LLaDA 2.x); every other weight moves."""
    return all(kind == "llada2" and ".mlp.experts." in n for n in unchanged)


@pytest.mark.parametrize("method", APPLY)
def test_every_block_method_runs_on_the_family(setup, method):
    unchanged = run(setup, method, SamplerConfig(name="block", block_length=4, steps=4, temperature=1.0))
    assert expected_still(setup[0], unchanged), f"{setup[0]} {method}: did not move: {sorted(unchanged)}"


def test_justgrpo_runs_left_to_right_on_the_family(setup):
    """JustGRPO on a block family: blocks of one token (left to right, the exact cache of finished tokens; on SDAR
    without flash_attn through ``ddmrl.models.sdar._single_position``)."""
    unchanged = run(setup, "justgrpo", SamplerConfig(name="block", block_length=1, temperature=1.0))
    assert expected_still(setup[0], unchanged), sorted(unchanged)


@pytest.mark.parametrize("kv_cache", [True, False])
def test_the_kv_cache_key_reaches_the_familys_sampler(family, monkeypatch, kv_cache):
    """``sampler.options.block.kv_cache`` through a rollout on the loaded family: true (the default) prefills and
    appends to a cache; false calls the model with no cache at all (LLaDA 2.x's generate, the exact mode in
    bfloat16: tests/unit/samplers/test_llada2_sampler.py)."""
    from ddmrl.rollout import rollout

    _, model, tok = family
    calls = []
    forward = model.block_forward
    monkeypatch.setattr(model, "block_forward", lambda *a: calls.append(a) or forward(*a))  # the sampler's calls
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "prompt_length", 32)
    sampler = SamplerConfig(name="block", block_length=4, steps=4, options={"block": {"kv_cache": kv_cache}})
    rollout(model, tok, task, task.generate(1, seed=0), 2, sampler, torch.Generator().manual_seed(0))
    cached = [cache is not None or store for *_, cache, store in calls]  # (ids, positions, attention, cache, store)
    assert calls and any(cached) == kv_cache
