"""Rollouts: G completions per prompt from the LLaDA sampler, decoded and scored by the task.

The standalone ``rollout`` / ``reward`` / ``evaluate`` stages and the online ``grpo`` loop all call these
functions, so what RL trains on and what the tables report come from the same code.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ddmrl.config import SamplerConfig
from ddmrl.samplers import SAMPLERS
from ddmrl.tasks.base import Example, Task
from ddmrl.training.data import completion_mask, encode_prompts


class Rollouts(NamedTuple):
    """N = len(examples) * G completions, grouped consecutively by prompt.

    prompt_ids [N, P], completion_ids [N, L], completion_mask [N, L] (answer + first EOS),
    reveal_step [N, L] (the sampler step that committed each token), texts (decoded completions), nfe.
    """

    prompt_ids: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    reveal_step: torch.Tensor
    texts: list[str]
    nfe: int


def sampler_steps(sampler: SamplerConfig, completion_length: int) -> int:
    """``steps: 0`` means d1's protocol, steps = completion length / 2 (two tokens per step)."""
    return sampler.steps or max(1, completion_length // 2)


def sampler_kwargs(sampler: SamplerConfig, completion_length: int) -> dict:
    """Keyword arguments of the configured sampler's ``generate``."""
    kw = {
        "steps": sampler_steps(sampler, completion_length),
        "temperature": sampler.temperature,
        "cfg_scale": sampler.cfg_scale,
    }
    if sampler.name == "llada":
        kw |= {"block_length": sampler.block_length, "remasking": sampler.remasking, "kv_cache": sampler.kv_cache}
    elif sampler.name == "maskgit":
        kw |= {"noise_temperature": sampler.noise_temperature}
    if sampler.name != "emerge":
        kw |= {"parallel": sampler.parallel, "threshold": sampler.threshold, "factor": sampler.factor}
    return kw


def rollout(
    model, tok, task: Task, examples: list[Example], num_generations: int, sampler: SamplerConfig, gen: torch.Generator
) -> Rollouts:
    """Sample ``num_generations`` completions for each example (prompts repeated consecutively), on the device of
    the model's parameters (the returned tensors live there too)."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    prompts = encode_prompts(tok, task, examples).repeat_interleave(num_generations, 0).to(device)  # [N, P]
    generate = SAMPLERS[sampler.name]
    out = generate(
        model,
        prompts,
        task.completion_length,
        mask_id=tok.mask_token_id,
        generator=gen,
        **sampler_kwargs(sampler, task.completion_length),
    )
    texts = task.decode(tok, out.completion_ids)
    mask = completion_mask(out.completion_ids, tok.eos_token_id)
    return Rollouts(prompts, out.completion_ids, mask, out.reveal_step, texts, out.nfe)


def rewards(task: Task, examples: list[Example], batch: Rollouts, num_generations: int) -> torch.Tensor:
    """[N] task rewards of rollouts grouped ``num_generations`` per example."""
    per_row = [examples[i // num_generations] for i in range(len(batch.texts))]
    return torch.tensor(task.batch_rewards(batch.texts, batch.completion_ids, per_row), dtype=torch.float32)
