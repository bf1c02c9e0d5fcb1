"""Old and reference log-probs of all training views in batched passes (ddmrl.training.grpo.view_logps)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from float_error import forward_passes_agree

import ddmrl.training.grpo as grpo
from ddmrl.likelihood import token_logps
from ddmrl.training.grpo import view_logps

MASK = 0


def views(n: int = 3, seed: int = 0):
    """[V=4, N, P + L] masked views of N rows (prompt 4, completion 6) and the clean completion [N, 6]."""
    g = torch.Generator().manual_seed(seed)
    completion = torch.randint(5, 10, (n, 6), generator=g)
    clean = torch.cat([torch.randint(5, 10, (n, 4), generator=g), completion], 1)
    inputs = torch.stack(
        [clean.masked_fill(torch.rand(clean.shape, generator=g) < t, MASK) for t in (0.2, 0.5, 0.8, 1)]
    )
    return inputs, completion


@pytest.mark.parametrize("per_pass_logits", [None, 3 * 10 * 10])  # all views in one pass; one view per pass
@pytest.mark.parametrize("cfg_scale", [0.0, 1.5])
def test_batched_views_are_the_per_view_log_probs(make_model, monkeypatch, per_pass_logits, cfg_scale):
    """Rows are independent, so one pass over every view gives each view's own one-pass log-probs (up to float
    reassociation in the larger matrix products), with or without guidance, in one pass or several."""
    if per_pass_logits:
        monkeypatch.setattr(grpo, "LOGITS_PER_PASS", per_pass_logits)
    model = make_model(max_positions=10)
    inputs, completion = views()
    guidance = {"cfg_scale": cfg_scale, "mask_id": MASK}

    def run(m):  # (batched, per view; the logits, for S)
        with torch.no_grad():
            want = torch.stack([token_logps(m, x, completion, **guidance) for x in inputs])
            got = view_logps(m, inputs, completion, **guidance)
            return got, want, m(inputs.flatten(0, 1)).logits

    assert run(model)[0].shape == (4, 3, 6)
    # tolerance from float32's error (tests/float_error.py); guided log-probs carry 2 (2 w + 1) times the logits'
    forward_passes_agree("the views' log-probs", run, model, inputs.shape[2], gain=2 * (2 * cfg_scale + 1))


def test_batching_counts_forward_passes(make_model, monkeypatch):
    """4 views of 3 rows x 10 positions x 10 tokens = 300 logits each: a budget of 600 gives passes of 2 views."""
    model = make_model(max_positions=10)
    calls = []
    model.register_forward_hook(lambda m, args, out: calls.append(args[0].shape[0]))
    inputs, completion = views()
    with torch.no_grad():
        view_logps(model, inputs, completion)
        assert calls == [12]
        calls.clear()
        monkeypatch.setattr(grpo, "LOGITS_PER_PASS", 600)
        view_logps(model, inputs, completion)
    assert calls == [6, 6]


@pytest.mark.parametrize("method", ["diffu_grpo", "tracerl"])
def test_grpo_log_probs_are_full_forward_passes_whatever_the_rollout_sampler(make_model, monkeypatch, method):
    """A GRPO run whose rollouts use the dual cache and threshold decoding: the sampler's passes read and write a
    cache, but every pass outside the rollouts (old, reference and current log-probs) is the model's own over all
    P + L positions, with no cache argument (never the sampler's approximation)."""
    from ddmrl.config import SamplerConfig, method_config
    from ddmrl.models.tokenizer import build_tokenizer
    from ddmrl.tasks import make_task

    task = make_task("sudoku4")
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    total = task.prompt_length + 1 + task.completion_length
    policy = make_model(max_positions=total, tokenizer=tok)
    ref = make_model(max_positions=total, tokenizer=tok)
    calls, phase = [], ["other"]
    for m in (policy, ref):
        m.register_forward_pre_hook(
            lambda mod, args, kwargs: calls.append((phase[0], args[0].shape[1], "past_key_values" in kwargs)),
            with_kwargs=True,
        )
    real_rollout = grpo.rollout

    def rollout(*args, **kwargs):
        phase[0] = "rollout"
        try:
            return real_rollout(*args, **kwargs)
        finally:
            phase[0] = "other"

    monkeypatch.setattr(grpo, "rollout", rollout)
    sampler = SamplerConfig(block_length=4, steps=10, temperature=1.0, kv_cache="dual", parallel="threshold")
    shared = {"max_steps": 2, "num_prompts": 2, "num_generations": 4, "num_iterations": 2, "beta": 0.04}
    cfg = method_config(method, shared, sampler=dataclasses.asdict(sampler))
    grpo.train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=100 + it), cfg, 0)
    rollout_calls = [c for c in calls if c[0] == "rollout"]
    other = [c for c in calls if c[0] == "other"]
    assert any(n < total for _, n, _ in rollout_calls), "the rollouts used the cache's windows"
    assert other and all(n == total and not cached for _, n, cached in other)
