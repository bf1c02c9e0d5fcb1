"""Rollouts: G completions per prompt from the LLaDA sampler, decoded and scored by the task.

The standalone ``rollout`` / ``reward`` / ``evaluate`` stages and the online ``grpo`` loop all call these
functions, so what RL trains on and what the tables report come from the same code.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import TYPE_CHECKING, NamedTuple

import torch

from ddmrl.config import SamplerConfig
from ddmrl.config.sampler import sampler_params
from ddmrl.samplers import SAMPLERS
from ddmrl.samplers.schedules import ass_steps
from ddmrl.samplers.trajectory import Trajectory
from ddmrl.tasks.base import Example, Task
from ddmrl.tasks.encoding import completion_mask, encode_prompts

if TYPE_CHECKING:
    from ddmrl.aux_policies.base import AuxPolicy, AuxTrace


class Rollouts(NamedTuple):
    """N = len(examples) * G completions, grouped consecutively by prompt.

    prompt_ids [N, P], completion_ids [N, L], completion_mask [N, L] (answer + first EOS),
    reveal_step [N, L] (the sampler step that committed each token), texts (decoded completions), nfe,
    trajectory (every step's state, prediction and confidence, ``ddmrl.samplers.trajectory``; None unless recorded).
    aux: what an auxiliary policy did (``ddmrl.aux_policies.base.AuxTrace``: its inputs, actions and their log-probs
    per step), None without one. hints [N, L]: positions clamped to ground-truth tokens while the row was sampled
    (IGPO's inpainted rows, ``ddmrl.augmenters``); None when no rollout augmenter ran. tree: the branching of a
    tree of rollouts (:class:`Tree`, ``rollout``'s ``branching``), None for independent ones.
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
    tree: Tree | None = None


class Tree(NamedTuple):
    """Rollouts sampled as a tree (d-TreeRPO, Pan et al. 2025, arXiv 2512.09675): every prompt's state is copied
    ``branching[0]`` times and each copy continued to sampler step ``steps[0]``, every state reached there copied
    ``branching[1]`` times and continued to ``steps[1]``, and so on to the end of the schedule. Each prompt's
    prod(branching) leaves are its rows, in depth-first order: rows i and j share their states up to ``steps[d]``
    iff i // prod(branching[d + 1:]) == j // prod(branching[d + 1:]).

    branching: the children of a node at each depth (the root's first).
    steps: the sampler steps at which the depths end, the last one the schedule's total.
    """

    branching: tuple[int, ...]
    steps: tuple[int, ...]


def tree_steps(total: int, depth: int) -> tuple[int, ...]:
    """The sampler steps at which a tree of ``depth`` levels branches: d-TreeRPO's N / s, 2 N / s, ..., N (its
    ``branch_points`` counted from the start, ``int`` as its release rounds).

    >>> tree_steps(128, 2), tree_steps(10, 3)
    ((64, 128), (3, 6, 10))
    """
    return tuple(int(k * total / depth) for k in range(1, depth + 1))


def sampler_steps(sampler: SamplerConfig, completion_length: int) -> int:
    """``steps: 0`` means d1's protocol, steps = completion length / 2 (two tokens per step); ASS takes
    floor(log2 L)."""
    if sampler.schedule == "ass":
        return ass_steps(completion_length)
    return sampler.steps or max(1, completion_length // 2)


def sampler_kwargs(sampler: SamplerConfig, completion_length: int) -> dict:
    """Keyword arguments of the configured sampler's ``generate``: ``steps`` and ``temperature``, the shared keys its
    module takes (its ``keywords(sampler, steps, completion_length)``), then its own ``options`` with their defaults
    (the ``Params`` of its module). A sampler module declares what it reads; nothing here names a sampler."""
    module = importlib.import_module(SAMPLERS.module(sampler.name))
    kw = {"steps": sampler_steps(sampler, completion_length), "temperature": sampler.temperature}
    if hasattr(module, "keywords"):
        kw |= module.keywords(sampler, kw["steps"], completion_length)
    params = sampler_params(sampler.name)  # the schema's lookup of a sampler's own keys
    if params is not None:
        kw |= dataclasses.asdict(params(**(sampler.options.get(sampler.name) or {})))
    return kw


#: LLaDA's end-of-turn token (id 126348 in LLaDA-8B-Instruct's vocabulary, EOS <|endoftext|> being 126081)
EOT_TOKEN = "<|eot_id|>"


def eot_id(tok) -> int:
    """The id of LLaDA's end-of-turn token in ``tok`` (``confidence_eos_eot_inf``); a clear error where it has none."""
    token_id = tok.convert_tokens_to_ids(EOT_TOKEN)
    if token_id is None or token_id == tok.unk_token_id:
        raise ValueError(f"sampler.confidence_eos_eot_inf: the tokenizer has no {EOT_TOKEN} token")
    return token_id


def token_kwargs(sampler: SamplerConfig, tok, completion_length: int) -> dict:
    """:func:`sampler_kwargs` and the token ids the configured sampler reads from the tokenizer (EOS, LLaDA's EOT)."""
    kw = sampler_kwargs(sampler, completion_length)
    if sampler.eoser or sampler.logits_eos_inf or sampler.confidence_eos_eot_inf:
        kw["eos_id"] = tok.eos_token_id
    if sampler.confidence_eos_eot_inf:
        kw["eot_id"] = eot_id(tok)
    return kw


def sample_ids(
    model, tok, prompt_ids: torch.Tensor, completion_length: int, sampler: SamplerConfig, gen: torch.Generator
) -> torch.Tensor:
    """[N, L] completions of ``prompt_ids`` [N, P] (already encoded, on the model's device) from the configured
    sampler, as :func:`rollout` samples them (an evaluation harness's prompts: ``ddmrl.lmeval``)."""
    kw = token_kwargs(sampler, tok, completion_length)
    out = SAMPLERS[sampler.name](model, prompt_ids, completion_length, mask_id=tok.mask_token_id, generator=gen, **kw)
    return out.completion_ids


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
    branching: tuple[int, ...] = (),
) -> Rollouts:
    """Sample ``num_generations`` completions for each example (prompts repeated consecutively), on the device of
    the model's parameters (the returned tensors live there too). ``record_trajectory`` (llada sampler): keep every
    step's state, prediction and confidence in ``Rollouts.trajectory``. ``aux_policy``: an auxiliary policy the
    sampler consults at every step (in its ``train()`` mode it explores, in ``eval()`` mode it acts as deployed).
    ``clamp`` [N, L] (llada sampler): each row's starting completion, tokens other than the mask fixed (inpainting);
    the rollouts' ``hints`` mark them. ``tempered_confidence`` (llada sampler): rank by the tempered probability of
    each proposal (MDPO's released sampler, ``ddmrl.samplers.llada.generate``). ``branching`` (llada sampler):
    sample each prompt's ``num_generations`` = prod(branching) rows as a tree (:class:`Tree`, :func:`tree_rollout`)."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    prompts = encode_prompts(tok, task, examples).repeat_interleave(num_generations, 0).to(device)  # [N, P]
    kw = token_kwargs(sampler, tok, task.completion_length)
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
    if branching:
        if record_trajectory or aux_policy is not None or clamp is not None or tempered_confidence:
            raise ValueError("branching (a tree of rollouts): none of record_trajectory, aux_policy, clamp, tempered")
        if math.prod(branching) != num_generations:
            raise ValueError(f"branching {branching}: its leaves per prompt must be num_generations {num_generations}")
        return tree_rollout(model, tok, task, prompts[::num_generations], branching, sampler, gen, kw)
    out = SAMPLERS[sampler.name](
        model, prompts, task.completion_length, mask_id=tok.mask_token_id, generator=gen, **kw
    )
    texts = task.decode(tok, out.completion_ids)
    mask = completion_mask(out.completion_ids, tok.eos_token_id)
    return Rollouts(prompts, out.completion_ids, mask, out.reveal_step, texts, out.nfe, out.trajectory, out.aux, hints)


def tree_rollout(
    model, tok, task: Task, prompts: torch.Tensor, branching: tuple[int, ...], sampler: SamplerConfig, gen, kw: dict
) -> Rollouts:
    """The rows of a tree of rollouts (:class:`Tree`) of each prompt [B, P]: at depth d every state is copied
    ``branching[d]`` times and each copy continued by the llada sampler over the steps of that depth
    (``step_window``, from the copied partial state), so that the copies share the state and differ in the sampler's
    draws afterwards (d-TreeRPO's ``_generate_partial``). Rows are grouped by prompt, leaves in depth-first order."""
    if sampler.name != "llada" or sampler.schedule != "linear" or sampler.remasking == "rcr":
        raise ValueError("branching: the plain llada sampler (linear schedule, no rcr) resumes partial states")
    if sampler.kv_cache != "none" or sampler.parallel != "none":
        raise ValueError("branching: the plain llada sampler (kv_cache none, parallel none) resumes partial states")
    length, mask_id = task.completion_length, tok.mask_token_id
    blocks = -(-length // sampler.block_length)
    steps = tree_steps(max(1, kw["steps"] // blocks) * blocks, len(branching))
    state = torch.full((prompts.shape[0], length), mask_id, dtype=prompts.dtype, device=prompts.device)  # [B, L]
    reveal = torch.full_like(state, -1)
    nfe, start = 0, 0
    for width, end in zip(branching, steps, strict=True):
        prompts, state, reveal = (t.repeat_interleave(width, 0) for t in (prompts, state, reveal))
        out = SAMPLERS[sampler.name](
            model, prompts, length, mask_id=mask_id, generator=gen, clamp=state, step_window=(start, end), **kw
        )
        state, reveal = out.completion_ids, torch.where(out.reveal_step >= 0, out.reveal_step, reveal)
        nfe, start = nfe + out.nfe, end
    texts = task.decode(tok, state)
    mask = completion_mask(state, tok.eos_token_id)
    return Rollouts(prompts, state, mask, reveal, texts, nfe, tree=Tree(tuple(branching), steps))


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
