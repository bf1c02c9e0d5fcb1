"""LLaDA's semi-autoregressive sampler (Nie et al. 2025, ``generate.py``; baselines.md section 2.1).

The completion starts fully masked and is filled block by block, left to right. Inside a block, each of
``steps_per_block`` steps runs one bidirectional forward pass, proposes a token for every masked position
(Gumbel-max sampling at ``temperature``, in float64 as LLaDA advises), and commits the ``k`` proposals with the
highest confidence (``low_confidence``: the untempered probability of the proposal) or ``k`` random ones
(``random``). ``k`` follows LLaDA's linear schedule: the masked count of the block split evenly over the steps,
the first ``remainder`` steps taking one more. Committed tokens are never re-masked.

Deviation from LLaDA: a completion length that is not a multiple of ``block_length`` gets a shorter last block
(LLaDA asserts divisibility), and ``steps`` that do not divide into the blocks use ``max(1, steps // blocks)``
per block, as d1 does.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class SampleOutput(NamedTuple):
    """Result of one sampling call.

    completion_ids: [N, L] generated tokens.
    reveal_step: [N, L] the global step (0-based, counted across blocks) at which each token was committed.
    nfe: number of model evaluations (forward passes, counting both CFG branches).
    """

    completion_ids: torch.Tensor
    reveal_step: torch.Tensor
    nfe: int


def init_canvas(prompt_ids: torch.Tensor, completion_length: int, mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The starting state of every sampler: [N, P + L] prompt then L mask tokens, and reveal steps [N, L] of -1."""
    shape, device = (prompt_ids.shape[0], completion_length), prompt_ids.device
    masks = torch.full(shape, mask_id, dtype=prompt_ids.dtype, device=device)
    return torch.cat([prompt_ids, masks], dim=1), torch.full(shape, -1, dtype=torch.long, device=device)


def transfer_schedule(num_masked: torch.Tensor, steps: int) -> torch.Tensor:
    """Tokens to commit per step: [N] masked counts -> [N, steps], LLaDA's ``get_num_transfer_tokens``.

    >>> transfer_schedule(torch.tensor([5, 4]), 2).tolist()
    [[3, 2], [2, 2]]
    """
    base = num_masked // steps  # [N]
    rem = num_masked % steps  # [N]
    return base[:, None] + (torch.arange(steps, device=num_masked.device)[None, :] < rem[:, None]).long()


def gumbel_argmax(logits: torch.Tensor, temperature: float, gen: torch.Generator | None) -> torch.Tensor:
    """Sample from softmax(logits / temperature) by Gumbel-max in float64; ``temperature == 0`` is argmax."""
    if temperature == 0:
        return logits.argmax(-1)
    u = uniform(logits.shape, logits.device, gen).clamp_min(1e-300)
    return (logits.double() / temperature - torch.log(-torch.log(u))).argmax(-1)


def uniform(shape, device: torch.device, gen: torch.Generator | None) -> torch.Tensor:
    """U[0, 1) in float64 drawn from ``gen`` on the generator's own device, then moved to ``device`` (a CPU
    generator gives the same numbers whatever device the model runs on)."""
    where = gen.device if gen is not None else device
    return torch.rand(shape, dtype=torch.float64, device=where, generator=gen).to(device)


def guided_logits(model, x: torch.Tensor, prompt_len: int, mask_id: int, cfg_scale: float) -> torch.Tensor:
    """Logits of ``model`` at ``x`` [N, T]; with ``cfg_scale > 0``, LLaDA's guidance ``u + (w + 1)(c - u)``
    where the unconditional branch has every prompt position masked."""
    if cfg_scale == 0:
        return model(x).logits
    uncond = x.clone()
    uncond[:, :prompt_len] = mask_id
    cond_logits, uncond_logits = model(torch.cat([x, uncond])).logits.chunk(2)
    return uncond_logits + (cfg_scale + 1) * (cond_logits - uncond_logits)


@torch.no_grad()
def generate(
    model,
    prompt_ids: torch.Tensor,
    completion_length: int,
    *,
    mask_id: int,
    block_length: int,
    steps: int,
    temperature: float = 0.0,
    remasking: str = "low_confidence",
    cfg_scale: float = 0.0,
    generator: torch.Generator | None = None,
) -> SampleOutput:
    """Sample completions of ``completion_length`` tokens for ``prompt_ids`` [N, P] (left-padded)."""
    p = prompt_ids.shape[1]
    x, reveal = init_canvas(prompt_ids, completion_length, mask_id)
    num_blocks = -(-completion_length // block_length)
    steps_per_block = max(1, steps // num_blocks)
    step, nfe = 0, 0
    for b in range(num_blocks):
        lo, hi = p + b * block_length, p + min(completion_length, (b + 1) * block_length)
        schedule = transfer_schedule((x[:, lo:hi] == mask_id).sum(1), steps_per_block)  # [N, S]
        for s in range(steps_per_block):
            logits = guided_logits(model, x, p, mask_id, cfg_scale).float()  # [N, T, V]
            nfe += 2 if cfg_scale else 1
            never = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
            never[mask_id] = True  # never propose the mask token itself
            logits = logits.masked_fill(never, -torch.inf)
            proposal = gumbel_argmax(logits, temperature, generator)  # [N, T]
            if remasking == "low_confidence":
                conf = torch.softmax(logits, -1).gather(-1, proposal[..., None]).squeeze(-1).double()
            elif remasking == "random":
                conf = uniform(proposal.shape, proposal.device, generator)
            else:
                raise ValueError(f"unknown remasking '{remasking}'; choose low_confidence or random")
            selectable = torch.zeros_like(x, dtype=torch.bool)
            selectable[:, lo:hi] = x[:, lo:hi] == mask_id
            conf = conf.masked_fill(~selectable, -torch.inf)
            rank = conf.argsort(1, descending=True).argsort(1)  # [N, T] 0 = most confident
            commit = (rank < schedule[:, s : s + 1]) & selectable
            x = torch.where(commit, proposal, x)
            reveal[commit[:, p:]] = step
            step += 1
    return SampleOutput(x[:, p:], reveal, nfe)
