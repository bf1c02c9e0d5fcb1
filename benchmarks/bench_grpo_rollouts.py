"""Whole GRPO runs trained on accelerated rollouts against plain ones, at the same sample budget (CPU).

    python benchmarks/bench_grpo_rollouts.py --out benchmarks/results/grpo_rollouts --sft-model DIR --tasks DIR \\
        [--method diffu_grpo] [--task sudoku4] [--steps 48] [--seeds 0,1,2] [--options dual,dual+threshold]

Each run is params.yaml's run of ``--method`` on ``--task`` (``grpo:`` and the method's section) from the SFT model,
shortened to ``--steps`` optimiser steps, once with the plain rollout sampler and once per option of ``--options``
(``bench_fast_sampling.OPTIONS``), with the same seeds: the same prompts, the same number of rollouts (the sample
budget), and the same training views, log-probs and updates (always the model's own forward passes). Runs of the
arms alternate (seed 0 plain, seed 0 option, seed 1 plain, ...) so that the machine's load hits them alike.

Reports per arm: held-out accuracy after GRPO (d1's protocol, the *plain* evaluation sampler for every arm, so that
only the training differs), its mean and 95 % t-interval over seeds, the per-run binomial interval, the rollout
phase's and the whole run's seconds, and the ratio of rollout time to the plain arm's.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fast_sampling import OPTIONS  # noqa: E402
from common import machine_info, mean_interval, per_example, t_interval  # noqa: E402

from ddmrl import config  # noqa: E402
from ddmrl.evaluation import evaluate  # noqa: E402
from ddmrl.models.checkpoint import load_checkpoint  # noqa: E402
from ddmrl.seeding import derive_seed  # noqa: E402
from ddmrl.tasks.store import load_task, training_draw  # noqa: E402
from ddmrl.training.grpo import train_grpo  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sft-model", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--params", default=str(REPO / "params.yaml"))
    ap.add_argument("--method", default="diffu_grpo")
    ap.add_argument("--task", default="sudoku4")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--options", default="dual,dual+threshold")
    ap.add_argument("--eval-items", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    return ap.parse_args()


def one_run(sft, tok, task, held, gcfg, seed: int, eval_sampler, eval_batch: int) -> dict:
    """GRPO from the SFT weights, then held-out accuracy with the evaluation sampler."""
    policy, ref = copy.deepcopy(sft), copy.deepcopy(sft).requires_grad_(False)
    run_seed = derive_seed(0, "grpo", f"bench_{gcfg.method}_{task.name}_s{seed}")
    draw = training_draw(task, held, run_seed, "grpo", gcfg.num_prompts)
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        curve, timing = train_grpo(policy, ref, tok, task, draw, gcfg, run_seed)
    wall = time.perf_counter() - t0
    metrics, records = evaluate(policy, tok, task, held, eval_sampler, eval_batch)
    acc, half = mean_interval(per_example(records))
    return {"seed": seed, "accuracy": metrics["accuracy"], "accuracy_halfwidth": half, "wall": wall,
            "gen": timing.gen, "old_ref_logp": timing.old_ref_logp, "update": timing.update,
            "first_reward": curve[0]["reward"], "last_reward": curve[-1]["reward"],
            "rollouts": len(curve) * gcfg.num_prompts * gcfg.num_generations}  # fmt: skip


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    cfg = config.load(args.params)
    base = cfg.methods[args.method]
    base = replace(base, max_steps=args.steps, save_steps=0)
    task, held = load_task(args.tasks, args.task)
    held = held[: args.eval_items]
    sft, tok = load_checkpoint(args.sft_model)
    arms = ["plain", *args.options.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    res = {"machine": machine_info(), "method": args.method, "task": args.task, "steps": args.steps,
           "config": {k: str(v) for k, v in base.__dict__.items()}, "runs": {a: [] for a in arms}}  # fmt: skip
    start = time.perf_counter()
    before, _ = evaluate(sft, tok, task, held, cfg.evaluate.sampler, cfg.evaluate.batch_size)
    res["sft_accuracy"] = before["accuracy"]
    for seed in seeds:
        for arm in arms:
            gcfg = replace(base, sampler=replace(base.sampler, **OPTIONS[arm]))
            run = one_run(sft, tok, task, held, gcfg, seed, cfg.evaluate.sampler, cfg.evaluate.batch_size)
            res["runs"][arm].append(run)
            print(f"seed {seed} {arm:16s} acc {run['accuracy']:.1f}  gen {run['gen']:.1f} s  wall {run['wall']:.1f} s",
                  flush=True)  # fmt: skip
    res["seconds"] = time.perf_counter() - start
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    (out / "summary.md").write_text(summary(res, arms))
    print(summary(res, arms))


def summary(res: dict, arms: list[str]) -> str:
    mi, plain = res["machine"], res["runs"]["plain"]
    gen0 = statistics.median(r["gen"] for r in plain)
    wall0 = statistics.median(r["wall"] for r in plain)
    lines = [
        f"# GRPO on accelerated rollouts: {res['method']} on {res['task']}, {res['steps']} steps per run",
        "",
        f"{mi['date']}, torch {mi['torch']}, {mi['threads']} thread(s), load average at start "
        f"{mi['load_average_at_start'][0]:.2f} (a shared machine: read the ratios). SFT model before GRPO: "
        f"{res['sft_accuracy']:.1f} %. Every arm: the same seeds, prompts and number of rollouts "
        f"({plain[0]['rollouts']} per run); held-out accuracy with the plain evaluation sampler (greedy).",
        "",
        "| rollouts | accuracy per seed (± 95 % binomial) | mean ± 95 % t-interval | paired diff to plain | rollout s "
        "(median) | rollout speed-up | run s (median) | run speed-up | last rollout reward |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arm in arms:
        runs = res["runs"][arm]
        mean, half = t_interval([r["accuracy"] for r in runs])
        diff, dhalf = t_interval([r["accuracy"] - p["accuracy"] for r, p in zip(runs, plain, strict=True)])
        paired = "" if arm == "plain" else f"{diff:+.1f} ± {dhalf:.1f}"
        gen, wall = statistics.median(r["gen"] for r in runs), statistics.median(r["wall"] for r in runs)
        per_seed = ", ".join(f"{r['accuracy']:.1f} ± {r['accuracy_halfwidth']:.1f}" for r in runs)
        lines.append(
            f"| {arm} | {per_seed} | {mean:.1f} ± {half:.1f} | {paired} | {gen:.1f} | {gen0 / gen:.2f}x | {wall:.1f} "
            f"| {wall0 / wall:.2f}x | {statistics.fmean(r['last_reward'] for r in runs):.3f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
