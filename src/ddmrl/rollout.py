"""Rollouts: G completions per prompt from the LLaDA sampler, decoded and scored by the task.

The standalone ``rollout`` / ``reward`` / ``evaluate`` stages and the online ``grpo`` loop all call these
functions, so what RL trains on and what the tables report come from the same code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from ddmrl.config import SamplerConfig
from ddmrl.samplers import SAMPLERS
from ddmrl.samplers.schedules import ass_steps
from ddmrl.samplers.trajectory import Trajectory
from ddmrl.tasks.base import Example, Task
from ddmrl.training.data import completion_mask, encode_prompts

if TYPE_CHECKING:
    from ddmrl.aux_policies.base import AuxPolicy, AuxTrace


class Rollouts(NamedTuple):
    """N = len(examples) * G completions, grouped consecutively by prompt.

    prompt_ids [N, P], completion_ids [N, L], completion_mask [N, L] (answer + first EOS),
    reveal_step [N, L] (the sampler step that committed each token), texts (decoded completions), nfe,
    trajectory (every step's state, prediction and confidence, ``ddmrl.samplers.trajectory``; None unless recorded).
    aux: what an auxiliary policy did (``ddmrl.aux_policies.base.AuxTrace``: its inputs, actions and their log-probs
    per step), None without one. hints [N, L]: positions clamped to ground-truth tokens while the row was sampled
    (IGPO's inpainted rows, ``ddmrl.augmenters``); None when no rollout augmenter ran.
    """

    prompt_ids: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    reveal_step: torch.Tensor
    texts: list[str]
    nfe: int
    trajectory: Trajectory | None = None
    aux: AuxTrace | None = None
    hints: torch.Tensor | None = None


def sampler_steps(sampler: SamplerConfig, completion_length: int) -> int:
    """``steps: 0`` means d1's protocol, steps = completion length / 2 (two tokens per step); ASS takes
    floor(log2 L)."""
    if sampler.schedule == "ass":
        return ass_steps(completion_length)
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
        kw |= {"schedule": sampler.schedule, "ass_blocks": sampler.ass_blocks, "eoser": sampler.eoser,
               "eos_min_gamma": sampler.eos_min_gamma, "eos_max_gamma": sampler.eos_max_gamma}  # fmt: skip
        kw |= {"confidence_dtype": sampler.confidence_dtype, "logits_eos_inf": sampler.logits_eos_inf,
               "confidence_eos_eot_inf": sampler.confidence_eos_eot_inf, "rcr_scope": sampler.rcr_scope,
               "parallel_floor": sampler.parallel_floor, "factor_rule": sampler.factor_rule}  # fmt: skip
    elif sampler.name == "maskgit":
        kw |= {"noise_temperature": sampler.noise_temperature}
    elif sampler.name == "block":  # ``steps`` over the completion, as for llada; the block sampler's are per block
        blocks = -(-completion_length // sampler.block_length)
        kw |= {"block_length": sampler.block_length, "steps": max(1, kw["steps"] // blocks)}
        return kw | {"parallel": sampler.parallel, "threshold": sampler.threshold}
    if sampler.name != "emerge":
        kw |= {"parallel": sampler.parallel, "threshold": sampler.threshold, "factor": sampler.factor}
    return kw


#: LLaDA's end-of-turn token (id 126348 in LLaDA-8B-Instruct's vocabulary, EOS <|endoftext|> being 126081)
EOT_TOKEN = "<|eot_id|>"


def eot_id(tok) -> int:
    """The id of LLaDA's end-of-turn token in ``tok`` (``confidence_eos_eot_inf``); a clear error where it has none."""
    token_id = tok.convert_tokens_to_ids(EOT_TOKEN)
    if token_id is None or token_id == tok.unk_token_id:
        raise ValueError(f"sampler.confidence_eos_eot_inf: the tokenizer has no {EOT_TOKEN} token")
    return token_id


def rollout(
    model,
    tok,
    task: Task,
    examples: list[Example],
    num_generations: int,
    sampler: SamplerConfig,
    gen: torch.Generator,
    record_trajectory: bool = False,
    aux_policy: AuxPolicy | None = None,
    clamp: torch.Tensor | None = None,
    tempered_confidence: bool = False,
) -> Rollouts:
    """Sample ``num_generations`` completions for each example (prompts repeated consecutively), on the device of
    the model's parameters (the returned tensors live there too). ``record_trajectory`` (llada sampler): keep every
    step's state, prediction and confidence in ``Rollouts.trajectory``. ``aux_policy``: an auxiliary policy the
    sampler consults at every step (in its ``train()`` mode it explores, in ``eval()`` mode it acts as deployed).
    ``clamp`` [N, L] (llada sampler): each row's starting completion, tokens other than the mask fixed (inpainting);
    the rollouts' ``hints`` mark them. ``tempered_confidence`` (llada sampler): rank by the tempered probability of
    each proposal (MDPO's released sampler, ``ddmrl.samplers.llada.generate``)."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    prompts = encode_prompts(tok, task, examples).repeat_interleave(num_generations, 0).to(device)  # [N, P]
    kw = sampler_kwargs(sampler, task.completion_length)
    if sampler.eoser or sampler.logits_eos_inf or sampler.confidence_eos_eot_inf:
        kw["eos_id"] = tok.eos_token_id
    if sampler.confidence_eos_eot_inf:
        kw["eot_id"] = eot_id(tok)
    if record_trajectory:
        if sampler.name != "llada":
            raise ValueError(f"stored trajectories come from the llada sampler, not {sampler.name!r}")
        kw["record_trajectory"] = True
    if aux_policy is not None:
        kw["aux_policy"] = aux_policy
    if tempered_confidence:
        if sampler.name != "llada":
            raise ValueError(f"tempered_confidence is an option of the llada sampler, not {sampler.name!r}")
        kw["tempered_confidence"] = True
    hints = None
    if clamp is not None:
        if sampler.name != "llada":
            raise ValueError(f"inpainting (clamped positions) needs the llada sampler, not {sampler.name!r}")
        kw["clamp"] = clamp.to(device)
        hints = kw["clamp"] != tok.mask_token_id  # [N, L]
    out = SAMPLERS[sampler.name](
        model, prompts, task.completion_length, mask_id=tok.mask_token_id, generator=gen, **kw
    )
    texts = task.decode(tok, out.completion_ids)
    mask = completion_mask(out.completion_ids, tok.eos_token_id)
    return Rollouts(prompts, out.completion_ids, mask, out.reveal_step, texts, out.nfe, out.trajectory, out.aux, hints)


def rewards(task: Task, examples: list[Example], batch: Rollouts, num_generations: int) -> torch.Tensor:
    """[N] task rewards of rollouts grouped ``num_generations`` per example."""
    per_row = [examples[i // num_generations] for i in range(len(batch.texts))]
    return torch.tensor(task.batch_rewards(batch.texts, batch.completion_ids, per_row), dtype=torch.float32)


def step_rewards(tok, task: Task, examples: list[Example], batch: Rollouts, num_generations: int) -> torch.Tensor:
    """[N, S] the task reward of each step's full prediction x̂_0^(s), decoded as a completion (MDPO, He et al.
    2025: per-step rewards on the intermediate predictions). Needs a recorded trajectory."""
    if batch.trajectory is None:
        raise ValueError("per-step rewards need the rollouts' stored trajectory (record_trajectory)")
    per_row = [examples[i // num_generations] for i in range(len(batch.texts))]
    out = []
    for ids in batch.trajectory.predictions:  # [N, L] per step
        out.append(task.batch_rewards(task.decode(tok, ids), ids, per_row))
    return torch.tensor(out, dtype=torch.float32).T
