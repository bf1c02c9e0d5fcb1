"""sft: masked-diffusion fine-tuning on prompt/answer pairs, the prompt never masked (LLaDA SFT; d1 ``SFT/``).

The answer and its EOS padding are masked with ratio t ~ U(0, 1) and the loss is CE / t over the completion.
Training pairs are drawn fresh from each task's generator, disjoint from the held-out set; tasks alternate.

    python stages/sft.py --params params.yaml --tasks data/download/tasks --model data/download/base \
        --model-out data/sft/model --metrics data/sft/metrics.json --curve data/sft/curve.csv \
        --config-out data/sft/config.yaml --checkpoints data/checkpoints/sft --log-dir logs/sft

The curve grows by a row every ``log_every`` steps while the stage runs, and goes to the trackers of
``sft.report_to`` (TensorBoard and DVCLive under ``--log-dir`` by default).

On several GPUs the same command runs under accelerate (``sft.launch``; docs/distributed.md): every process trains
on its share of each batch, the main process writes the outputs (LoRA adapters merged in).
"""

import ddmrl  # noqa: F401, I001  (first: pins the CPU numerics before numpy loads its BLAS; ddmrl.numerics)
import argparse
import dataclasses
import time

import yaml

from ddmrl import config
from ddmrl.cli import run_stage
from ddmrl.io import write_json, write_text
from ddmrl.models.checkpoint import checkpoint_digest, load_checkpoint
from ddmrl.seeding import generator, seed_everything
from ddmrl.tasks.store import load_task, training_draw
from ddmrl.training import distributed as dist
from ddmrl.tasks.encoding import encode_examples
from ddmrl.training.mdm import train_mdm
from ddmrl.training.resume import Checkpointer, fingerprint
from ddmrl.training.tracking import RunLog, plain, start_trackers, trackers, without_trackers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
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
    sc = cfg.sft
    seed_everything(cfg.seed)  # the same on every process (adapter initialisation)
    start = time.time()

    # loaded whole before the Accelerator exists (under ZeRO-3 transformers would otherwise load it partitioned)
    model, tok = load_checkpoint(args.model)
    model = dist.prepare_model(model, sc.mixed_precision, sc.gradient_checkpointing, sc.lora)
    acc = dist.make_accelerator(
        sc.mixed_precision,
        log_with=trackers(sc.report_to, args.log_dir, "sft", "sft.report_to"),
        timeout_s=sc.launch.timeout_s,
    )
    rank, world = acc.process_index, acc.num_processes
    tasks = [load_task(args.tasks, name) for name in cfg.tasks]
    draws = [training_draw(task, held_out, cfg.seed, "sft", sc.batch_size) for task, held_out in tasks]

    def next_batch(step: int):  # this process's share of the step's global batch
        i = step % len(tasks)
        return encode_examples(tok, tasks[i][0], dist.shard(draws[i](step), rank, world, "sft.batch_size"))

    hyper = dataclasses.asdict(sc)
    resolved = plain({"seed": cfg.seed, "tasks": cfg.tasks, "model": args.model, "profile": cfg.profile,
                      "num_processes": world, "sft": hyper})  # fmt: skip
    if args.config_out and acc.is_main_process:
        write_text(args.config_out, yaml.safe_dump(resolved, sort_keys=False))
    run_id = fingerprint(
        "sft",
        cfg.seed,
        cfg.tasks,
        without_trackers(hyper),
        checkpoint_digest(args.model),
        *dist.fingerprint_parts(acc),
    )
    ckpt = Checkpointer(args.checkpoints, run_id, sc.save_total_limit)
    print(f"sft: process {rank + 1}/{world} on {acc.device}", flush=True)
    start_trackers(acc, "sft", resolved, args.log_dir)
    gen = generator(dist.rank_seed(cfg.seed, rank), "sft")  # this process's masking draws
    block = cfg.model.block_size if cfg.model.kind == "tiny_block" else None  # block diffusion: SFT by blocks
    curve = train_mdm(
        model, next_batch, sc, "sft", gen, "sft", ckpt, accelerator=acc, run_log=RunLog(args.curve), block_length=block
    )

    dist.report_weights(acc, model, "sft")
    dist.save_policy(acc, model, tok, args.model_out)  # main process only; LoRA adapters merged
    if acc.is_main_process:
        write_json(
            args.metrics,
            {"sft_loss": curve[-1]["loss"] if curve else None, "seconds": time.time() - start, "num_processes": world},
        )
        ckpt.clear()
    acc.wait_for_everyone()
    acc.end_training()


if __name__ == "__main__":
    run_stage(main)
