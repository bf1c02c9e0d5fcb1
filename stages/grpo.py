"""grpo: online RL of the SFT model (text) or the base model (images) with one GRPO-family method on one task.

The method (diffu-GRPO, UniGRPO, MaskGRPO or RebRL; ``ddmrl.methods``) fixes the training views and token
weights; the loop (``ddmrl.training.grpo``) is shared: LLaDA semi-AR rollouts, task rewards, group advantages,
mu inner iterations on views drawn from stored seeds, token-level clipped ratio and k3 KL to the frozen SFT model.

    python stages/grpo.py --params params.yaml --run rebrl_sudoku4_s0 --tasks data/download/tasks \
        --model data/sft/model --model-out data/grpo/rebrl_sudoku4_s0/model \
        --metrics data/grpo/rebrl_sudoku4_s0/metrics.json --curve data/grpo/rebrl_sudoku4_s0/curve.csv \
        --checkpoints data/checkpoints/grpo_rebrl_sudoku4_s0

With ``save_steps`` the run checkpoints to ``--checkpoints`` and a rerun after a kill resumes there.
"""

import argparse
import copy
import dataclasses
import time
from pathlib import Path

from ddmrl import config
from ddmrl.cli import run_stage, write_csv
from ddmrl.io import write_json
from ddmrl.models.checkpoint import load_checkpoint, save_checkpoint
from ddmrl.models.layout import for_task, unwrap
from ddmrl.seeding import derive_seed, seed_everything
from ddmrl.tasks.store import load_task, training_draw
from ddmrl.training.grpo import train_grpo
from ddmrl.training.resume import Checkpointer, file_digest, fingerprint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--model-out", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--curve", required=True)
    ap.add_argument("--checkpoints", help="directory for resumable checkpoints (not an output)")
    args = ap.parse_args()
    cfg = config.load(args.params)
    gcfg, task_name, seed = cfg.run(args.run)
    run_seed = derive_seed(cfg.seed, "grpo", args.run)
    seed_everything(run_seed)
    start = time.time()

    task, held_out = load_task(args.tasks, task_name)
    policy, tok = load_checkpoint(args.model)
    policy = for_task(policy, tok, task)  # images: MMaDA's layout, logits sliced to the image codes
    ref = copy.deepcopy(policy).requires_grad_(False)
    draw = training_draw(task, held_out, run_seed, "grpo", gcfg.num_prompts)
    run_id = fingerprint(
        "grpo", args.run, run_seed, dataclasses.asdict(gcfg), file_digest(Path(args.model) / "model.safetensors")
    )
    ckpt = Checkpointer(args.checkpoints, run_id, gcfg.save_total_limit)
    curve, timing = train_grpo(policy, ref, tok, task, draw, gcfg, run_seed, checkpointer=ckpt)

    save_checkpoint(unwrap(policy), tok, args.model_out)
    write_csv(args.curve, curve)
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
        },
    )
    ckpt.clear()


if __name__ == "__main__":
    run_stage(main)
