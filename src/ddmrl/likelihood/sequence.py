"""Sequence log-likelihoods log p(continuation | context) of a masked diffusion model, as evaluation harnesses ask
for them (``ddmrl.lmeval``: lm-evaluation-harness's ``loglikelihood``).

A masked diffusion model has no tractable likelihood; three estimates, each over one (context, continuation) pair:

* :func:`mc_elbo`: LLaDA's Monte Carlo estimate of the ELBO (Nie et al. 2025, Algorithm 3; their
  ``get_log_likelihood.py``): each view masks l of the L continuation tokens, l uniform on 1..L (stratified over a
  batch of views as LLaDA's ``forward_process``), the masked positions chosen uniformly; the view's term is
  (L / l) sum over its masked tokens of log p(o_k | view). The mean over views is unbiased for :func:`exact_elbo`.
* :func:`exact_elbo`: the same ELBO, every mask enumerated (2^L - 1 views: short continuations only), weight
  1 / (l C(L, l)) for a mask of l tokens.
* :func:`left_to_right`: the exact log-probability of the continuation under decoding one token per step from left
  to right, sum_k log p(o_k | o_<k, masks after): a proper distribution over continuations (L forward passes), the
  exact likelihood of a block-diffusion model with block length 1 (an autoregressive model).

A block-diffusion model (``block_length`` given, ``ddmrl.samplers.block.BlockModel``) reads each noised block against
the clean blocks before it (``ddmrl.likelihood.block``): its ELBO is the sum over blocks of each block's own ELBO, so
every block is masked on its own (its own l) in every view.
"""

from __future__ import annotations

import itertools
import math

import torch

from ddmrl.likelihood import token_logps
from ddmrl.likelihood.block import block_diffusion_input, noised_logits
from ddmrl.samplers.base import guided_logits

#: the most continuation tokens (per block) :func:`exact_elbo` enumerates the masks of
MAX_ENUMERATED = 16


def spans(length: int, block_length: int | None) -> list[tuple[int, int]]:
    """The independently masked segments of a continuation of ``length`` tokens: the whole of it, or its blocks
    (aligned at the continuation, as ``ddmrl.likelihood.block`` reads them)."""
    step = block_length or length
    return [(lo, min(lo + step, length)) for lo in range(0, length, step)]


def stratified_masks(n: int, span: tuple[int, int], length: int, gen: torch.Generator) -> torch.Tensor:
    """[n, length] bool: ``n`` masks of the positions in ``span`` (LLaDA's ``forward_process``): mask sizes l
    stratified over 1..S (S = the span's length) from one uniform start, the positions of each drawn uniformly."""
    lo, hi = span
    s = hi - lo
    k = int(torch.randint(1, s + 1, (), generator=gen))
    sizes = torch.round(torch.linspace(float(k), k + (n - 1) * (s / n), steps=n)).long()  # [n]
    sizes = (sizes - 1) % s + 1
    masks = torch.zeros(n, length, dtype=torch.bool)
    for i in range(n):
        masks[i, lo + torch.randperm(s, generator=gen)[: int(sizes[i])]] = True
    return masks


def view_logps(
    model, prompt_ids: torch.Tensor, continuation: torch.Tensor, masks: torch.Tensor, mask_id: int,
    block_length: int | None = None, cfg_scale: float = 0.0,
) -> torch.Tensor:  # fmt: skip
    """[V, L] log p(o_k | view) of the ``continuation`` [L] at each view of ``masks`` [V, L] (True: masked) after
    ``prompt_ids`` [P] (one forward pass, two with guidance ``cfg_scale``; ``ddmrl.likelihood.token_logps``)."""
    v = masks.shape[0]
    dev = next((p.device for p in model.parameters()), torch.device("cpu"))
    clean = continuation.to(dev).expand(v, -1)  # [V, L]
    view = torch.where(masks.to(dev), torch.full_like(clean, mask_id), clean)
    inputs = torch.cat([prompt_ids.to(dev).expand(v, -1), view], 1)  # [V, P + L]
    return (
        token_logps(model, inputs, clean, cfg_scale=cfg_scale, mask_id=mask_id, block_length=block_length)
        .float()
        .cpu()
    )


def elbo_terms(logps: torch.Tensor, masks: torch.Tensor, block_length: int | None) -> torch.Tensor:
    """[V] each view's term sum over spans of (S / l) sum_{masked k in span} log p(o_k | view) (``logps``,
    ``masks`` [V, L])."""
    out = torch.zeros(logps.shape[0], dtype=torch.float64)
    for lo, hi in spans(logps.shape[1], block_length):
        m = masks[:, lo:hi]
        count = m.sum(1).clamp_min(1)  # [V]
        out += (hi - lo) / count.double() * (logps[:, lo:hi].double() * m).sum(1)
    return out


