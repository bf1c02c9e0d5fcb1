"""tables: the comparison table (rows base, SFT and every method; per-task held-out accuracy and mean reward,
RL steps, wall time), the reward, KL, loss and clip-ratio curves, and the per-token credit by reveal step, computed
only from the runs' own output files. With text-to-image runs also RebRL's GenEval table (per-tag accuracy and
Overall from each model's GenEval results JSONL, the HPSv3 and DPG-Bench columns of ``image.eval_tasks``, steps to
reach UniGRPO's final reward), their curves, and one contact sheet per model (the same prompts side by side). Also
the headline metrics (``metrics.json``) and every curve in one long table (``curves.csv``), which DVC's metrics and
plots read.

    python stages/tables.py --params params.yaml --evaluate data/evaluate --grpo data/grpo \
        --reward data/reward/sft --credit data/credit --out data/tables

The runs come from params.yaml; their files are found under the given directories by the path convention
(``ddmrl.pipeline.layout``), so the command line is the same whatever the sweep.
"""

import argparse
from pathlib import Path

import pandas as pd

from ddmrl import config
from ddmrl.cli import run_stage, write_csv
from ddmrl.io import atomic_path, read_json, write_json, write_text
from ddmrl.pipeline.layout import CURVES, tables_inputs
from ddmrl.tables import (
    contact_prompts,
    contact_sheet,
    curves_frame,
    headline_metrics,
    image_frame,
    image_table,
    main_table,
    plot_credit,
    plot_curves,
    results_frame,
    rollout_table,
    to_html,
    to_markdown,
    with_benchmarks,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--evaluate", required=True, help="directory of the evaluations (data/evaluate)")
    ap.add_argument("--grpo", required=True, help="directory of the GRPO runs (data/grpo)")
    ap.add_argument("--reward", help="directory of the start model's scored rollouts (data/reward/sft)")
    ap.add_argument("--credit", help="directory of the credit measurements (data/credit)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cfg = config.load(args.params)
    files = tables_inputs(cfg, args.evaluate, args.grpo, args.reward, args.credit or "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    curves = {Path(p).parent.name: pd.read_csv(p) for p in files["curves"]}  # <grpo>/<run>/curve.csv
    write_csv(out / "curves.csv", curves_frame(cfg, curves))
    frame = images = None
    if cfg.tasks:
        frame = results_frame(cfg, [read_json(p) for p in files["evals"]], curves)
        table = main_table(cfg, frame)
        room = rollout_table([read_json(p) for p in files["rollouts"]])
        write_csv(out / "results_long.csv", frame)
        write_csv(out / "text_table.csv", table)
        write_text(out / "text_table.md", "# Held-out accuracy and reward (text tasks)\n\n" + to_markdown(table))
        write_text(out / "text_table.html", to_html(table, "Held-out accuracy and reward (text tasks)"))
        write_csv(out / "sft_rollouts.csv", room)
        write_text(out / "sft_rollouts.md", "# SFT samples before RL (room for RL)\n\n" + to_markdown(room))
        for key, label in CURVES.items():
            plot_curves(cfg, curves, key, out / f"{key}_curves.png", label)
    if files["credit"]:
        credit = pd.concat([pd.read_csv(p) for p in files["credit"]])
        write_csv(out / "credit.csv", credit.assign(series=credit["method"] + " " + credit["task"]))
        plot_credit(credit, out / "credit_by_reveal_step.png")
    if cfg.image.tasks:
        images = image_frame(cfg, files["image_results"])
        table, goal = image_table(cfg, images, curves)
        table = with_benchmarks(cfg, table, [read_json(p) for p in files["image_benchmarks"]])
        title = f"{cfg.image.tasks[0]}: GenEval accuracy per tag (%), Overall = unweighted mean of tags"
        write_csv(out / "image_results_long.csv", images)
        write_csv(out / "image_table.csv", table)
        note = f"\nUniGRPO's final rollout reward (mean of its last 3 rollout batches): {goal:.3f}\n"
        write_text(out / "image_table.md", f"# {title}\n\n" + to_markdown(table) + note)
        write_text(out / "image_table.html", to_html(table, title))
        for key, label in CURVES.items():
            plot_curves(cfg, curves, key, out / f"image_{key}_curves.png", label, image=True)
        prompts = contact_prompts(files["image_folders"][0])
        with atomic_path(out / "contact_sheets") as sheets:
            sheets.mkdir()
            for folder in map(Path, files["image_folders"]):
                model = folder.parent.name
                contact_sheet(folder, prompts, sheets / f"{model}.png", model)
    write_json(out / "metrics.json", headline_metrics(frame, images))


if __name__ == "__main__":
    run_stage(main)
