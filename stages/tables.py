"""tables: the comparison tables (rows base, SFT and every method; per task the held-out accuracy with its 95 %
interval, the paired gain over the starting model, the mean reward; the budget, seeds and wall time), the samples
each method needed to reach UniGRPO's final reward, the reward and KL curves against samples seen, and the
per-token credit by reveal step with its summary, computed only from the runs' own output files. With
text-to-image runs also RebRL's GenEval table (per-tag accuracy and Overall from each model's GenEval results
JSONL, with intervals), their curves, and one contact sheet per model (the same prompts side by side).

    python stages/tables.py --params params.yaml --evals data/evaluate/sft/sudoku4.json ... \
        --generations data/evaluate/sft/sudoku4.jsonl ... --curves data/grpo/rebrl_sudoku4_s0/curve.csv ... \
        --rollouts data/reward/sft/sudoku4.json ... --credit data/credit/rebrl/sudoku4.csv ... --out data/tables
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
    credit_summary,
    image_frame,
    image_scores,
    image_table,
    main_table,
    plot_credit,
    plot_curves,
    results_frame,
    rollout_table,
    samples_table,
    text_scores,
    to_markdown,
    versus_table,
)

TEXT_NOTE = """
Accuracy: held-out, percent (Sudoku: d1's cell accuracy pooled over the empty cells), with a 95 % percentile
bootstrap interval over the held-out items and, for rows with several seeds, over the seeds. Δ vs start: the gain
over the model the row starts from (RL rows: SFT; SFT: base) on the same items, with a paired 95 % interval;
* marks an interval that excludes 0. Reward: mean training reward on the held-out items, averaged over seeds.
Budget: rollout batches, samples (completions sampled) and optimiser steps of each run.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--evals", nargs="*", action="extend", default=[])
    ap.add_argument("--generations", nargs="*", action="extend", default=[])
    ap.add_argument("--curves", nargs="*", action="extend", default=[])
    ap.add_argument("--rollouts", nargs="*", action="extend", default=[])
    ap.add_argument("--credit", nargs="*", action="extend", default=[])
    ap.add_argument("--image-results", nargs="*", action="extend", default=[])
    ap.add_argument("--image-folders", nargs="*", action="extend", default=[])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cfg = config.load(args.params)

    curves = {Path(p).parent.name: pd.read_csv(p) for p in args.curves}  # data/grpo/<run>/curve.csv
    intervals, frames, scores = [], [], {}

    with atomic_path(args.out) as out:
        out.mkdir()
        if args.evals:  # text tasks
            evals = [read_json(p) for p in args.evals]
            frame = results_frame(cfg, evals, curves)
            by_path = {Path(p).with_suffix(""): p for p in args.generations}  # data/evaluate/<model>/<task>.jsonl
            scores |= {(e["model"], e["task"]): text_scores(by_path[Path(p).with_suffix("")], e["task"])
                       for p, e in zip(args.evals, evals, strict=True)}  # fmt: skip
            table, table_csv, records = main_table(cfg, frame, scores)
            intervals += records
            frames.append(frame)
            frame.to_csv(out / "results_long.csv", index=False)
            table_csv.to_csv(out / "text_table.csv", index=False)
            (out / "text_table.md").write_text(
                "# Held-out accuracy and reward (text tasks)\n\n" + to_markdown(table) + TEXT_NOTE
            )
            room = rollout_table([read_json(p) for p in args.rollouts])
            room.to_csv(out / "sft_rollouts.csv", index=False)
            (out / "sft_rollouts.md").write_text("# SFT samples before RL (room for RL)\n\n" + to_markdown(room))
            plot_curves(cfg, curves, "reward", out / "reward_curves.png", "mean reward of rollouts")
            plot_curves(cfg, curves, "kl", out / "kl_curves.png", "k3 KL to the SFT reference")
        if args.credit:
            credit = pd.concat([pd.read_csv(p) for p in args.credit])
            plot_credit(credit, out / "credit_by_reveal_step.png")
            summary = credit_summary(credit)
            summary.to_csv(out / "credit_summary.csv", index=False)
            (out / "credit_summary.md").write_text(
                "# Gradient credit by reveal step (SFT rollouts; relative to each rollout's mean)\n\n"
                + to_markdown(summary)
            )
        if args.image_results:
            images = image_frame(cfg, args.image_results, curves)
            scores |= {Path(p).parent.name: image_scores(p) for p in args.image_results}
            table, table_csv, records, goal = image_table(cfg, images, scores, curves)
            intervals += records
            frames.append(images)
            images.to_csv(out / "image_results_long.csv", index=False)
            table_csv.to_csv(out / "image_table.csv", index=False)
            (out / "image_table.md").write_text(
                f"# {cfg.image.tasks[0]}: GenEval accuracy per tag (%), Overall = unweighted mean of tags\n\n"
                + to_markdown(table)
                + "\nEach accuracy with its 95 % bootstrap interval over the image slots (prompt, sample), stratified"
                " by tag, and over seeds; Δ Overall vs base: paired on the same slots (* excludes 0). UniGRPO's"
                f" final rollout reward (mean of its last 3 rollout batches): {goal:.3f}\n"
            )
            plot_curves(cfg, curves, "reward", out / "image_reward_curves.png", "mean reward of rollouts", image=True)
            plot_curves(cfg, curves, "kl", out / "image_kl_curves.png", "k3 KL to the base reference", image=True)
            prompts = contact_prompts(args.image_folders[0])
            for folder in map(Path, args.image_folders):
                contact_sheet(folder, prompts, out / f"contact_sheet_{folder.parent.name}.png", folder.parent.name)
        if frames and "unigrpo" in [*cfg.text_methods, *cfg.image.methods]:
            versus, records = versus_table(cfg, pd.concat(frames), scores, (*cfg.tasks, *cfg.image.tasks))
            intervals += records
            (out / "rebrl_vs_unigrpo.md").write_text(
                "# RebRL (and its ablation rows) minus UniGRPO: held-out accuracy, paired on the items (image: "
                "Overall)\n\n" + to_markdown(versus) + "\n95 % bootstrap intervals; * excludes 0.\n"
            )
        if curves:
            reach = samples_table(cfg, curves)
            reach.to_csv(out / "samples_to_reward.csv", index=False)
            (out / "samples_to_reward.md").write_text(
                "# Samples to reach UniGRPO's final rollout reward (smoothed over 3 rollout batches)\n\n"
                + to_markdown(reach)
            )
        pd.DataFrame(intervals).to_csv(out / "intervals.csv", index=False)


if __name__ == "__main__":
    run_stage(main)
