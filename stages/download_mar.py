"""download_mar: the MAR base model (a masked autoregressive model with continuous tokens) pre-trained on geneval-mini.

Like ``download --modality image`` for the masked-diffusion branch, it builds a base model from scratch, with no
network: it writes geneval-mini's held-out prompts (the image branch's own task parameters, count and seed, so the
MAR rows are judged on the same prompts as every other image row), then pre-trains a TinyMAR (``ddmrl.mar``) with
MAR's diffusion loss on reference scenes drawn fresh from the task generator, every cell encoded as its colour's RGB
in [-1, 1] (``ddmrl.mar.encoding``).

    python stages/download_mar.py --params params.yaml --tasks-out data/download/mar/tasks \
        --model-out data/download/mar/base --metrics data/download/mar/metrics.json \
        --curve data/download/mar/curve.csv --config-out data/download/mar/config.yaml \
        --checkpoints data/checkpoints/download_mar --log-dir logs/download_mar

With ``mar.pretrain.save_steps`` a killed run resumes from its newest intact checkpoint under ``--checkpoints``.
"""

import ddmrl  # noqa: F401, I001  (first: pins the CPU numerics before numpy loads its BLAS; ddmrl.numerics)
import argparse
import dataclasses
import time

import yaml

from ddmrl import config
from ddmrl.cli import run_stage
from ddmrl.config import MAR_TASK
from ddmrl.io import write_json, write_text
from ddmrl.mar.diffusion import training_schedule
from ddmrl.mar.encoding import encode, grids_to_codes
from ddmrl.mar.model import new_tiny_mar, save_mar
from ddmrl.mar.pretrain import train_mar
from ddmrl.seeding import derive_seed, generator, seed_everything
from ddmrl.tasks import make_task
from ddmrl.tasks.geneval_mini import WORDS, all_metadata, parse_grid
from ddmrl.tasks.store import training_draw, write_task
from ddmrl.training import distributed as dist
from ddmrl.training.resume import Checkpointer, fingerprint
from ddmrl.training.tracking import RunLog, plain, start_trackers, trackers, without_trackers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--tasks-out", required=True)
    ap.add_argument("--model-out", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--curve", required=True)
    ap.add_argument("--config-out", help="the resolved configuration of the pre-training (YAML)")
    ap.add_argument("--checkpoints", help="directory for resumable checkpoints (not an output)")
    ap.add_argument("--log-dir", help="directory for the experiment trackers' files (not an output)")
    args = ap.parse_args()
    cfg = config.load(args.params)
    mar, pre = cfg.mar, cfg.mar.pretrain
    seed_everything(derive_seed(cfg.seed, "mar"))
    start = time.time()

    # 1. the task and its held-out prompts: the image branch's (same parameters, count and seed as download_image)
    params = cfg.image.task_params.get(MAR_TASK, {})
    task = make_task(MAR_TASK, **params)
    held_out = task.held_out(cfg.image.download.num_eval, derive_seed(cfg.seed, "eval", MAR_TASK))
    write_task(args.tasks_out, task, params, held_out)
    draw = training_draw(task, held_out, cfg.seed, "mar_pretrain", pre.batch_size)

    # 2. a fresh TinyMAR over the prompt words, one token per cell
    prompt_length = max(len(m["prompt"].split(" ")) for m in all_metadata())
    sizes = dataclasses.asdict(mar.model)
    model = new_tiny_mar(list(WORDS), prompt_length, task.height * task.width, **sizes)

    def next_batch(step: int):
        examples = draw(step)
        grids = [parse_grid(ex.answer, task.height, task.width) for ex in examples]
        return model.encode_prompts([ex.gold["prompt"] for ex in examples]), encode(grids_to_codes(grids))

    # 3. pre-train (resumable)
    resolved = plain({"seed": cfg.seed, "profile": cfg.profile, "task_params": params, "model": sizes,
                      "pretrain": dataclasses.asdict(pre)})  # fmt: skip
    if args.config_out:
        write_text(args.config_out, yaml.safe_dump(resolved, sort_keys=False))
    run_id = fingerprint("download_mar", cfg.seed, params, sizes, without_trackers(dataclasses.asdict(pre)))
    ckpt = Checkpointer(args.checkpoints, run_id, pre.save_total_limit)
    acc = dist.local_accelerator(model, log_with=trackers(pre.report_to, args.log_dir, "download_mar",
                                                          "mar.pretrain.report_to"))  # fmt: skip
    start_trackers(acc, "download_mar", resolved, args.log_dir)
    schedule = training_schedule(mar.model.diffusion_steps)
    curve = train_mar(model, next_batch, pre, schedule, generator(cfg.seed, "mar_pretrain_masks"), ckpt, acc,
                      RunLog(args.curve))  # fmt: skip

    # 4. outputs
    save_mar(model, args.model_out)
    write_json(
        args.metrics,
        {
            "pretrain_loss": curve[-1]["loss"] if curve else None,
            "num_parameters": sum(p.numel() for p in model.parameters()),
            "head_parameters": sum(p.numel() for p in model.head.parameters()),
            "seconds": time.time() - start,
        },
    )
    ckpt.clear()
    acc.end_training()


if __name__ == "__main__":
    run_stage(main)
