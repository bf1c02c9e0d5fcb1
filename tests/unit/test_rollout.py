"""Rollouts and rewards (ddmrl.rollout): G completions per prompt, grouped consecutively."""

from __future__ import annotations

import torch

from ddmrl.config import SamplerConfig
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.rollout import rewards, rollout, sampler_steps
from ddmrl.tasks import make_task
from ddmrl.tasks.encoding import completion_mask


def test_sampler_steps_zero_means_two_tokens_per_step():
    assert sampler_steps(SamplerConfig(steps=7), 20) == 7
    # SamplerConfig itself refuses steps = 0 (steps >= 1), so bypass the frozen dataclass to reach this branch
    object.__setattr__(cfg := SamplerConfig(), "steps", 0)
    assert sampler_steps(cfg, 20) == 10 and sampler_steps(cfg, 1) == 1


def test_rollout_groups_prompts_and_decodes(make_model):
    task = make_task("sudoku4")
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    model = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    examples = task.generate(2, seed=0)
    sampler = SamplerConfig(block_length=5, steps=4, temperature=1.0)
    out = rollout(model, tok, task, examples, 3, sampler, torch.Generator().manual_seed(0))
    assert out.prompt_ids.shape == (6, task.prompt_length + 1)
    assert torch.equal(out.prompt_ids[0], out.prompt_ids[2]) and not torch.equal(out.prompt_ids[2], out.prompt_ids[3])
    assert out.completion_ids.shape == (6, task.completion_length)
    assert not bool((out.completion_ids == tok.mask_token_id).any())
    assert torch.equal(out.completion_mask, completion_mask(out.completion_ids, tok.eos_token_id))
    assert out.nfe == 4 and len(out.texts) == 6
    again = rollout(model, tok, task, examples, 3, sampler, torch.Generator().manual_seed(0))
    assert torch.equal(again.completion_ids, out.completion_ids) and again.texts == out.texts
    # rewards are scored against the example of each completion's group
    seen = []
    task.reward = lambda text, ex: seen.append(ex.id) or 1.0
    r = rewards(task, examples, out, 3)
    assert r.dtype == torch.float32 and r.tolist() == [1.0] * 6
    assert seen == [examples[0].id] * 3 + [examples[1].id] * 3
