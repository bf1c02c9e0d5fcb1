"""LLaDA's semi-autoregressive sampler (Nie et al. 2025, ML-GSAI/LLaDA ``generate.py``).

The completion starts fully masked and is filled block by block, left to right. Inside a block, each of
``steps_per_block`` steps runs one bidirectional forward pass, proposes a token for every masked position
(Gumbel-max sampling at ``temperature``, in float64 as LLaDA advises), and commits the ``k`` proposals with the
highest confidence (``low_confidence``: the untempered probability of the proposal) or ``k`` random ones
(``random``). ``k`` follows LLaDA's linear schedule: the masked count of the block split evenly over the steps,
the first ``remainder`` steps taking one more. Committed tokens are never re-masked.

The confidence is a softmax in ``confidence_dtype``: float64 by default, as LLaDA's ``generate`` until June 2025
and Fast-dLLM's ``get_transfer_index``; float32 is LLaDA's current ``generate`` and d1's ``eval/generate.py`` (the
logits' dtype, float32 under autocast). On a confident model float32 rounds many probabilities to exactly 1, and
the ranking then falls to the tie order instead of the true values. LLaDA's ``logits_eos_inf`` (EOS never proposed)
and ``confidence_eos_eot_inf`` (its released effect: the confidence softmax without EOT, and without EOS at
temperature 0, so such proposals score 0) are switches of the same names, off by default.

Deviations from LLaDA: a completion length that is not a multiple of ``block_length`` gets a shorter last block
(LLaDA asserts divisibility), ``steps`` that do not divide into the blocks use ``max(1, steps // blocks)`` per
block, as d1 does, and the mask token is never proposed (it is left out of the proposals and of the softmax; a
released checkpoint gives it no probability to speak of).

Fast-dLLM's accelerations (Wu et al. 2025), each off by default:

* ``kv_cache``: ``prefix`` or ``dual``, the block-wise approximate KV cache (``ddmrl.samplers.cache``): the block's
  first step evaluates the whole sequence and keeps every layer's keys and values, its later steps evaluate only
  the block and what follows it (prefix) or only the block (dual);
* ``parallel``: ``threshold`` or ``factor``, confidence-aware parallel decoding (``ddmrl.samplers.parallel``): a
  step also commits the masked tokens of the block the rule picks, and a block ends as soon as it has no mask left.
  ``parallel_floor`` sets what a step commits at least: ``schedule`` (the default) LLaDA's schedule for the block's
  remaining masks over its remaining steps, ceil(masked / remaining), so a block never takes more steps than without
  the rule; ``one`` one token, ``steps`` ignored: Fast-dLLM's released rule. The two agree only when ``steps`` is
  the completion length; at Fast-dLLM's own setting, steps = L / block_length, ``schedule`` commits each block in
  one step. ``factor_rule: fast_dllm_release`` reproduces the off-by-one of Fast-dLLM's factor code.

With either option on, the loop works on the block's positions only: the Gumbel noise is drawn for the block
(``[N, block, V]``, not the whole sequence), so its samples differ from the plain sampler's for the same seed, and
are reproducible for a seed like them. ``reveal_step`` is the index of the step (forward pass) that committed each
token, so it stays the sampler's real order for TraceRL and the credit diagnostic; ``nfe`` counts the passes run.
With both options off the sampler is the plain one, unchanged (bit for bit; tested).

Options of the plain sampler (``ddmrl.samplers.schedules``), each off by default and each leaving the sampler
unchanged when off: ``remasking: rcr`` (MDPO's running-confidence remasking over the whole completion so far;
``rcr_scope: block`` re-masks inside the current block only), ``schedule: ass`` (the ascending
step-size scheduler, floor(log2 L) steps, ``ass_blocks`` blocks), ``eoser`` (EOS early rejection, with
``eos_min_gamma`` and ``eos_max_gamma``), and ``record_trajectory`` (keep every step's state, prediction and
confidence, ``ddmrl.samplers.trajectory``). Under RCR a token can be committed, re-masked and committed again:
``reveal_step`` is the step of its last commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ddmrl.samplers.base import (
    SampleOutput,
    combine_guidance,
    guided_logits,
    gumbel_argmax,
    init_canvas,
    uniform,
    with_unconditional,
)
from ddmrl.samplers.cache import KV_CACHES, cached_forward, window
from ddmrl.samplers.parallel import FACTOR_RULES, PARALLEL_RULES, parallel_commits
from ddmrl.samplers.schedules import EOS_MIN_GAMMA, RCR_SCOPES, SCHEDULES, ass_layout, eos_gamma, rcr_step
from ddmrl.samplers.trajectory import TrajectoryRecorder

REMASKINGS = ("low_confidence", "random", "rcr")
CONFIDENCE_DTYPES = {"float64": torch.float64, "float32": torch.float32}
PARALLEL_FLOORS = ("schedule", "one")

if TYPE_CHECKING:
    from ddmrl.aux_policies.base import AuxPolicy
    from ddmrl.config.sampler import SamplerConfig


def transfer_schedule(num_masked: torch.Tensor, steps: int) -> torch.Tensor:
    """Tokens to commit per step: [N] masked counts -> [N, steps], LLaDA's ``get_num_transfer_tokens``.

    >>> transfer_schedule(torch.tensor([5, 4]), 2).tolist()
    [[3, 2], [2, 2]]
    """
    base = num_masked // steps  # [N]
    rem = num_masked % steps  # [N]
    return base[:, None] + (torch.arange(steps, device=num_masked.device)[None, :] < rem[:, None]).long()


def proposal_prob(logits: torch.Tensor, proposal: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[N, T] the (untempered) probability softmax(logits) of each proposed token, the softmax taken in ``dtype``:
    LLaDA's low-confidence score."""
    return torch.softmax(logits.to(dtype), -1).gather(-1, proposal[..., None]).squeeze(-1)


