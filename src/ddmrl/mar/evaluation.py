"""GenEval's protocol for TinyMAR on geneval-mini: several sampled images per held-out prompt, decoded to the nearest
colour codes, written in GenEval's folder layout and judged from the PNGs, as ``ddmrl.evaluation.evaluate_images``
does for the masked-diffusion models (same samples per prompt, same layout, same results rows and summary)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ddmrl.geneval import summarize
from ddmrl.mar.diffusion import Schedule
from ddmrl.mar.encoding import codes_to_grids
from ddmrl.mar.sampler import generate
from ddmrl.seeding import generator
from ddmrl.tasks.base import Example


def sample_images(
    model,
    task,
    examples: list[Example],
    counts: list[int],
    ar_steps: int,
    schedule: Schedule,
    temperature: float,
    batch_size: int,
    seed: int = 0,
) -> tuple[list[list[str]], dict[str, Any]]:
    """``counts[i]`` images of prompt ``examples[i]`` as completion texts (``task.to_text`` of the decoded grids), in
    chunks of ``batch_size`` images, each from a generator seeded by (seed, chunk): a rerun draws the same images."""
    start = time.time()
    jobs = [(i, ex.gold["prompt"]) for i, (ex, k) in enumerate(zip(examples, counts, strict=True)) for _ in range(k)]
    texts: list[list[str]] = [[] for _ in examples]
    transformer, head = 0, 0
    for c, lo in enumerate(range(0, len(jobs), batch_size)):
        chunk = jobs[lo : lo + batch_size]
        roll = generate(model, model.encode_prompts([p for _, p in chunk]), ar_steps, schedule,
                        generator(seed, "evaluate", c), temperature)  # fmt: skip
        for (i, _), grid in zip(chunk, codes_to_grids(roll.codes, task.height, task.width), strict=True):
            texts[i].append(task.to_text(grid))
        transformer, head = transformer + roll.transformer_passes, head + roll.head_passes * len(chunk)
    stats = {"n_prompts": len(examples), "n_samples": len(jobs), "transformer_passes": transformer,
             "head_passes": head, "eval_seconds": time.time() - start}  # fmt: skip
    return texts, stats


def evaluate_mar(
    model,
    task,
    examples: list[Example],
    counts: list[int],
    folder: str | Path,
    ar_steps: int,
    schedule: Schedule,
    temperature: float,
    batch_size: int,
    seed: int = 0,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """(metrics: GenEval's summary in percent with ``accuracy`` = Overall, the mean reward, passes and time; one
    record per image; GenEval's results rows judged from the PNGs written under ``folder``)."""
    texts, stats = sample_images(model, task, examples, counts, ar_steps, schedule, temperature, batch_size, seed)
    rows = task.judge_images(folder, examples, texts, [None] * len(examples))
    records = [
        {"id": ex.id, "prompt": ex.gold["prompt"], "sample": k, "generation": text, "reward": task.reward(text, ex)}
        for ex, sample in zip(examples, texts, strict=True)
        for k, text in enumerate(sample)
    ]
    mean_reward = sum(r["reward"] for r in records) / len(records)
    summary = summarize(rows)
    return {"accuracy": summary["overall"], **summary, "mean_reward": mean_reward, **stats}, records, rows
