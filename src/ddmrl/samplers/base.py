"""What every sampler shares: its output, the starting canvas, seeded float64 draws (Gumbel-max) and LLaDA's
classifier-free guidance. Each sampler imports it; it imports no sampler."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from ddmrl.samplers.trajectory import Trajectory

if TYPE_CHECKING:
    from ddmrl.aux_policies.base import AuxTrace


class SampleOutput(NamedTuple):
    """Result of one sampling call.

    completion_ids: [N, L] generated tokens.
    reveal_step: [N, L] the global step (0-based, counted across blocks) at which each token was committed.
    nfe: number of model evaluations (forward passes, counting both CFG branches).
    trajectory: every step's state, prediction and confidence (``record_trajectory=True``), else None.
    aux: what an auxiliary policy did (``ddmrl.aux_policies.base.AuxTrace``), None without one.
    """

    completion_ids: torch.Tensor
    reveal_step: torch.Tensor
    nfe: int
    trajectory: Trajectory | None = None
    aux: AuxTrace | None = None


def init_canvas(prompt_ids: torch.Tensor, completion_length: int, mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The starting state of every sampler: [N, P + L] prompt then L mask tokens, and reveal steps [N, L] of -1."""
    shape, device = (prompt_ids.shape[0], completion_length), prompt_ids.device
    masks = torch.full(shape, mask_id, dtype=prompt_ids.dtype, device=device)
    return torch.cat([prompt_ids, masks], dim=1), torch.full(shape, -1, dtype=torch.long, device=device)


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
    where the unconditional branch has every prompt position masked (both branches in one forward pass)."""
    if cfg_scale == 0:
        return model(x).logits
    return combine_guidance(model(with_unconditional(x, prompt_len, mask_id)).logits, cfg_scale)


def with_unconditional(x: torch.Tensor, prompt_len: int, mask_id: int) -> torch.Tensor:
    """[2N, T]: the rows of ``x`` [N, T], then the same rows with every prompt position masked."""
    uncond = x.clone()
    uncond[:, :prompt_len] = mask_id
    return torch.cat([x, uncond])


def combine_guidance(logits: torch.Tensor, cfg_scale: float) -> torch.Tensor:
    """[2N, ..., V] conditional then unconditional logits -> [N, ..., V] guided ``u + (w + 1)(c - u)``."""
    cond_logits, uncond_logits = logits.chunk(2)
    return uncond_logits + (cfg_scale + 1) * (cond_logits - uncond_logits)
