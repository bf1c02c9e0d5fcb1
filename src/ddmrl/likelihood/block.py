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
  row's first real token), pads are never attended (``ddmrl.samplers.block.block_attention``).

So each noised block sees exactly what the sampler's pass over that block sees (the finished blocks as the cache,
the block itself): :func:`block_token_logps` equals running each block's noisy tokens against its clean context
separately (tested), in one pass over 2T - c positions instead of one per block. The model is called through the
block-diffusion protocol (``ddmrl.samplers.block.BlockModel``) with ``cache=None``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ddmrl.samplers.block import BlockModel, block_index, positions


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
) -> BlockInput:
    """The [noised | clean] input of ``prompt_ids`` [N, P] (left-padded, ``prompt_mask`` [N, P] 0 at pads), the clean
    ``completion_ids`` [N, L] and its masked ``view_ids`` [N, L] (see the module docstring)."""
    n, p = prompt_ids.shape
    t = p + completion_ids.shape[1]
    dev = prompt_ids.device
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
    inp = block_diffusion_input(
        input_ids[:, :p], completion_ids, input_ids[:, p:], block_length=block_length, align=align,
        prompt_mask=prompt_mask,
    )  # fmt: skip
    logp = torch.log_softmax(noised_logits(model, inp, p).float(), -1)  # [N, L, V]
    return logp.gather(-1, completion_ids[..., None]).squeeze(-1)


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
