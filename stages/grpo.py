"""grpo: online RL of the SFT model (text) or the base model (images) with one GRPO-family method on one task.

The method (diffu-GRPO, UniGRPO, MaskGRPO or RebRL; ``ddmrl.methods``) fixes the training views and token
weights; the loop (``ddmrl.training.grpo``) is shared: LLaDA semi-AR rollouts, task rewards, group advantages,
mu inner iterations on views drawn from stored seeds, token-level clipped ratio and k3 KL to the frozen SFT model.

    python stages/grpo.py --params params.yaml --run rebrl_sudoku4_s0 --tasks data/download/tasks \
        --model data/sft/model --model-out data/grpo/rebrl_sudoku4_s0/model \
        --metrics data/grpo/rebrl_sudoku4_s0/metrics.json --curve data/grpo/rebrl_sudoku4_s0/curve.csv \
        --config-out data/grpo/rebrl_sudoku4_s0/config.yaml \
        --checkpoints data/checkpoints/grpo_rebrl_sudoku4_s0 --log-dir logs/grpo_rebrl_sudoku4_s0

With ``save_steps`` the run checkpoints to ``--checkpoints`` and a rerun after a kill resumes there; on SIGUSR1 (a
scheduler's warning before its time limit) it checkpoints at the end of the current rollout batch and exits with 75.
Each rollout batch's row is appended to ``--curve`` as soon as it is done and goes to the trackers of ``report_to``
(TensorBoard and DVCLive under ``--log-dir`` by default); ``--config-out`` gets the run's resolved hyperparameters.

On several GPUs the same command runs under accelerate (``grpo.launch``; docs/distributed.md), e.g.
``accelerate launch --config_file configs/accelerate/zero2.yaml --num_processes 8 stages/grpo.py ...``: every process
trains on its share of the prompts, the main process writes the outputs. With ``lora.r > 0`` the saved model has its
adapters merged in.
"""

import ddmrl  # noqa: F401, I001  (first: pins the CPU numerics before numpy loads its BLAS; ddmrl.numerics)
import argparse
import copy
import dataclasses
import time

import yaml

from ddmrl import config
from ddmrl.aux_policies.base import new_aux_policy
from ddmrl.cli import run_stage
from ddmrl.io import write_json, write_text
from ddmrl.models.checkpoint import checkpoint_digest, load_checkpoint
from ddmrl.models.layout import for_task
from ddmrl.plan import check_fits
from ddmrl.rollout import sampler_steps
from ddmrl.seeding import derive_seed, seed_everything
from ddmrl.tasks.store import load_task, training_draw
from ddmrl.training import distributed as dist
from ddmrl.training import preempt
from ddmrl.training.grpo import train_grpo
from ddmrl.training.resume import Checkpointer, fingerprint
from ddmrl.training.tracking import RunLog, plain, start_trackers, trackers, without_trackers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--model-out", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--curve", required=True)
    ap.add_argument("--config-out", help="the run's resolved hyperparameters (YAML)")
    ap.add_argument("--checkpoints", help="directory for resumable checkpoints (not an output)")
    ap.add_argument("--log-dir", help="directory for the experiment trackers' files (not an output)")
    args = ap.parse_args()
    # SIGUSR1 (sbatch --signal=USR1@600) from here on, start-up included: checkpoint at the next rollout batch, exit 75
    preempt.install()
    cfg = config.load(args.params)
    gcfg, task_name, seed = cfg.run(args.run)
    run_seed = derive_seed(cfg.seed, "grpo", args.run)
    seed_everything(run_seed)  # the same on every process (adapter initialisation)
    start = time.time()

    # loaded whole before the Accelerator exists (under ZeRO-3 transformers would otherwise load it partitioned)
    task, held_out = load_task(args.tasks, task_name)
    policy, tok = load_checkpoint(args.model)
    if gcfg.launch.gpu_memory_gib:  # a run that cannot fit its GPUs stops here, before any GPU work
        check_fits(gcfg, cfg.image.model if task_name in cfg.image.tasks else cfg.model, args.model, tok, task)
    needs_ref = gcfg.beta and gcfg.kl_target == "ref" and not gcfg.aux_policy.freeze_model
    # LoRA: the base is the reference; a frozen model (only an auxiliary policy trains) or no KL: no reference
    ref = copy.deepcopy(policy).requires_grad_(False) if needs_ref and not gcfg.lora.r else None
    # an auxiliary policy (Co-GRPO's schedule, a learned unmasking policy), initialised from the run's seed
    aux = new_aux_policy(gcfg.aux_policy, sampler_steps(gcfg.sampler, task.completion_length))
    policy = dist.prepare_model(policy, gcfg.mixed_precision, gcfg.gradient_checkpointing, gcfg.lora)
    # images: MMaDA's layout (prompt, <soi>, image, <eoi>), logits sliced to the image codes
    policy = for_task(policy, tok, task)
    ref = None if ref is None else for_task(ref, tok, task)
    name = f"grpo_{args.run}"
    log_with = trackers(gcfg.report_to, args.log_dir, name, "grpo.report_to")
    acc = dist.make_accelerator(gcfg.mixed_precision, gcfg.gradient_accumulation_steps, log_with=log_with)
    draw = training_draw(task, held_out, run_seed, "grpo", gcfg.num_prompts)  # the global batch; each process shards
    hyper = dataclasses.asdict(gcfg)
    resolved = plain({"run": args.run, "task": task_name, "seed": seed, "run_seed": run_seed, "model": args.model,
                      "profile": cfg.profile, "num_processes": acc.num_processes, "grpo": hyper})  # fmt: skip
    if args.config_out and acc.is_main_process:
        write_text(args.config_out, yaml.safe_dump(resolved, sort_keys=False))
    run_id = fingerprint(
        "grpo",
        args.run,
        run_seed,
        without_trackers(hyper),
        checkpoint_digest(args.model),
        *dist.fingerprint_parts(acc),
    )
    ckpt = Checkpointer(args.checkpoints, run_id, gcfg.save_total_limit)
    print(f"grpo: process {acc.process_index + 1}/{acc.num_processes} on {acc.device}", flush=True)
    start_trackers(acc, name, resolved, args.log_dir)
    log = RunLog(args.curve)  # a row per rollout batch, appended as it comes (main process)
    curve, timing = train_grpo(
        policy, ref, tok, task, draw, gcfg, run_seed, log, ckpt, accelerator=acc, aux_policy=aux
    )

    dist.report_weights(acc, policy, "grpo")
    dist.save_policy(acc, policy, tok, args.model_out, aux)  # main process only; LoRA adapters merged
    if acc.is_main_process:
        write_json(
            args.metrics,
            {
                "run": args.run,
                "method": gcfg.method,
                "task": task_name,
                "seed": seed,
                "run_seed": run_seed,  # every draw of the run derives from it (ddmrl.seeding.derive_seed)
                "steps": curve[-1]["step"],
                "reward_first": curve[0]["reward"],
                "reward_last": curve[-1]["reward"],
                "seconds": time.time() - start,
                "timing": dataclasses.asdict(timing),
                "nonfinite_skipped": curve[-1]["nonfinite_skipped"],
                "num_processes": acc.num_processes,
            },
        )
        ckpt.clear()
    acc.wait_for_everyone()
    acc.end_training()


if __name__ == "__main__":
    run_stage(main)