def confidence_logits(logits: torch.Tensor, temperature: float, eos_id: int, eot_id: int) -> torch.Tensor:
    """The logits behind the confidence under LLaDA's ``confidence_eos_eot_inf``, as its released ``generate`` does
    it: ``logits_with_noise[:, :, eos] = logits[:, :, eot] = -inf`` after the proposals are drawn. EOT's logit is
    always removed; EOS's only at temperature 0, where ``logits_with_noise`` is ``logits`` itself (at temperature > 0
    the assignment lands on a noised copy that is no longer read). A proposal of a removed token scores 0."""
    out = logits.clone()
    out[..., eot_id] = -torch.inf
    if temperature == 0:
        out[..., eos_id] = -torch.inf
    return out


def keywords(sampler: SamplerConfig, steps: int, completion_length: int) -> dict:
    """The keys of the shared ``sampler:`` section this sampler's ``generate`` takes (``ddmrl.rollout.sampler_kwargs``
    adds ``steps`` and ``temperature``)."""
    return {
        "cfg_scale": sampler.cfg_scale, "block_length": sampler.block_length, "remasking": sampler.remasking,
        "kv_cache": sampler.kv_cache, "schedule": sampler.schedule, "ass_blocks": sampler.ass_blocks,
        "eoser": sampler.eoser, "eos_min_gamma": sampler.eos_min_gamma, "eos_max_gamma": sampler.eos_max_gamma,
        "confidence_dtype": sampler.confidence_dtype, "logits_eos_inf": sampler.logits_eos_inf,
        "confidence_eos_eot_inf": sampler.confidence_eos_eot_inf, "rcr_scope": sampler.rcr_scope,
        "parallel_floor": sampler.parallel_floor, "factor_rule": sampler.factor_rule, "parallel": sampler.parallel,
        "threshold": sampler.threshold, "factor": sampler.factor,
    }  # fmt: skip


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
    kv_cache: str = "none",
    parallel: str = "none",
    threshold: float = 0.9,
    factor: float = 1.0,
    parallel_floor: str = "schedule",
    factor_rule: str = "as_stated",
    confidence_dtype: str = "float64",
    logits_eos_inf: bool = False,
    confidence_eos_eot_inf: bool = False,
    rcr_scope: str = "sequence",
    schedule: str = "linear",
    ass_blocks: int = 1,
    eoser: bool = False,
    eos_min_gamma: float | None = None,
    eos_max_gamma: float = 1.0,
    eos_id: int | None = None,
    eot_id: int | None = None,
    record_trajectory: bool = False,
    generator: torch.Generator | None = None,
    aux_policy: AuxPolicy | None = None,
    clamp: torch.Tensor | None = None,
    tempered_confidence: bool = False,
    step_window: tuple[int, int] | None = None,
) -> SampleOutput:
    """Sample completions of ``completion_length`` tokens for ``prompt_ids`` [N, P] (left-padded).

    ``kv_cache`` (none | prefix | dual) and ``parallel`` (none | threshold | factor, with ``threshold``, ``factor``,
    ``parallel_floor``: schedule | one and ``factor_rule``: as_stated | fast_dllm_release): Fast-dLLM's
    accelerations, see the module docstring. ``confidence_dtype`` (float64 | float32): the softmax of the confidence.
    ``logits_eos_inf`` (needs ``eos_id``) and ``confidence_eos_eot_inf`` (needs ``eos_id`` and ``eot_id``): LLaDA's
    options of those names. ``remasking: rcr`` (with ``rcr_scope``: sequence | block), ``schedule`` (linear |
    ass; ASS takes floor(log2 L) steps and ignores ``steps``), ``eoser`` (needs ``eos_id``; ``eos_min_gamma`` None
    is 0.4 with the linear schedule, 0.01 with ASS) and ``record_trajectory``: ``ddmrl.samplers.schedules``.
    ``aux_policy``: a learned unmasking policy (``ddmrl.aux_policies.unmasking.UnmaskingPolicy``) chooses the
    positions each step reveals instead of the confidence schedule (``ddmrl.samplers.unmasking``; ``steps`` and
    ``remasking`` then do not apply). ``clamp`` [N, L]: the starting completion, every token other than ``mask_id``
    fixed (inpainting; the plain sampler with low_confidence or random remasking). ``tempered_confidence``: the
    plain sampler ranks, re-masks (RCR) and records the tempered probability softmax(logits / temperature) of each
    proposal instead of the untempered one (MDPO's released sampler; unchanged at temperature 0).
    ``step_window`` (a, b): run only the steps a <= s < b of the schedule, from the partial state ``clamp`` (the state
    before step a; d-TreeRPO's branching, ``ddmrl.rollout.rollout``'s ``branching``): a block entered at its step
    a' > its first splits its remaining masks over its remaining steps, which for LLaDA's linear split is the
    uninterrupted schedule's own (so consecutive windows reproduce the whole run, tested); ``reveal_step`` counts
    the schedule's steps (-1 where the token was given).
    """
    if step_window is not None and (clamp is None or remasking == "rcr" or schedule != "linear"):
        raise ValueError("step_window: resumes a partial state (clamp) of the plain linear schedule, no rcr")
    if clamp is not None and (kv_cache != "none" or parallel != "none" or aux_policy is not None):
        raise ValueError("clamp (inpainting): the plain sampler only (kv_cache, parallel: none; no aux_policy)")
    if clamp is not None and remasking == "rcr":
        raise ValueError("clamp (inpainting): remasking rcr would re-mask clamped tokens")
    if remasking not in REMASKINGS:
        raise ValueError(f"unknown remasking '{remasking}'; choose one of {', '.join(REMASKINGS)}")
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {SCHEDULES}")
    if (eoser or logits_eos_inf or confidence_eos_eot_inf) and eos_id is None:
        raise ValueError("eoser, logits_eos_inf and confidence_eos_eot_inf need the EOS token id (eos_id)")
    if confidence_eos_eot_inf and eot_id is None:
        raise ValueError("confidence_eos_eot_inf needs the end-of-turn token id (eot_id)")
    if confidence_dtype not in CONFIDENCE_DTYPES:
        raise ValueError(f"unknown confidence_dtype {confidence_dtype!r}; choose one of {tuple(CONFIDENCE_DTYPES)}")
    if parallel_floor not in PARALLEL_FLOORS:
        raise ValueError(f"unknown parallel_floor {parallel_floor!r}; choose one of {PARALLEL_FLOORS}")
    if factor_rule not in FACTOR_RULES:
        raise ValueError(f"unknown factor_rule {factor_rule!r}; choose one of {FACTOR_RULES}")
    if rcr_scope not in RCR_SCOPES:
        raise ValueError(f"unknown rcr_scope {rcr_scope!r}; choose one of {RCR_SCOPES}")
    if parallel_floor != "schedule" and parallel == "none":
        raise ValueError("parallel_floor one: a floor under a parallel-decoding rule; set parallel")
    dtype = CONFIDENCE_DTYPES[confidence_dtype]
    eos = {"eos_id": eos_id, "eot_id": eot_id, "logits_eos_inf": logits_eos_inf, "eos_eot": confidence_eos_eot_inf}
    options = [o for o, on in (("remasking rcr", remasking == "rcr"), ("schedule ass", schedule == "ass"),
                               ("eoser", eoser), ("record_trajectory", record_trajectory),
                               ("tempered_confidence", tempered_confidence)) if on]  # fmt: skip
    if options and (kv_cache != "none" or parallel != "none"):
        raise ValueError(f"{', '.join(options)}: the plain sampler only (kv_cache none, parallel none)")
    if aux_policy is not None:
        if logits_eos_inf or confidence_eos_eot_inf:
            raise ValueError("logits_eos_inf, confidence_eos_eot_inf: a confidence rule; not with an aux_policy")
        if kv_cache != "none" or parallel != "none" or options:
            raise ValueError(
                "a learned unmasking policy replaces the confidence rules: kv_cache, parallel: none, and none of "
                "remasking rcr, schedule ass, eoser, record_trajectory, tempered_confidence"
            )
        # a learned unmasking policy's sampler: the stages whose runs have one name it in their ``uses``
        from ddmrl.samplers.unmasking import generate as generate_with_policy

        return generate_with_policy(
            model, prompt_ids, completion_length, mask_id=mask_id, block_length=block_length,
            temperature=temperature, cfg_scale=cfg_scale, policy=aux_policy, generator=generator,
        )  # fmt: skip
    if kv_cache not in KV_CACHES:
        raise ValueError(f"unknown kv_cache {kv_cache!r}; choose one of {KV_CACHES}")
    if parallel not in PARALLEL_RULES:
        raise ValueError(f"unknown parallel rule {parallel!r}; choose one of {PARALLEL_RULES}")
    if parallel != "none" and remasking != "low_confidence":
        raise ValueError(f"parallel = {parallel!r} ranks by the model's confidence: it needs remasking low_confidence")
    if kv_cache != "none" or parallel != "none":
        return _generate_fast(
            model, prompt_ids, completion_length, mask_id, block_length, steps, temperature, remasking, cfg_scale,
            kv_cache, parallel, threshold, factor, parallel_floor, factor_rule, dtype, eos, generator,
        )  # fmt: skip
    p = prompt_ids.shape[1]
    x, reveal = init_canvas(prompt_ids, completion_length, mask_id)
    if clamp is not None:
        x[:, p:] = clamp.to(x)
    blocks = _blocks(schedule, completion_length, block_length, steps, ass_blocks)
    total = sum(n for _, _, n, _ in blocks)
    gamma_min = EOS_MIN_GAMMA[schedule] if eos_min_gamma is None else eos_min_gamma
    recorder = TrajectoryRecorder() if record_trajectory else None
    running = torch.zeros(x.shape[0], completion_length, dtype=torch.float64, device=x.device)  # RCR's confidences
    step, nfe = 0, 0
    first, last = step_window or (0, total)
    for lo, hi, steps_in_block, counts in blocks:
        lo, hi = p + lo, p + hi
        skip = min(max(first - step, 0), steps_in_block)  # steps of this block before the window
        if skip == steps_in_block or step + skip >= last:  # the block lies outside the window
            step += steps_in_block
            continue
        if counts is None:  # LLaDA's linear split of the block's masks over its (remaining) steps
            rest = transfer_schedule((x[:, lo:hi] == mask_id).sum(1), steps_in_block - skip)  # [N, S - skip]
            transfer = torch.cat([rest.new_zeros(rest.shape[0], skip), rest], 1)  # [N, S]
        else:
            transfer = torch.tensor(counts, device=x.device).expand(x.shape[0], steps_in_block)
        if rcr_scope == "block":  # the block's own confidences only
            running = torch.zeros_like(running)
        for s in range(steps_in_block):
            if s < skip or step >= last:  # outside the window
                step += 1
                continue
            logits = guided_logits(model, x, p, mask_id, cfg_scale).float()  # [N, T, V]
            nfe += 2 if cfg_scale else 1
            never = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
            never[mask_id] = True  # never propose the mask token itself
            logits = logits.masked_fill(never, -torch.inf)
            scored = logits / temperature if tempered_confidence and temperature > 0 else logits  # MDPO's release
            proposal, conf = _propose(logits, temperature, remasking, dtype, eos, generator, p, scored)  # [N, T] each
            if recorder is not None:
                prob = conf if remasking != "random" else proposal_prob(scored, proposal, dtype)
                recorder.add(x[:, p:], proposal[:, p:], prob[:, p:], mask_id)
            if eoser:
                gamma = eos_gamma(step, total, schedule, gamma_min, eos_max_gamma)
                conf = torch.where(proposal == eos_id, conf * gamma, conf)
            if remasking == "rcr":  # over the completion so far (MDPO's rule) or the block only (rcr_scope: block)
                a = p if rcr_scope == "sequence" else lo
                keep_masked = transfer[:, s + 1 :].sum(1)  # [N] masks the schedule leaves in the block
                span, run, kept = rcr_step(
                    x[:, a:hi], proposal[:, a:hi], conf[:, a:hi], running[:, a - p : hi - p], keep_masked, mask_id
                )
                x[:, a:hi], running[:, a - p : hi - p] = span, run
                rb = reveal[:, a - p : hi - p]
                reveal[:, a - p : hi - p] = torch.where(kept, step, rb).masked_fill(span == mask_id, -1)
            else:
                selectable = torch.zeros_like(x, dtype=torch.bool)
                selectable[:, lo:hi] = x[:, lo:hi] == mask_id
                conf = conf.masked_fill(~selectable, -torch.inf)
                rank = conf.argsort(1, descending=True).argsort(1)  # [N, T] 0 = most confident
                commit = (rank < transfer[:, s : s + 1]) & selectable
                x = torch.where(commit, proposal, x)
                reveal[commit[:, p:]] = step
            step += 1
    trajectory = recorder.trajectory() if recorder is not None else None
    return SampleOutput(x[:, p:], reveal, nfe, trajectory=trajectory)


