"""sft: masked-diffusion fine-tuning on prompt/answer pairs, the prompt never masked (LLaDA SFT; d1 ``SFT/``).

The answer and its EOS padding are masked with ratio t ~ U(0, 1) and the loss is CE / t over the completion.
Training pairs are drawn fresh from each task's generator, disjoint from the held-out set; tasks alternate.

    python stages/sft.py --params params.yaml --tasks data/download/tasks --model data/download/base \
        --model-out data/sft/model --metrics data/sft/metrics.json --curve data/sft/curve.csv \
        --checkpoints data/checkpoints/sft
"""

import argparse
import dataclasses
import time
from pathlib import Path

from ddmrl import config
from ddmrl.cli import run_stage, write_csv
from ddmrl.io import write_json
from ddmrl.models.checkpoint import load_checkpoint, save_checkpoint
from ddmrl.seeding import generator, seed_everything
from ddmrl.tasks.store import load_task, training_draw
from ddmrl.training.data import encode_examples
from ddmrl.training.mdm import train_mdm
from ddmrl.training.resume import Checkpointer, file_digest, fingerprint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--model-out", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--curve", required=True)
    ap.add_argument("--checkpoints", help="directory for resumable checkpoints (not an output)")
    args = ap.parse_args()
    cfg = config.load(args.params)
    seed_everything(cfg.seed)
    start = time.time()

    model, tok = load_checkpoint(args.model)
    tasks = [load_task(args.tasks, name) for name in cfg.tasks]
    draws = [training_draw(task, held_out, cfg.seed, "sft", cfg.sft.batch_size) for task, held_out in tasks]

    def next_batch(step: int):
        i = step % len(tasks)
        return encode_examples(tok, tasks[i][0], draws[i](step))

    run_id = fingerprint(
        "sft", cfg.seed, cfg.tasks, dataclasses.asdict(cfg.sft), file_digest(Path(args.model) / "model.safetensors")
    )
    ckpt = Checkpointer(args.checkpoints, run_id, cfg.sft.save_total_limit)
    curve = train_mdm(model, next_batch, cfg.sft, "sft", generator(cfg.seed, "sft"), "sft", ckpt)

    save_checkpoint(model, tok, args.model_out)
    write_csv(args.curve, curve)
    write_json(args.metrics, {"sft_loss": curve[-1]["loss"] if curve else None, "seconds": time.time() - start})
    ckpt.clear()


if __name__ == "__main__":
    run_stage(main)
