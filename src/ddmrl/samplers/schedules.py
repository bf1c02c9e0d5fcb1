"""Step schedules and remasking rules of the LLaDA sampler beyond LLaDA's own (each a ``sampler:`` option).

* ASS, the ascending step-size scheduler (Yang et al. 2025, arXiv 2509.23924, released ``get_num_transfer_tokens_ass``
  and ``get_block_sizes``): step i reveals 2^i tokens, so a completion of L tokens takes S = floor(log2 L) steps, the
  last one revealing what is left. With ``blocks`` > 1 the completion is split into blocks of ascending size, the
  last ones decoded in one step each (:func:`ass_layout`).
* EOSER, EOS early rejection (same paper, released ``sampling`` and ``ass_sampling``): the confidence of a proposed
  EOS token is multiplied by gamma(s), rising from ``gamma_min`` to ``gamma_max`` over the steps, so that a
  fully-diffusion decoder does not fill the completion with EOS early (:func:`eos_gamma`).
* RCR, running-confidence remasking (He et al. 2025, arXiv 2508.13148, MDPO's released ``diffusion_generate`` with
  ``rcr=True``): at each step every masked token up to the end of the current block takes its proposal and records
  that proposal's confidence; then the tokens of lowest recorded confidence are re-masked until as many masks are
  left as the block's schedule leaves, so a committed token of low confidence can still be revised
  (:func:`rcr_step`). As in the release, the candidates are the whole completion so far, earlier blocks included;
  only positions never filled (the blocks to come) are protected (``rcr_scope: sequence``, the default). With
  ``rcr_scope: block`` they are the current block's tokens only (ddmrl's rule before 2026-07; with one block the two
  agree). Two details of the release are not copied: it protects a never-filled position by giving it confidence 1,
  so a committed token of confidence exactly 1 ties with it (here never-filled positions are never candidates), and
  it keeps the running confidences in float32 (here float64, which holds any float32 value exactly).
"""

from __future__ import annotations

import torch

SCHEDULES = ("linear", "ass")
RCR_SCOPES = ("sequence", "block")
#: EOSER's gamma_min when none is given: the released ``sampling`` (linear steps) and ``ass_sampling`` defaults
EOS_MIN_GAMMA = {"linear": 0.4, "ass": 0.01}


def ass_steps(length: int) -> int:
    """S = floor(log2 L), at least one step (ASS: ``int(log2(gen_length))``).

    >>> [ass_steps(n) for n in (1, 2, 3, 20, 256)]
    [1, 1, 1, 4, 8]
    """
    return max(1, length.bit_length() - 1)


def ass_layout(length: int, blocks: int = 1) -> list[tuple[int, int, list[int]]]:
    """ASS's blocks over completion positions: (start, end, tokens revealed at each of the block's steps).

    Steps are numbered 0..S-1 over the whole completion. Step i < S - 1 reveals 2^i tokens, step S - 1 the rest.
    One block holds every step. With ``blocks`` = B > 1 (the released ``block_num``), blocks are peeled off from the
    end: the last holds the L - 2^(S-1) + 1 tokens of step S - 1, the B - 2 before it the 2^(S-2), 2^(S-3), ...
    tokens of one step each, and the first block the remaining steps 0..S-B (2^(S-B+1) - 1 tokens).

    >>> ass_layout(20)
    [(0, 20, [1, 2, 4, 13])]
    >>> ass_layout(16, 3)
    [(0, 3, [1, 2]), (3, 7, [4]), (7, 16, [9])]
    """
    s = ass_steps(length)
    if not 1 <= blocks <= s:
        raise ValueError(f"ASS with {blocks} blocks: a completion of {length} tokens has {s} steps; use 1..{s} blocks")
    counts = [2**i for i in range(s - 1)] + [length - (2 ** (s - 1) - 1)]
    first = s - blocks + 1  # steps of the first block; every later block is one step revealing all of it
    out, start = [], 0
    for block in [counts[:first], *([c] for c in counts[first:])]:
        out.append((start, start + sum(block), block))
        start += sum(block)
    return out


def eos_gamma(step: int, steps: int, schedule: str, gamma_min: float, gamma_max: float = 1.0) -> float:
    """EOSER's factor on the confidence of EOS proposals at step ``step`` (0-based) of ``steps``.

    linear: gamma_min + (gamma_max - gamma_min) step / (steps - 1); ass: the same with the fraction
    (2^(step + 1) - 1) / 2^steps (the share of tokens revealed after the step); gamma_max when ``steps`` is 1.

    >>> eos_gamma(0, 5, "linear", 0.4), eos_gamma(2, 5, "linear", 0.4), eos_gamma(4, 5, "linear", 0.4)
    (0.4, 0.7, 1.0)
    >>> round(eos_gamma(0, 4, "ass", 0.01), 6), round(eos_gamma(3, 4, "ass", 0.01), 6)
    (0.071875, 0.938125)
    """
    if steps <= 1:
        return gamma_max
    if schedule == "linear":
        frac = min(max(step, 0), steps - 1) / (steps - 1)
    elif schedule == "ass":
        frac = (2 ** (step + 1) - 1) / 2**steps
    else:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {SCHEDULES}")
    return gamma_min + (gamma_max - gamma_min) * frac


def rcr_step(
    block: torch.Tensor, proposal: torch.Tensor, conf: torch.Tensor, running: torch.Tensor, keep_masked: torch.Tensor,
    mask_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """One step of running-confidence remasking on a span of tokens (the completion up to the end of the current
    block, or the block alone).

    Args:
        block: [N, K] the span's tokens before the step (``mask_id`` where masked).
        proposal, conf: [N, K] the step's proposals and their confidences.
        running: [N, K] the confidence each token had when it was last committed.
        keep_masked: [N] how many of the span's tokens the schedule leaves masked after this step.
    Returns:
        the span after the step [N, K], the updated running confidences, and the tokens committed at this step and
        kept (bool [N, K]). Ties in confidence re-mask the earlier position first.
    """
    masked = block == mask_id
    block = torch.where(masked, proposal, block)  # every masked token takes its proposal
    running = torch.where(masked, conf, running)  # ... and records its confidence
    order = running.argsort(dim=1, stable=True).argsort(dim=1)  # [N, K] 0 = lowest running confidence
    remask = order < keep_masked[:, None]
    return block.masked_fill(remask, mask_id), running, masked & ~remask
