"""Held-out evaluation: d1's protocol for text (one greedy completion per item, scored by the task's d1 parser);
sampled images per prompt for text-to-image tasks (GenEval's protocol: written in its folder layout, then judged
from those PNGs)."""

from __future__ import annotations

import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from ddmrl.config import EvaluateConfig, SamplerConfig
from ddmrl.rollout import rollout
from ddmrl.seeding import generator
from ddmrl.tasks.base import Example, Task


def evaluate(
    model, tok, task: Task, examples: list[Example], sampler: SamplerConfig, batch_size: int, seed: int = 0
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Accuracy (percent, d1's aggregation) and mean reward on ``examples``, plus one record per generation."""
    start, scores, records, nfe = time.time(), [], [], 0
    gen = torch.Generator().manual_seed(seed)  # only used when temperature > 0
    for lo in range(0, len(examples), batch_size):
        chunk = examples[lo : lo + batch_size]
        out = rollout(model, tok, task, chunk, 1, sampler, gen)
        nfe += out.nfe
        for ex, text in zip(chunk, out.texts, strict=True):
            score = task.score(text, ex)
            reward = task.reward(text, ex)
            scores.append(score)
            records.append(
                {
                    "id": ex.id,
                    "question": ex.prompt,
                    "ground_truth": ex.answer,
                    "generation": text,
                    "reward": reward,
                    **{k: v for k, v in score.items()},
                }
            )
    metrics = {
        "accuracy": task.accuracy(scores),
        "mean_reward": sum(r["reward"] for r in records) / max(len(records), 1),
        "n": len(records),
        "nfe": nfe,
        "eval_seconds": time.time() - start,
    }
    return metrics, records


def samples_per_item(examples: list[Example], cfg: EvaluateConfig) -> list[int]:
    """Samples of each held-out prompt: ``cfg.samples_per_prompt``, raised for a GenEval tag (``gold["tag"]``)
    with few prompts so that every tag gets at least ``cfg.min_images_per_tag`` images."""
    counts = Counter(ex.gold.get("tag") for ex in examples)
    return [max(cfg.samples_per_prompt, math.ceil(cfg.min_images_per_tag / counts[ex.gold.get("tag")]))
            for ex in examples]  # fmt: skip


def sample_prompts(
    model, tok, task: Task, examples: list[Example], cfg: EvaluateConfig, seed: int = 0
) -> tuple[list[list[str]], list[torch.Tensor], dict[str, Any]]:
    """Sampled completions per held-out prompt (GenEval's protocol: several images per prompt from a temperature-1
    sampler; how many: :func:`samples_per_item`): their texts, their ids ([K, L] per prompt), NFE and time. Prompts
    with the same count are sampled together, in chunks of ``cfg.batch_size`` samples, each chunk from a generator
    seeded by (seed, chunk), so a rerun gives the same images."""
    start, nfe, c = time.time(), 0, 0
    counts = samples_per_item(examples, cfg)
    texts: list[list[str]] = [[] for _ in examples]
    ids: list[torch.Tensor] = [torch.empty(0) for _ in examples]
    for k in dict.fromkeys(counts):  # each count in order of first appearance
        items = [i for i, n in enumerate(counts) if n == k]
        per_chunk = max(1, cfg.batch_size // k)
        for lo in range(0, len(items), per_chunk):
            chunk = items[lo : lo + per_chunk]
            batch = rollout(
                model, tok, task, [examples[i] for i in chunk], k, cfg.sampler, generator(seed, "evaluate", c)
            )
            c, nfe = c + 1, nfe + batch.nfe
            for j, (i, sample_ids) in enumerate(zip(chunk, batch.completion_ids.cpu().split(k), strict=True)):
                texts[i], ids[i] = batch.texts[j * k : (j + 1) * k], sample_ids
    stats = {"n_prompts": len(examples), "n_samples": sum(counts), "nfe": nfe}
    return texts, ids, {**stats, "eval_seconds": time.time() - start}


def evaluate_images(
    model, tok, task: Task, examples: list[Example], cfg: EvaluateConfig, folder: str | Path, seed: int = 0
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """GenEval's protocol on a text-to-image task: several images per held-out prompt (:func:`samples_per_item`),
    written in GenEval's folder layout under ``folder`` and judged from there (``task.judge_images``: geneval-mini's
    exact rules on the PNGs, or the official evaluator for real images).

    Returns (metrics: GenEval's summary in percent with ``accuracy`` = Overall, the mean reward, NFE and time;
    one generation record per image; the evaluator's results rows)."""
    from ddmrl.geneval import summarize  # image tasks only: text evaluations do not run (or depend on) it

    texts, ids, stats = sample_prompts(model, tok, task, examples, cfg, seed)
    rows = task.judge_images(folder, examples, texts, ids)
    summary = summarize(rows)
    per_image = [ex for ex, sample in zip(examples, texts, strict=True) for _ in sample]
    flat = [text for sample in texts for text in sample]
    rewards = task.batch_rewards(flat, torch.cat(ids), per_image)
    sample = [k for sample_texts in texts for k in range(len(sample_texts))]
    records = [
        {"id": ex.id, "prompt": ex.gold["prompt"], "sample": k, "generation": text, "reward": reward}
        for ex, k, text, reward in zip(per_image, sample, flat, rewards, strict=True)
    ]
    mean_reward = sum(rewards) / len(rewards)
    return {"accuracy": summary["overall"], **summary, "mean_reward": mean_reward, **stats}, records, rows
