"""Held-out evaluation: d1's protocol for text (one greedy completion per item, scored by the task's d1 parser);
sampled images per prompt for text-to-image tasks (GenEval's protocol: written in its folder layout, then judged
from those PNGs)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ddmrl import stats
from ddmrl.config import EvaluateConfig, PassAtKConfig, SamplerConfig
from ddmrl.rollout import Rollouts, rollout
from ddmrl.seeding import generator
from ddmrl.tasks.base import Example, Task

if TYPE_CHECKING:
    from ddmrl.aux_policies.base import AuxPolicy


def evaluate(
    model,
    tok,
    task: Task,
    examples: list[Example],
    sampler: SamplerConfig,
    batch_size: int,
    seed: int = 0,
    aux_policy: AuxPolicy | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Accuracy (percent, d1's aggregation) and mean reward on ``examples``, plus one record per generation (with
    the model evaluations it took, ``nfe``; their mean is ``nfe_per_sample``). ``aux_policy``: the model's
    auxiliary policy (a learned unmasking policy), consulted by the sampler as deployed (eval mode)."""
    start, scores, records, nfe = time.time(), [], [], 0
    gen = torch.Generator().manual_seed(seed)  # only used when temperature > 0 or by a policy's draws
    for lo in range(0, len(examples), batch_size):
        chunk = examples[lo : lo + batch_size]
        out = rollout(model, tok, task, chunk, 1, sampler, gen, aux_policy=_deployed(aux_policy))
        nfe += out.nfe
        for ex, text, own in zip(chunk, out.texts, row_nfe(out, sampler).tolist(), strict=True):
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
                    "nfe": own,
                    **{k: v for k, v in score.items()},
                }
            )
    metrics = {
        "accuracy": task.accuracy(scores),
        "mean_reward": sum(r["reward"] for r in records) / max(len(records), 1),
        "n": len(records),
        "nfe": nfe,
        "nfe_per_sample": sum(r["nfe"] for r in records) / max(len(records), 1),
        "eval_seconds": time.time() - start,
    }
    return metrics, records


