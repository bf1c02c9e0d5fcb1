"""Block diffusion's training input and the token log-probabilities of a view under it (SDAR's ``block_diff_mask``,
Cheng et al. 2025; Arriola et al. 2025, "Block Diffusion", section 3.2; TraceRL's ``make_basic_block_attention``,
Gen-Verse/dLLM-RL ``train/rl_sdar.py``).

A block-diffusion model predicts the masked tokens of block b from the noised block b and the *clean* blocks before
it. All blocks are trained in one forward pass over the concatenation [noised | clean]:

* the noised part is the canvas from the first block that holds a completion position to the end (the completion's
  view, preceded under ``align: sequence`` by the prompt's tail that shares its block); the clean part is the whole
  canvas, prompt and clean completion;
* a noised query of block b attends the noised keys of block b (bidirectionally) and the clean keys of blocks
  before b; a clean query attends the clean keys of its own and earlier blocks (block-causal), never a noised key;
* both copies keep the canvas positions (the noised token at canvas position t has position id t, counted from the
  row's first real token), pads are never attended (``ddmrl.samplers.block.block_attention``);
* under ``align: sequence`` with a ``prompt_mask``, each row's blocks count from its first real token, as the block
  sampler's (``ddmrl.samplers.block.row_shifts``): the rows are moved left by their pad count modulo the block
  before the input is built, and each row's log-probs read back from where its completion then starts
  (:func:`block_token_logps`).

So each noised block sees exactly what the sampler's pass over that block sees (the finished blocks as the cache,
the block itself): :func:`block_token_logps` equals running each block's noisy tokens against its clean context
separately (tested), in one pass over 2T - c positions instead of one per block. The model is called through the
block-diffusion protocol (``ddmrl.samplers.block.BlockModel``) with ``cache=None``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ddmrl.samplers.block import BlockModel, block_index, positions, row_shifts, shift_left


class BlockInput(NamedTuple):
    """The [noised | clean] training input: ``input_ids`` and ``position_ids`` [N, S], ``attention`` [N, S, S] (True:
    may attend), S = (T - start) + T; the noised part covers canvas positions ``start`` .. T - 1."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention: torch.Tensor
    start: int


def block_diffusion_input(
    prompt_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    view_ids: torch.Tensor,
    *,
    block_length: int,
    align: str = "completion",
    prompt_mask: torch.Tensor | None = None,
    valid: torch.Tensor | None = None,
) -> BlockInput:
    """The [noised | clean] input of ``prompt_ids`` [N, P] (left-padded, ``prompt_mask`` [N, P] 0 at pads), the clean
    ``completion_ids`` [N, L] and its masked ``view_ids`` [N, L] (see the module docstring). ``valid`` [N, P + L]
    (False: never attended) replaces ``prompt_mask`` where positions after P are not all real (a moved row's void)."""
    n, p = prompt_ids.shape
    t = p + completion_ids.shape[1]
    dev = prompt_ids.device
    if valid is None:
        valid = torch.ones(n, t, dtype=torch.bool, device=dev)
        if prompt_mask is not None:
            valid[:, :p] = prompt_mask.bool()
    blocks = block_index(p, t, block_length, align).to(dev)  # [T]
    # the first position of the block holding position p (arithmetic: no tensor read, so ddmrl.plan traces it)
    start = p - (p - (p if align == "completion" else 0)) % block_length if t > p else t
    clean = torch.cat([prompt_ids, completion_ids], 1)  # [N, T]
    noised = torch.cat([prompt_ids[:, start:], view_ids], 1)[:, max(0, start - p) :]  # [N, T - start]
    qb = torch.cat([blocks[start:], blocks])  # [S] every position's block
    is_clean = torch.arange(qb.shape[0], device=dev) >= t - start  # [S]
    same, earlier = qb[None, :] == qb[:, None], qb[None, :] < qb[:, None]  # [S(query), S(key)]
    struct = torch.where(
        is_clean[:, None],
        is_clean[None, :] & (same | earlier),  # clean query: clean keys, block-causal
        (~is_clean[None, :] & same) | (is_clean[None, :] & earlier),  # noised query: its block, earlier clean ones
    )
    key_valid = torch.cat([valid[:, start:], valid], 1)  # [N, S]
    allowed = struct[None] & key_valid[:, None, :]
    attention = torch.where(allowed.any(-1, keepdim=True), allowed, struct[None])  # a pad among pads: see its own
    pos = positions(valid)
    return BlockInput(torch.cat([noised, clean], 1), torch.cat([pos[:, start:], pos], 1), attention, start)


