"""evaluate: held-out accuracy of one model on one task with d1's protocol (greedy, low-confidence, semi-AR).

Writes every generation (d1's record fields: question, ground_truth, generation) and the metrics: accuracy in
percent (Sudoku: cell accuracy over the empty cells, pooled; Countdown: exact), and the mean training reward.

    python stages/evaluate.py --params params.yaml --tasks data/download/tasks --model data/sft/model \
        --task sudoku4 --name sft --generations data/evaluate/sft/sudoku4.jsonl \
        --metrics data/evaluate/sft/sudoku4.json
"""

import argparse

from ddmrl import config
from ddmrl.cli import run_stage
from ddmrl.evaluation import evaluate
from ddmrl.io import write_json, write_jsonl
from ddmrl.models.checkpoint import load_checkpoint
from ddmrl.tasks.store import load_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--name", required=True, help="model name in the tables: base, sft or a GRPO run")
    ap.add_argument("--generations", required=True)
    ap.add_argument("--metrics", required=True)
    args = ap.parse_args()
    cfg = config.load(args.params)

    model, tok = load_checkpoint(args.model)
    task, held_out = load_task(args.tasks, args.task)
    metrics, records = evaluate(model, tok, task, held_out, cfg.evaluate.sampler, cfg.evaluate.batch_size, cfg.seed)

    write_jsonl(args.generations, records)
    write_json(args.metrics, {"model": args.name, "task": args.task, **metrics})


if __name__ == "__main__":
    run_stage(main)