def pass_at_k(
    model,
    tok,
    task: Task,
    examples: list[Example],
    sampler: SamplerConfig,
    cfg: PassAtKConfig,
    batch_size: int,
    seed: int = 0,
) -> dict[str, Any]:
    """pass@k on ``examples`` (Chen et al. 2021): ``cfg.n`` completions per item sampled with ``sampler`` at
    ``cfg.temperature``, each judged ``correct`` by the task's d1 parser; for each k the mean over items of the
    unbiased estimator (percent), and the per-item correct counts (the tables' bootstrap over items)."""
    sampler = dataclasses.replace(sampler, temperature=cfg.temperature)
    gen = generator(seed, "pass_at_k", task.name)
    counts = []
    per_batch = max(1, batch_size // cfg.n)  # items per rollout call: about batch_size completions
    for lo in range(0, len(examples), per_batch):
        chunk = examples[lo : lo + per_batch]
        out = rollout(model, tok, task, chunk, cfg.n, sampler, gen)
        correct = [bool(task.score(text, chunk[i // cfg.n])["correct"]) for i, text in enumerate(out.texts)]
        counts += [sum(correct[i * cfg.n : (i + 1) * cfg.n]) for i in range(len(chunk))]
    c = np.array(counts)
    return {
        "n": cfg.n,
        "temperature": cfg.temperature,
        "pass_at": {str(k): float(100 * stats.pass_at_k(cfg.n, c, k).mean()) for k in cfg.k},
        "ids": [ex.id for ex in examples],
        "correct_counts": counts,
    }


def unmasking_heuristics(sampler: SamplerConfig, completion_length: int) -> dict[str, SamplerConfig]:
    """The confidence heuristics a learned unmasking policy is compared with (the unmasking paper's baselines):
    ``low_confidence``, the evaluation sampler as configured (d1's protocol: a fixed number of tokens per step), and
    ``fast_dllm_threshold``, Fast-dLLM's rule (one token per step plus every masked token of the block whose
    confidence reaches ``sampler.threshold``; a block ends when it is complete)."""
    return {
        "low_confidence": dataclasses.replace(sampler, parallel="none"),
        "fast_dllm_threshold": dataclasses.replace(sampler, parallel="threshold", steps=completion_length),
    }


def with_heuristics(
    model,
    tok,
    task: Task,
    examples: list[Example],
    sampler: SamplerConfig,
    batch_size: int,
    seed: int,
    metrics: dict[str, Any],
    records: list[dict[str, Any]],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A learned unmasking policy's evaluation (``metrics``, ``records``) with the same model on the same items
    under each of :func:`unmasking_heuristics`: ``metrics["heuristics"][name]`` (with the heuristic's steps, rule
    and threshold) and every record's ``heuristics[name]`` (its generation, score and NFE under the heuristic)."""
    heuristics, per_item = {}, {}
    for name, heuristic in unmasking_heuristics(sampler, task.completion_length).items():
        m, recs = evaluate(model, tok, task, examples, heuristic, batch_size, seed)
        rule = {"steps": heuristic.steps, "parallel": heuristic.parallel, "threshold": heuristic.threshold}
        heuristics[name] = {**m, "sampler": rule}
        for r in recs:
            own = {k: v for k, v in r.items() if k not in ("question", "ground_truth")}
            per_item.setdefault(r["id"], {})[name] = own
    return {**metrics, "heuristics": heuristics}, [{**r, "heuristics": per_item[r["id"]]} for r in records]


def with_sampled(
    model,
    tok,
    task: Task,
    examples: list[Example],
    sampler: SamplerConfig,
    temperature: float,
    batch_size: int,
    seed: int,
    metrics: dict[str, Any],
    records: list[dict[str, Any]],
    aux_policy: AuxPolicy | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The evaluation (``metrics``, ``records``) with every item also decoded once by ``sampler`` at
    ``temperature`` (``evaluate.sampled_temperature``; the same draws for every model, seeded by ``seed``):
    ``metrics["sampled"]`` (its accuracy, mean reward and temperature) and every record's ``sampled`` (its
    generation, reward and score fields)."""
    hot = dataclasses.replace(sampler, temperature=temperature)
    m, recs = evaluate(model, tok, task, examples, hot, batch_size, seed, aux_policy)
    by_id = {r["id"]: {k: v for k, v in r.items() if k not in ("id", "question", "ground_truth")} for r in recs}
    sampled = {"temperature": temperature, "accuracy": m["accuracy"], "mean_reward": m["mean_reward"]}
    return {**metrics, "sampled": sampled}, [{**r, "sampled": by_id[r["id"]]} for r in records]


def row_nfe(batch: Rollouts, sampler: SamplerConfig) -> torch.Tensor:
    """The model evaluations [N] each sample of a rollout needed, as if sampled alone: an auxiliary policy's own
    count; with a parallel rule (a block ends once its masks are gone) the steps that revealed at least one of its
    tokens (every pass of an unfinished block reveals one at least); otherwise every pass of the batch. Both CFG
    branches count."""
    if batch.aux is not None:
        return batch.aux.nfe.cpu()
    n = batch.reveal_step.shape[0]
    if sampler.parallel == "none":
        return torch.full((n,), batch.nfe)
    steps = torch.tensor([len(set(row[row >= 0].tolist())) for row in batch.reveal_step.cpu()])
    return steps * (2 if sampler.cfg_scale else 1)


def _deployed(aux_policy: AuxPolicy | None) -> AuxPolicy | None:
    """The auxiliary policy in eval mode: it acts as deployed (the schedule's mean, the evaluation temperature)."""
    return None if aux_policy is None else aux_policy.eval()


def samples_per_item(examples: list[Example], cfg: EvaluateConfig, fixed: int | None = None) -> list[int]:
    """Samples of each held-out prompt: ``fixed`` where the task's protocol sets it (DPG-Bench's 2x2 grid: 4), else
    ``cfg.samples_per_prompt``, raised for a GenEval tag (``gold["tag"]``) with few prompts so that every tag gets
    at least ``cfg.min_images_per_tag`` images."""
    if fixed:
        return [fixed] * len(examples)
    counts = Counter(ex.gold.get("tag") for ex in examples)
    return [max(cfg.samples_per_prompt, math.ceil(cfg.min_images_per_tag / counts[ex.gold.get("tag")]))
            for ex in examples]  # fmt: skip


def sample_prompts(
    model, tok, task: Task, examples: list[Example], cfg: EvaluateConfig, seed: int = 0, aux_policy=None
) -> tuple[list[list[str]], list[torch.Tensor], dict[str, Any]]:
    """Sampled completions per held-out prompt (GenEval's protocol: several images per prompt from a temperature-1
    sampler; how many: :func:`samples_per_item`): their texts, their ids ([K, L] per prompt), NFE and time. Prompts
    with the same count are sampled together, in chunks of ``cfg.batch_size`` samples, each chunk from a generator
    seeded by (seed, chunk), so a rerun gives the same images."""
    start, nfe, c = time.time(), 0, 0
    counts = samples_per_item(examples, cfg, task.samples_per_prompt)
    texts: list[list[str]] = [[] for _ in examples]
    ids: list[torch.Tensor] = [torch.empty(0) for _ in examples]
    for k in dict.fromkeys(counts):  # each count in order of first appearance
        items = [i for i, n in enumerate(counts) if n == k]
        per_chunk = max(1, cfg.batch_size // k)
        for lo in range(0, len(items), per_chunk):
            chunk = items[lo : lo + per_chunk]
            gen = generator(seed, "evaluate", c)
            batch = rollout(model, tok, task, [examples[i] for i in chunk], k, cfg.sampler, gen,
                            aux_policy=_deployed(aux_policy))  # fmt: skip
            c, nfe = c + 1, nfe + batch.nfe
            for j, (i, sample_ids) in enumerate(zip(chunk, batch.completion_ids.cpu().split(k), strict=True)):
                texts[i], ids[i] = batch.texts[j * k : (j + 1) * k], sample_ids
    stats = {"n_prompts": len(examples), "n_samples": sum(counts), "nfe": nfe}
    return texts, ids, {**stats, "eval_seconds": time.time() - start}


def evaluate_images(
    model,
    tok,
    task: Task,
    examples: list[Example],
    cfg: EvaluateConfig,
    folder: str | Path,
    seed: int = 0,
    aux_policy: AuxPolicy | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """A text-to-image task's protocol: several images per held-out prompt (:func:`sample_prompts`), written under
    ``folder`` and judged from there (``task.judge_images``: geneval-mini's exact rules on the PNGs, the official
    GenEval evaluator, HPSv3, DPG-Bench's VQA) and summarised by ``task.summarize_images``.

    Returns (metrics: the task's summary (GenEval: per tag in percent, ``accuracy`` = Overall; HPS and DPG-Bench:
    ``score``), the mean training reward where the task has one, NFE and time; one generation record per image;
    the judge's rows). ``aux_policy``: the model's schedule policy (Co-GRPO), which sets every step's schedule (its
    mean)."""
    texts, ids, stats = sample_prompts(model, tok, task, examples, cfg, seed, aux_policy)
    rows = task.judge_images(folder, examples, texts, ids)
    per_image = [ex for ex, sample in zip(examples, texts, strict=True) for _ in sample]
    flat = [text for sample in texts for text in sample]
    rewards = [None] * len(flat) if task.evaluation_only else task.batch_rewards(flat, torch.cat(ids), per_image)
    sample = [k for sample_texts in texts for k in range(len(sample_texts))]
    records = [
        {"id": ex.id, "prompt": ex.gold["prompt"], "sample": k, "generation": text, "reward": reward}
        for ex, k, text, reward in zip(per_image, sample, flat, rewards, strict=True)
    ]
    metrics = {**task.summarize_images(rows), **stats}
    if not task.evaluation_only:
        metrics["mean_reward"] = sum(rewards) / len(rewards)
    return metrics, records, rows