@torch.no_grad()
def mc_elbo(
    model, prompt_ids: torch.Tensor, continuation: torch.Tensor, mask_id: int, *, samples: int, batch_size: int,
    gen: torch.Generator, block_length: int | None = None, cfg_scale: float = 0.0,
) -> tuple[float, float]:  # fmt: skip
    """LLaDA's Monte Carlo ELBO of ``continuation`` [L] after ``prompt_ids`` [P] from ``samples`` views, drawn in
    batches of ``batch_size`` (stratified within a batch); returns (estimate, its standard error by the
    independent-views formula, which the stratification makes conservative)."""
    length, terms = continuation.shape[0], []
    for lo in range(0, samples, batch_size):
        n = min(batch_size, samples - lo)
        masks = torch.zeros(n, length, dtype=torch.bool)
        for span in spans(length, block_length):
            masks |= stratified_masks(n, span, length, gen)
        logps = view_logps(model, prompt_ids, continuation, masks, mask_id, block_length, cfg_scale)  # [n, L]
        terms.append(elbo_terms(logps, masks, block_length))
    t = torch.cat(terms)  # [samples]
    se = float(t.std() / math.sqrt(len(t))) if len(t) > 1 else float("nan")
    return float(t.mean()), se


def all_masks(span: tuple[int, int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every non-empty mask of ``span``'s positions ([2^S - 1, length] bool) and its ELBO weight 1 / (l C(S, l))."""
    lo, hi = span
    s = hi - lo
    if s > MAX_ENUMERATED:
        raise ValueError(f"exact_elbo: {s} continuation tokens to enumerate the masks of (at most {MAX_ENUMERATED})")
    rows, weights = [], []
    for bits in itertools.product((False, True), repeat=s):
        l = sum(bits)  # noqa: E741
        if l:
            row = torch.zeros(length, dtype=torch.bool)
            row[lo:hi] = torch.tensor(bits)
            rows.append(row)
            weights.append(1.0 / (l * math.comb(s, l)))
    return torch.stack(rows), torch.tensor(weights, dtype=torch.float64)


@torch.no_grad()
def exact_elbo(
    model, prompt_ids: torch.Tensor, continuation: torch.Tensor, mask_id: int, *, batch_size: int = 64,
    block_length: int | None = None, cfg_scale: float = 0.0,
) -> float:  # fmt: skip
    """The ELBO :func:`mc_elbo` estimates, every mask of every span enumerated: sum over the spans and their masks m
    (l tokens of S) of sum_{k in m} log p(o_k | view m) / (l C(S, l)), i.e. the mean over l of the mean over the
    masks of l tokens of (S / l) sum_{k in m} log p(o_k | view m)."""
    length, total = continuation.shape[0], 0.0
    for span in spans(length, block_length):  # a block's terms do not depend on the masks of the others
        masks, weights = all_masks(span, length)
        for lo in range(0, masks.shape[0], batch_size):
            m = masks[lo : lo + batch_size]
            # other spans clean: they are read in full (block diffusion: a block sees earlier blocks clean anyway)
            lp = view_logps(model, prompt_ids, continuation, m, mask_id, block_length, cfg_scale)  # [B, L]
            total += float((weights[lo : lo + batch_size] * (lp.double() * m).sum(1)).sum())
    return total


@torch.no_grad()
def left_to_right(
    model, prompt_ids: torch.Tensor, continuation: torch.Tensor, mask_id: int, *, batch_size: int = 64,
    block_length: int | None = None, cfg_scale: float = 0.0,
) -> tuple[float, bool]:  # fmt: skip
    """sum_k log p(o_k | prompt, o_<k, masks from k on) of ``continuation`` [L] (view k masks positions k..L-1), and
    whether every o_k is the argmax of its distribution (lm-eval's ``is_greedy``; a tie counts as the argmax)."""
    length = continuation.shape[0]
    masks = torch.arange(length)[None, :] >= torch.arange(length)[:, None]  # [L, L]
    total, greedy = 0.0, True
    for lo in range(0, length, batch_size):
        m = masks[lo : lo + batch_size]
        rows, k = torch.arange(m.shape[0]), torch.arange(lo, lo + m.shape[0])
        logp = view_log_softmax(model, prompt_ids, continuation, m, mask_id, block_length, cfg_scale)[rows, k]
        own = logp.gather(-1, continuation[k, None]).squeeze(-1)  # [B]
        total += float(own.double().sum())
        greedy = greedy and bool((own >= logp.max(-1).values).all())
    return total, greedy


def view_log_softmax(
    model, prompt_ids: torch.Tensor, continuation: torch.Tensor, masks: torch.Tensor, mask_id: int,
    block_length: int | None = None, cfg_scale: float = 0.0,
) -> torch.Tensor:  # fmt: skip
    """[V, L, vocab] float32 log-softmax at the continuation positions of each view of ``masks`` [V, L] (guided with
    ``cfg_scale``, LLaDA's; a block-diffusion model: each noised block against the clean earlier ones,
    ``ddmrl.likelihood.block``, no guidance)."""
    v, p = masks.shape[0], prompt_ids.shape[0]
    dev = next((q.device for q in model.parameters()), torch.device("cpu"))
    clean = continuation.to(dev).expand(v, -1)  # [V, L]
    view = torch.where(masks.to(dev), torch.full_like(clean, mask_id), clean)
    prompt = prompt_ids.to(dev).expand(v, -1)  # [V, P]
    if block_length is None:
        logits = guided_logits(model, torch.cat([prompt, view], 1), p, mask_id, cfg_scale)[:, p:]
    elif cfg_scale:
        raise ValueError("cfg_scale: a block-diffusion model has no classifier-free guidance")
    else:
        inp = block_diffusion_input(prompt, clean, view, block_length=block_length)
        logits = noised_logits(model, inp, p)
    return torch.log_softmax(logits.float(), -1).cpu()
