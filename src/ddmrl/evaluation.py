"""Held-out evaluation with d1's protocol: one greedy completion per item, scored by the task's d1 parser."""

from __future__ import annotations

import time
from typing import Any

import torch

from ddmrl.config import SamplerConfig
from ddmrl.rollout import rollout
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
