"""Held-out evaluation: d1's protocol for text (one greedy completion per item, scored by the task's d1 parser);
sampled images per prompt for text-to-image tasks (GenEval's protocol: written in its folder layout, then judged
from those PNGs)."""

from __future__ import annotations

import time
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


def sample_prompts(
    model, tok, task: Task, examples: list[Example], cfg: EvaluateConfig, seed: int = 0
) -> tuple[list[list[str]], list[torch.Tensor], dict[str, Any]]:
    """K sampled completions per held-out prompt (GenEval's protocol: several images per prompt from a
    temperature-1 sampler; K is ``cfg.samples_per_prompt`` unless the task's protocol fixes it, as DPG-Bench's 2x2
    grid does): their texts, their ids ([K, L] per prompt), NFE and time. Each chunk of ``cfg.batch_size`` samples
    draws from a generator seeded by (seed, chunk), so a rerun gives the same images."""
    start, k, nfe, texts, ids = time.time(), task.samples_per_prompt or cfg.samples_per_prompt, 0, [], []
    per_chunk = max(1, cfg.batch_size // k)
    for c, lo in enumerate(range(0, len(examples), per_chunk)):
        chunk = examples[lo : lo + per_chunk]
        batch = rollout(model, tok, task, chunk, k, cfg.sampler, generator(seed, "evaluate", c))
        nfe += batch.nfe
        texts += [batch.texts[i * k : (i + 1) * k] for i in range(len(chunk))]
        ids += list(batch.completion_ids.cpu().split(k))
    stats = {"n_prompts": len(examples), "n_samples": len(examples) * k, "nfe": nfe}
    return texts, ids, {**stats, "eval_seconds": time.time() - start}


def evaluate_images(
    model, tok, task: Task, examples: list[Example], cfg: EvaluateConfig, folder: str | Path, seed: int = 0
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """A text-to-image task's protocol: several images per held-out prompt (:func:`sample_prompts`), written under
    ``folder`` and judged from there (``task.judge_images``: geneval-mini's exact rules on the PNGs, the official
    GenEval evaluator, HPSv3, DPG-Bench's VQA) and summarised by ``task.summarize_images``.

    Returns (metrics: the task's summary (GenEval: per tag in percent, ``accuracy`` = Overall; HPS and DPG-Bench:
    ``score``), the mean training reward where the task has one, NFE and time; one generation record per image;
    the judge's rows)."""
    texts, ids, stats = sample_prompts(model, tok, task, examples, cfg, seed)
    rows = task.judge_images(folder, examples, texts, ids)
    per_image = [ex for ex, sample in zip(examples, texts, strict=True) for _ in sample]
    flat = [text for sample in texts for text in sample]
    rewards = [None] * len(flat) if task.evaluation_only else task.batch_rewards(flat, torch.cat(ids), per_image)
    k = len(texts[0])
    records = [
        {"id": ex.id, "prompt": ex.gold["prompt"], "sample": i % k, "generation": text, "reward": reward}
        for i, (ex, text, reward) in enumerate(zip(per_image, flat, rewards, strict=True))
    ]
    metrics = {**task.summarize_images(rows), **stats}
    if not task.evaluation_only:
        metrics["mean_reward"] = sum(rewards) / len(rewards)
    return metrics, records, rows