def noised_logits(model: BlockModel, inp: BlockInput, prompt_length: int) -> torch.Tensor:
    """[N, L, V] the logits at the noised completion positions of a :class:`BlockInput` (one forward pass)."""
    logits = model.block_forward(inp.input_ids, inp.position_ids, inp.attention, None, False)[0]  # [N, S, V]
    t = (inp.input_ids.shape[1] + inp.start) // 2  # S = (T - start) + T
    return logits[:, prompt_length - inp.start : t - inp.start]


def block_token_logps(
    model: BlockModel,
    input_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    *,
    block_length: int,
    align: str = "completion",
    prompt_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """log p(o_k | noised block of k, clean earlier blocks) [N, L] of the clean ``completion_ids`` [N, L] at the view
    ``input_ids`` [N, P + L] (prompt then the masked completion, as ``ddmrl.likelihood.token_logps`` takes it): the
    block-diffusion counterpart of ``token_logps``, the log-softmax in float32. Callers weight the masked positions
    (every position gets a value; an unmasked one is read from its own clean token)."""
    p = input_ids.shape[1] - completion_ids.shape[1]
    if align == "sequence" and prompt_mask is not None:
        shift = row_shifts(prompt_mask.bool(), block_length, align)  # [N]
        if bool(shift.any()):  # a tensor read: only for padded rows on the sequence grid
            logits = _shifted_logits(model, input_ids, completion_ids, prompt_mask, shift, block_length)
            return torch.log_softmax(logits.float(), -1).gather(-1, completion_ids[..., None]).squeeze(-1)
    inp = block_diffusion_input(
        input_ids[:, :p], completion_ids, input_ids[:, p:], block_length=block_length, align=align,
        prompt_mask=prompt_mask,
    )  # fmt: skip
    logp = torch.log_softmax(noised_logits(model, inp, p).float(), -1)  # [N, L, V]
    return logp.gather(-1, completion_ids[..., None]).squeeze(-1)


def _shifted_logits(
    model: BlockModel,
    input_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    shift: torch.Tensor,
    block_length: int,
) -> torch.Tensor:
    """[N, L, V] the noised completion logits under ``align: sequence`` with each row's blocks counted from its first
    real token: view, clean canvas and validity moved left by ``shift`` [N] (``ddmrl.samplers.block.shift_left``; the
    freed end is a never-attended void), the input built with the split at P - max(shift) (each row's positions after
    it: its prompt's tail, its completion, its void), each row's completion read back from P - shift."""
    n, t = input_ids.shape
    length, p = completion_ids.shape[1], t - completion_ids.shape[1]
    valid = torch.ones(n, t, dtype=torch.bool, device=input_ids.device)
    valid[:, :p] = prompt_mask.bool()
    view, valid = shift_left(input_ids, shift, 0), shift_left(valid, shift, False)  # [N, T]
    clean = shift_left(torch.cat([input_ids[:, :p], completion_ids], 1), shift, 0)  # [N, T]
    split = p - int(shift.max())
    inp = block_diffusion_input(
        clean[:, :split], clean[:, split:], view[:, split:], block_length=block_length, align="sequence", valid=valid
    )
    logits = noised_logits(model, inp, split)  # [N, T - split, V]
    at = (p - shift - split)[:, None] + torch.arange(length, device=logits.device)  # [N, L]
    return logits.gather(1, at[..., None].expand(-1, -1, logits.shape[-1]))


def sequence_logits(
    model: BlockModel,
    noised: torch.Tensor,
    clean: torch.Tensor,
    start: int,
    *,
    block_length: int,
    align: str = "completion",
) -> torch.Tensor:
    """[N, T, V] logits of a noised copy ``noised`` [N, T] of ``clean`` [N, T] whose first ``start`` positions are a
    never-masked prompt (``ddmrl.training.mdm.mdm_loss``'s ``logits_fn``: pre-training has ``start`` 0, SFT the
    prompt length); positions before ``start`` get zeros."""
    inp = block_diffusion_input(
        clean[:, :start], clean[:, start:], noised[:, start:], block_length=block_length, align=align
    )
    logits = noised_logits(model, inp, start)  # [N, T - start, V]
    return torch.cat([logits.new_zeros(logits.shape[0], start, logits.shape[-1]), logits], 1)
