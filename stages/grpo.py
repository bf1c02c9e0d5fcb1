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

from ddmrl import config
from ddmrl.cli import run_stage
from ddmrl.seeding import derive_seed, seed_everything
from ddmrl.training import preempt, recipe


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
    run_seed = derive_seed(cfg.seed, "grpo", args.run)
    seed_everything(run_seed)  # the same on every process (adapter initialisation)

    run = recipe.setup(cfg, args.run, run_seed, args.tasks, args.model, args.curve, args.checkpoints, args.log_dir)
    recipe.write_config(run, args.config_out)
    curve, timing = recipe.train(run, args.log_dir)
    recipe.save(run, curve, timing, args.model_out, args.metrics)
    recipe.clean_up(run)


if __name__ == "__main__":
    run_stage(main)
