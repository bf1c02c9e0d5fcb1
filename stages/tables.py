"""tables: the comparison tables (rows base, SFT and every method; per task the held-out accuracy with its 95 %
interval, the paired gain over the starting model, the mean reward, with evaluate.sampled_temperature the same at
that temperature; the budget, seeds and wall time; per difficulty level where the items span several), the samples
each method needed to reach UniGRPO's final reward, RebRL's rows minus UniGRPO, the reward, KL, loss and clip-ratio
curves against samples seen, and the per-token credit by reveal step with its summary, computed only from the runs'
own output files. With text-to-image runs also RebRL's GenEval table (per-tag accuracy and Overall from each model's
GenEval results JSONL, with intervals; the HPSv3 and DPG-Bench columns of ``image.eval_tasks``), their curves, and
one contact sheet per model (the same prompts side by side). Also the headline metrics (``metrics.json``), every
interval (``intervals.csv``) and every curve in one long table (``curves.csv``), which DVC's metrics and plots read.

    python stages/tables.py --params params.yaml --evaluate data/evaluate --grpo data/grpo \
        --reward data/reward/sft --credit data/credit --out data/tables

The runs come from params.yaml; their files are found under the given directories by the path convention
(``ddmrl.pipeline.layout``), so the command line is the same whatever the sweep.
"""

import ddmrl  # noqa: F401, I001  (first: pins the CPU numerics before numpy loads its BLAS; ddmrl.numerics)
import argparse
from pathlib import Path

import pandas as pd

from ddmrl import config
from ddmrl.base_models import ENDS, base_model_table, per_seed_scores, training_reward_table
from ddmrl.cli import run_stage, write_csv
from ddmrl.io import atomic_path, read_json, write_json, write_text
from ddmrl.pipeline.layout import CURVES, per_seed_bases, tables_inputs
from ddmrl.tables import (
    contact_prompts,
    contact_sheet,
    credit_summary,
    curves_frame,
    headline_metrics,
    image_frame,
    image_scores,
    image_table,
    lm_eval_long,
    levels_table,
    lm_eval_table,
    main_table,
    pass_at_k_table,
    plot_credit,
    plot_curves,
    results_frame,
    rollout_table,
    samples_table,
    text_scores,
    to_html,
    to_markdown,
    versus_table,
    with_benchmarks,
)