def _blocks(schedule: str, length: int, block_length: int, steps: int, ass_blocks: int):
    """(start, end, steps, tokens per step or None) per block over completion positions: LLaDA's semi-AR blocks of
    ``block_length`` with max(1, steps // blocks) steps each and the linear split (None, computed per block), or
    ASS's ascending blocks (:func:`ddmrl.samplers.schedules.ass_layout`)."""
    if schedule == "ass":
        return [(lo, hi, len(counts), counts) for lo, hi, counts in ass_layout(length, ass_blocks)]
    num_blocks = -(-length // block_length)
    per_block = max(1, steps // num_blocks)
    return [(b * block_length, min(length, (b + 1) * block_length), per_block, None) for b in range(num_blocks)]


def _propose(
    logits, temperature: float, remasking: str, dtype: torch.dtype, eos: dict, generator, start: int = 0, scored=None
):  # fmt: skip
    """[N, T] proposals (Gumbel-max, EOS excluded under ``logits_eos_inf``) and their confidences in float64:
    random numbers (``random``) or the proposal's probability, the softmax in ``dtype`` of ``scored`` (default:
    ``logits``; the tempered logits under ``tempered_confidence``), changed by ``confidence_eos_eot_inf``, taken from
    position ``start`` on only (-inf before it: the prompt, never committed; a float64 softmax of the prompt's logits
    would only cost memory). ``logits`` has the mask token at -inf."""
    scored = logits if scored is None else scored
    if eos["logits_eos_inf"]:
        logits, scored = logits.clone(), scored.clone()
        logits[..., eos["eos_id"]] = scored[..., eos["eos_id"]] = -torch.inf
    proposal = gumbel_argmax(logits, temperature, generator)
    if remasking == "random":
        return proposal, uniform(proposal.shape, proposal.device, generator)
    logits, conf = scored[:, start:], torch.full(proposal.shape, -torch.inf, dtype=torch.float64, device=logits.device)
    if eos["eos_eot"]:
        logits = confidence_logits(logits, temperature, eos["eos_id"], eos["eot_id"])
    conf[:, start:] = proposal_prob(logits, proposal[:, start:], dtype)
    return proposal, conf


def _generate_fast(
    model, prompt_ids, completion_length, mask_id, block_length, steps, temperature, remasking, cfg_scale,
    kv_cache, parallel, threshold, factor, parallel_floor, factor_rule, dtype, eos, generator,
) -> SampleOutput:  # fmt: skip
    """The sampler with a KV cache and/or a parallel-decoding rule, working on one block's positions at a time."""
    if remasking not in ("low_confidence", "random"):
        raise ValueError(f"unknown remasking '{remasking}'; choose low_confidence or random")
    p = prompt_ids.shape[1]
    x, reveal = init_canvas(prompt_ids, completion_length, mask_id)
    forward = None if kv_cache == "none" else cached_forward(model, kv_cache)
    num_blocks = -(-completion_length // block_length)
    steps_per_block = max(1, steps // num_blocks)
    step, nfe = 0, 0
    for b in range(num_blocks):
        lo, hi = p + b * block_length, p + min(completion_length, (b + 1) * block_length)
        past = None  # the block's cache, refreshed at its first step
        for s in range(steps_per_block if parallel_floor == "schedule" else hi - lo):
            masked = x[:, lo:hi] == mask_id  # [N, K]
            if not bool(masked.any()):
                break
            logits, past = _block_logits(model, forward, kv_cache, x, p, lo, hi, past, mask_id, cfg_scale)
            nfe += 2 if cfg_scale else 1
            logits = logits.float().clone()  # [N, K, V], a copy: the model's output is left alone
            logits[..., mask_id] = -torch.inf  # never propose the mask token itself
            proposal, conf = _propose(logits, temperature, remasking, dtype, eos, generator)  # [N, K] each
            conf = conf.masked_fill(~masked, -torch.inf)
            if parallel_floor == "schedule":  # LLaDA's schedule of the remaining masks over the remaining steps:
                k = -(-masked.sum(1, keepdim=True) // (steps_per_block - s))  # [N, 1] its first entry, ceil(.)
            else:  # Fast-dLLM: one token
                k = masked.any(1, keepdim=True).long()
            rank = conf.argsort(dim=1, descending=True, stable=True).argsort(dim=1)  # [N, K] 0 = most confident
            commit = ((rank < k) | parallel_commits(conf, parallel, threshold, factor, factor_rule)) & masked
            x[:, lo:hi] = torch.where(commit, proposal, x[:, lo:hi])
            reveal[:, lo - p : hi - p][commit] = step
            step += 1
    return SampleOutput(x[:, p:], reveal, nfe)


def _block_logits(model, forward, kv_cache: str, x, p: int, lo: int, hi: int, past, mask_id: int, cfg_scale: float):
    """Logits [N, hi - lo, V] of the block's positions (guided with ``cfg_scale``) and the block's cache.

    No cache: the whole sequence is evaluated. With one: the block's first step (``past`` None) evaluates the whole
    sequence and returns every layer's keys and values; later steps evaluate only the window of ``kv_cache``.
    """
    rows = with_unconditional(x, p, mask_id) if cfg_scale else x  # [N or 2N, T]
    if forward is None:
        logits = model(rows).logits[:, lo:hi]
    elif past is None:
        full, past = forward(rows, None, 0)
        logits = full[:, lo:hi]
    else:
        a, z = window(kv_cache, lo, hi, rows.shape[1])
        logits = forward(rows[:, a:z], past, a)[0][:, lo - a : hi - a]
    return (combine_guidance(logits, cfg_scale) if cfg_scale else logits), past
