"""reward: score saved rollouts with the task's reward (the same function GRPO trains on).

Writes one scored record per rollout and the metrics that tell how much room RL has: mean reward, the spread
within groups, the fraction of groups whose rewards are all equal (frac_reward_zero_std, no GRPO signal), and
pass@G (a group with at least one fully correct completion).

    python stages/reward.py --params params.yaml --tasks data/download/tasks --task sudoku4 \
        --rollouts data/rollout/sft/sudoku4.jsonl --out data/reward/sft/sudoku4.jsonl \
        --metrics data/reward/sft/sudoku4.json
"""

import ddmrl  # noqa: F401, I001  (first: pins the CPU numerics before numpy loads its BLAS; ddmrl.numerics)
import argparse

import torch

from ddmrl import config
from ddmrl.cli import run_stage
from ddmrl.io import read_jsonl, write_json, write_jsonl
from ddmrl.objectives.advantages import group_advantages
from ddmrl.tasks.base import Example
from ddmrl.tasks.store import load_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--rollouts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--metrics", required=True)
    args = ap.parse_args()
    config.load(args.params)  # validate before any work

    task, _ = load_task(args.tasks, args.task)
    records = read_jsonl(args.rollouts, required=("group", "sample", "example", "completion"))
    examples = [Example.from_record(r["example"]) for r in records]
    scored = [
        r | {"reward": task.reward(r["completion"], ex), **task.score(r["completion"], ex)}
        for r, ex in zip(records, examples, strict=True)
    ]

    g = 1 + max(r["sample"] for r in records)
    rewards = torch.tensor([r["reward"] for r in scored])  # [B * G], grouped consecutively
    _, zero_std = group_advantages(rewards, g)
    correct = torch.tensor([bool(r["correct"]) for r in scored]).view(-1, g)
    write_jsonl(args.out, scored)
    write_json(
        args.metrics,
        {
            "task": args.task,
            "reward": rewards.mean().item(),
            "reward_std": rewards.view(-1, g).std(1).mean().item(),
            "frac_reward_zero_std": zero_std.float().mean().item(),
            "accuracy": 100 * correct.float().mean().item(),
            "pass_at_g": 100 * correct.any(1).float().mean().item(),
            "num_generations": g,
            "n": len(scored),
        },
    )


if __name__ == "__main__":
    run_stage(main)
