"""IGPO's rollout augmenter (Zhao et al. 2026, Inpainting-Guided Policy Optimization, ICLR, arXiv 2509.10396,
Sec. 3; facebookresearch/igpo ``trainer_igpo.py`` and ``utils/generate.py``).

In a group whose G samples are all wrong (no learning signal: zero advantage), the ground-truth reasoning trace of
the prompt (final answer excluded; ``Task.trace_tokens``) is cut into consecutive chunks of U[min_chunk_size,
max_chunk_size] tokens; each of G new samples draws an injection ratio eta ~ U[inpaint_ratio_low,
inpaint_ratio_high], and ceil(eta n) of the n chunks (the released code's n - int(n (1 - eta))), chosen at random,
are clamped as hints at their positions in the reference completion while the model inpaints the rest with the
rollout sampler (its plain loop: a KV cache or parallel decoding, speed approximations, is switched off for these
draws). Each inpainted sample is verified with the task's verdict; up to ``max_replacements`` wrong samples
of the group are replaced by verified-correct inpainted ones, which keep their hint mask for the entropy filter
(:func:`ddmrl.objectives.weights.hint_entropy_filter`). Other groups are left untouched.

ddmrl's reading where it differs from the released code (docs/methods.md): the hints sit where the trace sits in
the reference completion (the released code stretches the chunk spacing by up to 1.5x over the first L - 30
positions); the last chunk is not always revealed (the released sampler's ``inpaint_last_chunk_end`` default);
"wrong" is the task's evaluation verdict (the released code: d1's correctness reward of 0).
"""

from __future__ import annotations

import dataclasses
import random

import torch

from ddmrl.augmenters.base import Augmented, Augmenter, AugmentInputs
from ddmrl.errors import ConfigError
from ddmrl.rollout import rewards, rollout
from ddmrl.tasks.base import Example, Task


def trace_chunks(length: int, rng: random.Random, min_size: int, max_size: int) -> list[tuple[int, int]]:
    """Consecutive [start, end) chunks of a trace of ``length`` tokens, each of U{min_size..max_size} tokens; a last
    piece shorter than ``min_size`` is no chunk (the released code: too short to be a useful hint)."""
    chunks, start = [], 0
    while start < length:
        size = min(rng.randint(min_size, max_size), length - start)
        if size < min_size:
            break
        chunks.append((start, start + size))
        start += size
    return chunks


def revealed_chunks(chunks: list[tuple[int, int]], eta: float, rng: random.Random) -> list[tuple[int, int]]:
    """The chunks clamped as hints at injection ratio ``eta``: n - int(n (1 - eta)) of the n, uniformly at random."""
    hidden = int(len(chunks) * (1 - eta))
    return sorted(rng.sample(chunks, len(chunks) - hidden))


def hint_canvas(
    length: int, offset: int, trace_ids: list[int], chunks: list[tuple[int, int]], mask_id: int
) -> torch.Tensor:
    """[L] the starting completion of one inpainted sample: the chunks' trace tokens at ``offset + k``, the mask
    elsewhere (positions beyond the completion dropped)."""
    canvas = torch.full((length,), mask_id, dtype=torch.long)
    for start, end in chunks:
        for k in range(start, min(end, length - offset)):
            canvas[offset + k] = trace_ids[k]
    return canvas


def correct(task: Task, texts: list[str], examples: list[Example], num_generations: int) -> torch.Tensor:
    """[N] the task's verdict on each completion (rows grouped ``num_generations`` per example)."""
    verdicts = [bool(task.score(t, examples[i // num_generations])["correct"]) for i, t in enumerate(texts)]
    return torch.tensor(verdicts, dtype=torch.bool)


def check(task: Task) -> None:
    if not task.reasoning_traces:
        raise ConfigError(
            f"igpo: task {task.name!r} has no reasoning traces to inpaint (Task.reasoning_traces); use a task with "
            "traces (chain, gsm8k, math500)"
        )


def augment(x: AugmentInputs) -> Augmented:
    """Inpaint every all-wrong group that has a trace and replace up to ``max_replacements`` of its samples by
    verified-correct inpainted ones (module docstring)."""
    cfg, g, batch = x.cfg, x.num_generations, x.batch
    all_wrong = ~correct(x.task, batch.texts, x.examples, g).view(-1, g).any(1)  # [B]
    rng, length, mask_id = random.Random(x.seed), batch.completion_ids.shape[1], x.tok.mask_token_id
    groups, canvases = [], []
    for i in all_wrong.nonzero().flatten().tolist():
        found = x.task.trace_tokens(x.tok, x.examples[i])
        chunks = [] if found is None else trace_chunks(len(found[1]), rng, cfg.min_chunk_size, cfg.max_chunk_size)
        if not chunks:
            continue
        groups.append(i)
        for _ in range(g):
            eta = rng.uniform(cfg.inpaint_ratio_low, cfg.inpaint_ratio_high)
            canvases.append(hint_canvas(length, *found, revealed_chunks(chunks, eta, rng), mask_id))
    hints = torch.zeros_like(batch.completion_mask, dtype=torch.bool)  # [N, L]
    stats = {"augment/all_wrong_groups": float(all_wrong.sum()), "augment/groups": float(len(groups))}
    stats |= {"augment/inpainted_correct": 0.0, "augment/replaced": 0.0}
    if not groups:
        return Augmented(batch._replace(hints=hints), x.rewards, stats)
    examples = [x.examples[i] for i in groups]
    plain = dataclasses.replace(cfg.sampler, kv_cache="none", parallel="none")  # the clamp's sampler
    inp = rollout(x.policy, x.tok, x.task, examples, g, plain, x.gen, clamp=torch.stack(canvases))
    on_cpu = ("completion_ids", "completion_mask", "reveal_step", "hints")
    inp = inp._replace(**{k: getattr(inp, k).cpu() for k in on_cpu})
    inp_rewards, inp_correct = rewards(x.task, examples, inp, g), correct(x.task, inp.texts, examples, g)
    ids, valid, reveal = batch.completion_ids.clone(), batch.completion_mask.clone(), batch.reveal_step.clone()
    texts, r = list(batch.texts), x.rewards.clone()
    replaced = 0
    for n, i in enumerate(groups):
        good = [n * g + j for j in range(g) if inp_correct[n * g + j]]
        for j, src in enumerate(rng.sample(good, min(len(good), cfg.max_replacements))):
            dst = i * g + j  # every sample of the group is wrong: replace the first ones (the released code)
            ids[dst], valid[dst], reveal[dst] = inp.completion_ids[src], inp.completion_mask[src], inp.reveal_step[src]
            hints[dst], texts[dst], r[dst] = inp.hints[src], inp.texts[src], inp_rewards[src]
            replaced += 1
    stats |= {"augment/inpainted_correct": float(inp_correct.sum()), "augment/replaced": float(replaced)}
    edited = batch._replace(completion_ids=ids, completion_mask=valid, reveal_step=reveal, texts=texts, hints=hints)
    return Augmented(edited._replace(nfe=batch.nfe + inp.nfe), r, stats)


IGPO = Augmenter(check=check, augment=augment)
