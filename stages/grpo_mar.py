"""grpo_mar: one GRPO run on the MAR base model, plain (GRPO over the head's denoising transitions) or MAR-GRPO (a
frozen head, multi-trajectory expectation on the most uncertain tokens, consistency-aware token selection).

The run's hyperparameters are ``mar.grpo`` then ``mar.sections.<section>`` (``ddmrl.config.MarRunConfig``); the loop
is ``ddmrl.mar.grpo.train_mar_grpo``: MAR rollouts with their drafts recorded, geneval-mini's partial-credit reward on
the decoded grids, group advantages, then updates over the recorded Gaussian transitions.

    RUN=mar_mar_grpo_geneval_mini_s0
    python stages/grpo_mar.py --params params.yaml --run $RUN --tasks data/download/mar/tasks \
        --model data/download/mar/base --model-out data/grpo/$RUN/model --metrics data/grpo/$RUN/metrics.json \
        --curve data/grpo/$RUN/curve.csv --config-out data/grpo/$RUN/config.yaml \
        --checkpoints data/checkpoints/grpo_$RUN --log-dir logs/grpo_$RUN

With ``save_steps`` the run checkpoints to ``--checkpoints`` and a rerun after a kill resumes there.
"""

import ddmrl  # noqa: F401, I001  (first: pins the CPU numerics before numpy loads its BLAS; ddmrl.numerics)
import argparse
import copy
import dataclasses
import time
from pathlib import Path

import yaml

from ddmrl import config
from ddmrl.cli import run_stage
from ddmrl.config import MAR_TASK, ConfigError, mar_run_name
from ddmrl.io import write_json, write_text
from ddmrl.mar.grpo import train_mar_grpo
from ddmrl.mar.model import load_mar, save_mar
from ddmrl.mar.sampler import schedule_of
from ddmrl.seeding import derive_seed, seed_everything
from ddmrl.tasks.store import load_task, training_draw
from ddmrl.training import distributed as dist
from ddmrl.training.resume import Checkpointer, fingerprint, tree_digests
from ddmrl.training.tracking import RunLog, plain, start_trackers, trackers, without_trackers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--run", required=True, help="mar_<section>_geneval_mini_s<seed>")
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--model-out", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--curve", required=True)
    ap.add_argument("--config-out", help="the run's resolved hyperparameters (YAML)")
    ap.add_argument("--checkpoints", help="directory for resumable checkpoints (not an output)")
    ap.add_argument("--log-dir", help="directory for the experiment trackers' files (not an output)")
    args = ap.parse_args()
    cfg = config.load(args.params)
    runs = {mar_run_name(section, MAR_TASK, seed): (section, seed) for section, seed in cfg.mar.runs()}
    if args.run not in runs:
        known = ", ".join(runs) or "none (mar.methods is empty)"
        raise ConfigError(f"unknown MAR run {args.run!r}; runs are: {known}")
    section, seed = runs[args.run]
    rcfg = cfg.mar.run_config(section)
    run_seed = derive_seed(cfg.seed, "grpo", args.run)
    seed_everything(run_seed)
    start = time.time()

    task, held_out = load_task(args.tasks, MAR_TASK)
    policy = load_mar(args.model)
    ref = copy.deepcopy(policy).requires_grad_(False) if rcfg.beta else None
    draw = training_draw(task, held_out, run_seed, "grpo", rcfg.num_prompts)
    hyper = dataclasses.asdict(rcfg)
    resolved = plain({"run": args.run, "section": section, "task": MAR_TASK, "seed": seed, "run_seed": run_seed,
                      "model": args.model, "profile": cfg.profile, "grpo": hyper})  # fmt: skip
    if args.config_out:
        write_text(args.config_out, yaml.safe_dump(resolved, sort_keys=False))
    name = f"grpo_{args.run}"
    acc = dist.local_accelerator(policy, log_with=trackers(rcfg.report_to, args.log_dir, name, "mar.grpo.report_to"))
    run_id = fingerprint("grpo_mar", args.run, run_seed, without_trackers(hyper), tree_digests(Path(args.model)))
    ckpt = Checkpointer(args.checkpoints, run_id, rcfg.save_total_limit)
    start_trackers(acc, name, resolved, args.log_dir)
    schedule = schedule_of(policy, rcfg.sampler)
    curve = train_mar_grpo(policy, ref, task, draw, rcfg, schedule, run_seed, RunLog(args.curve), ckpt, acc)

    save_mar(policy, args.model_out)
    write_json(
        args.metrics,
        {
            "run": args.run,
            "method": section,
            "task": MAR_TASK,
            "seed": seed,
            "run_seed": run_seed,
            "steps": curve[-1]["step"],
            "rollout_batches": curve[-1]["rollout_batch"],
            "samples": curve[-1]["samples"],
            "reward_first": curve[0]["reward"],
            "reward_last": curve[-1]["reward"],
            "seconds": time.time() - start,
        },
    )
    ckpt.clear()
    acc.end_training()


if __name__ == "__main__":
    run_stage(main)
