"""tables: the comparison table (rows base, SFT and every method; per-task held-out accuracy and mean reward,
RL steps, wall time), the reward and KL curves, and the per-token credit by reveal step, computed only from the
runs' own output files. With text-to-image runs also RebRL's GenEval table (per-tag accuracy and Overall from each
model's GenEval results JSONL, steps to reach UniGRPO's final reward), their curves, and one contact sheet per model
(the same prompts side by side).

    python stages/tables.py --params params.yaml --evals data/evaluate/sft/sudoku4.json ... \
        --curves data/grpo/rebrl_sudoku4_s0/curve.csv ... --rollouts data/reward/sft/sudoku4.json ... \
        --credit data/credit/sudoku4.csv ... --out data/tables
"""

import argparse
from pathlib import Path

import pandas as pd

from ddmrl import config
from ddmrl.cli import run_stage
from ddmrl.io import atomic_path, read_json
from ddmrl.tables import (
    contact_prompts,
    contact_sheet,
    image_frame,
    image_table,
    main_table,
    plot_credit,
    plot_curves,
    results_frame,
    rollout_table,
    to_markdown,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--evals", nargs="*", action="extend", default=[])
    ap.add_argument("--curves", nargs="*", action="extend", default=[])
    ap.add_argument("--rollouts", nargs="*", action="extend", default=[])
    ap.add_argument("--credit", nargs="*", action="extend", default=[])
    ap.add_argument("--image-results", nargs="*", action="extend", default=[])
    ap.add_argument("--image-folders", nargs="*", action="extend", default=[])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cfg = config.load(args.params)

    curves = {Path(p).parent.name: pd.read_csv(p) for p in args.curves}  # data/grpo/<run>/curve.csv

    with atomic_path(args.out) as out:
        out.mkdir()
        if args.evals:  # text tasks
            frame = results_frame(cfg, [read_json(p) for p in args.evals], curves)
            table = main_table(cfg, frame)
            room = rollout_table([read_json(p) for p in args.rollouts])
            frame.to_csv(out / "results_long.csv", index=False)
            table.to_csv(out / "text_table.csv", index=False)
            (out / "text_table.md").write_text("# Held-out accuracy and reward (text tasks)\n\n" + to_markdown(table))
            room.to_csv(out / "sft_rollouts.csv", index=False)
            (out / "sft_rollouts.md").write_text("# SFT samples before RL (room for RL)\n\n" + to_markdown(room))
            plot_curves(cfg, curves, "reward", out / "reward_curves.png", "mean reward of rollouts")
            plot_curves(cfg, curves, "kl", out / "kl_curves.png", "k3 KL to the SFT reference")
        if args.credit:
            plot_credit(pd.concat([pd.read_csv(p) for p in args.credit]), out / "credit_by_reveal_step.png")
        if args.image_results:
            images = image_frame(cfg, args.image_results)
            table, goal = image_table(cfg, images, curves)
            images.to_csv(out / "image_results_long.csv", index=False)
            table.to_csv(out / "image_table.csv", index=False)
            (out / "image_table.md").write_text(
                f"# {cfg.image.tasks[0]}: GenEval accuracy per tag (%), Overall = unweighted mean of tags\n\n"
                + to_markdown(table)
                + f"\nUniGRPO's final rollout reward (mean of its last 3 rollout batches): {goal:.3f}\n"
            )
            plot_curves(cfg, curves, "reward", out / "image_reward_curves.png", "mean reward of rollouts", image=True)
            plot_curves(cfg, curves, "kl", out / "image_kl_curves.png", "k3 KL to the base reference", image=True)
            prompts = contact_prompts(args.image_folders[0])
            for folder in map(Path, args.image_folders):
                contact_sheet(folder, prompts, out / f"contact_sheet_{folder.parent.name}.png", folder.parent.name)


if __name__ == "__main__":
    run_stage(main)