TEXT_NOTE = """
Accuracy: held-out, percent (Sudoku: d1's cell accuracy pooled over the empty cells), with a 95 % percentile
bootstrap interval over the held-out items and, for rows with several seeds, over the seeds. Δ vs start: the gain
over the model the row starts from (RL rows: SFT; SFT: base) on the same items, with a paired 95 % interval;
* marks an interval that excludes 0. Reward: mean training reward on the held-out items, averaged over seeds.
Budget: rollout batches, samples (completions sampled) and optimiser steps of each run.
"""
SAMPLED_NOTE = """T=t columns: the same items decoded once each at temperature t (evaluate.sampled_temperature, the
rollouts' policy; the same draws for every model), with their interval and the paired gain as above.
"""
LEVELS_NOTE = """
Each line: the held-out items of one level (Sudoku: the number of blanks; the held-out set has every level in equal
shares). Base and SFT: accuracy; an RL row: its gain over its start model on those items, paired as in the text table
(* excludes 0); T=t columns as there.
"""
PER_SEED_NOTE = """With one base model per seed (download.base_per_seed): seed s's base, SFT and RL models come from
base model s, so the intervals over seeds cover the base models, and each gain is paired seed by seed with its own
start model (per base model: base_models.md).
"""
BASE_MODELS_NOTE = """
Per base model (seeds 0 / 1 / 2): the row's accuracy, and its gain over its own start model (paired on the items;
* when that interval excludes 0). Over base models: bootstrapped over the base models (each with its one RL seed)
and the items, each gain paired with its own base model's start model: the text table's Δ vs start.
"""
SAMPLED_BASE_MODELS_NOTE = """
## Sampled at T={t:g}, per base model

The same, on the completions decoded once each at temperature {t:g} (evaluate.sampled_temperature): the text table's
T={t:g} columns, base model by base model.

"""
TRAINING_REWARD_NOTE = f"""
## Training reward per base model

Per base model (seeds 0 / 1 / 2): the run's mean training reward over its first and its last {ENDS} rollout batches
(curve.csv), and the fraction of its groups whose G rewards were all equal (no advantage, no gradient) over the run.
"""
LM_EVAL_NOTE = """
lm-evaluation-harness's own metrics (fractions) on the tasks of lm_eval.tasks, through the ddmrl model class
(docs/lmeval.md): the mean over a row's models, with their range where a row has several (seeds, base models).
Every model's value and lm-eval's standard error are in lm_eval.csv. Not comparable with the accuracy columns of the
text table: another scoring rule, and the tasks lm_eval.tasks names.
"""
IMAGE_NOTE = (
    "\nEach accuracy with its 95 % bootstrap interval over the image slots (prompt, sample), stratified by tag, and"
    " over seeds; Δ Overall vs base: paired on the same slots (* excludes 0). UniGRPO's final rollout reward (mean"
    " of its last 3 rollout batches): {goal:.3f}\n"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--evaluate", required=True, help="directory of the evaluations (data/evaluate)")
    ap.add_argument("--grpo", required=True, help="directory of the GRPO runs (data/grpo)")
    ap.add_argument("--reward", help="directory of the start model's scored rollouts (data/reward/sft)")
    ap.add_argument("--credit", help="directory of the credit measurements (data/credit)")
    ap.add_argument("--lm-eval", help="directory of lm-evaluation-harness's results (data/lm_eval; lm_eval.tasks)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cfg = config.load(args.params)
    files = tables_inputs(cfg, args.evaluate, args.grpo, args.reward, args.credit or "", args.lm_eval or "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    curves = {Path(p).parent.name: pd.read_csv(p) for p in files["curves"]}  # <grpo>/<run>/curve.csv
    write_csv(out / "curves.csv", curves_frame(cfg, curves))
    intervals, frames, scores = [], [], {}
    if cfg.tasks:
        evals = [read_json(p) for p in files["evals"]]
        frame = results_frame(cfg, evals, curves)
        scores |= {(e["model"], e["task"]): text_scores(p, e["task"])
                   for p, e in zip(files["generations"], evals, strict=True)}  # fmt: skip
        sampled = None  # the completions sampled at evaluate.sampled_temperature, when the evaluations have them
        if cfg.evaluate.sampled_temperature:
            sampled = {(e["model"], e["task"]): text_scores(p, e["task"], sampled=True)
                       for p, e in zip(files["generations"], evals, strict=True)}  # fmt: skip
        table, table_csv, records = main_table(cfg, frame, scores, sampled)
        intervals += records
        levels, records = levels_table(cfg, frame, scores, sampled)  # tasks whose items span several levels
        intervals += records
        title = "Held-out accuracy per difficulty level (base, SFT) and each RL row's gain over SFT"
        body = to_markdown(levels) + LEVELS_NOTE if records else "No task's held-out items span several levels.\n"
        write_text(out / "levels.md", f"# {title}\n\n" + body)
        if per_seed_bases(cfg):  # each seed its own base model: the rows base model by base model
            by_base, _ = base_model_table(cfg, per_seed_scores(cfg, scores))
            title = "Held-out accuracy per base model (seed s's runs start from base model s)"
            body = to_markdown(by_base) + BASE_MODELS_NOTE
            if sampled:
                at_t, _ = base_model_table(cfg, per_seed_scores(cfg, sampled))
                body += SAMPLED_BASE_MODELS_NOTE.format(t=cfg.evaluate.sampled_temperature) + to_markdown(at_t)
            body += TRAINING_REWARD_NOTE + "\n" + to_markdown(training_reward_table(cfg, curves))
            write_text(out / "base_models.md", f"# {title}\n\n" + body)
        frames.append(frame)
        room = rollout_table([read_json(p) for p in files["rollouts"]])
        write_csv(out / "results_long.csv", frame)
        write_csv(out / "text_table.csv", table_csv)
        title = "Held-out accuracy and reward (text tasks)"
        note = TEXT_NOTE + (SAMPLED_NOTE if sampled else "") + (PER_SEED_NOTE if per_seed_bases(cfg) else "")
        write_text(out / "text_table.md", f"# {title}\n\n" + to_markdown(table) + note)
        write_text(out / "text_table.html", to_html(table, title))
        write_csv(out / "sft_rollouts.csv", room)
        write_text(out / "sft_rollouts.md", "# SFT samples before RL (room for RL)\n\n" + to_markdown(room))
        for key, label in CURVES.items():
            plot_curves(cfg, curves, key, out / f"{key}_curves.png", label)
        if cfg.evaluate.pass_at_k.n:  # sampled completions per item: pass@k beside the greedy accuracy
            passes, records = pass_at_k_table(cfg, frame, evals)
            intervals += records
            write_csv(out / "pass_at_k.csv", pd.DataFrame(records))
            note = (f"\n{cfg.evaluate.pass_at_k.n} samples per held-out item at temperature "
                    f"{cfg.evaluate.pass_at_k.temperature}; unbiased estimator (Chen et al. 2021), 95 % bootstrap "
                    "interval over the items and seeds.\n")  # fmt: skip
            write_text(out / "pass_at_k.md", "# pass@k (text tasks)\n\n" + to_markdown(passes) + note)
    if files["lm_eval"]:  # lm-evaluation-harness's metrics of every text model (lm_eval.tasks)
        long = lm_eval_long(cfg, {Path(p).parent.name: read_json(p) for p in files["lm_eval"]})
        write_csv(out / "lm_eval.csv", long)
        title = "lm-evaluation-harness (lm_eval.tasks): its own metrics per model row"
        write_text(out / "lm_eval.md", f"# {title}\n\n" + to_markdown(lm_eval_table(long)) + LM_EVAL_NOTE)
    if files["credit"]:
        credit = pd.concat([pd.read_csv(p) for p in files["credit"]])
        write_csv(out / "credit.csv", credit.assign(series=credit["method"] + " " + credit["task"]))
        plot_credit(credit, out / "credit_by_reveal_step.png")
        summary = credit_summary(credit)
        write_csv(out / "credit_summary.csv", summary)
        title = "Gradient credit by reveal step (SFT rollouts; relative to each rollout's mean)"
        write_text(out / "credit_summary.md", f"# {title}\n\n" + to_markdown(summary))
    if cfg.image.tasks:
        images = image_frame(cfg, files["image_results"], curves)
        scores |= {Path(p).parent.name: image_scores(p) for p in files["image_results"]}
        table, table_csv, records, goal = image_table(cfg, images, scores, curves)
        benchmarks = [read_json(p) for p in files["image_benchmarks"]]
        table, table_csv = with_benchmarks(cfg, table, benchmarks), with_benchmarks(cfg, table_csv, benchmarks, False)
        intervals += records
        frames.append(images)
        title = f"{cfg.image.tasks[0]}: GenEval accuracy per tag (%), Overall = unweighted mean of tags"
        write_csv(out / "image_results_long.csv", images)
        write_csv(out / "image_table.csv", table_csv)
        write_text(out / "image_table.md", f"# {title}\n\n" + to_markdown(table) + IMAGE_NOTE.format(goal=goal))
        write_text(out / "image_table.html", to_html(table, title))
        for key, label in CURVES.items():
            plot_curves(cfg, curves, key, out / f"image_{key}_curves.png", label, image=True)
        prompts = contact_prompts(files["image_folders"][0])
        with atomic_path(out / "contact_sheets") as sheets:
            sheets.mkdir()
            for folder in map(Path, files["image_folders"]):
                model = folder.parent.name
                contact_sheet(folder, prompts, sheets / f"{model}.png", model)
    frame = pd.concat(frames) if frames else pd.DataFrame(columns=["row", "task", "model"])
    versus, records = versus_table(cfg, frame, scores, (*cfg.tasks, *cfg.image.tasks))
    intervals += records
    write_text(
        out / "rebrl_vs_unigrpo.md",
        "# RebRL (and its ablation rows) minus UniGRPO: held-out accuracy, paired on the items (image: Overall)\n\n"
        + to_markdown(versus)
        + "\n95 % bootstrap intervals; * excludes 0.\n",
    )
    reach = samples_table(cfg, curves)
    write_csv(out / "samples_to_reward.csv", reach)
    title = "Samples to reach UniGRPO's final rollout reward (smoothed over 3 rollout batches)"
    write_text(out / "samples_to_reward.md", f"# {title}\n\n" + to_markdown(reach))
    write_csv(out / "intervals.csv", pd.DataFrame(intervals))
    write_json(out / "metrics.json", headline_metrics(intervals))


if __name__ == "__main__":
    run_stage(main)
