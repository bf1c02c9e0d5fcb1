"""The papers' comparison table and curves, computed only from the runs' own metric files.

Rows: base, SFT, then one row per GRPO method section; columns per task: held-out accuracy (percent, d1's
aggregation) and mean reward, then RL optimiser steps and wall time per run (means over the row's runs). With
several seeds an accuracy or reward cell is ``mean ± std`` over seeds: the std is the run-to-run spread.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ddmrl.config import Config, run_name  # noqa: E402
from ddmrl.geneval import summarize  # noqa: E402
from ddmrl.io import read_json  # noqa: E402

DISPLAY = {
    "base": "base",
    "sft": "SFT",
    "diffu_grpo": "diffu-GRPO",
    "unigrpo": "UniGRPO",
    "maskgrpo": "MaskGRPO",
    "rebrl": "RebRL",
    "tracerl": "TraceRL",
    "gdpo": "GDPO",
    "spg": "SPG",
    "wd1": "wd1",
}


def display(name: str) -> str:
    return DISPLAY.get(name, name)


def run_of(cfg: Config, model: str) -> tuple[str, str, int] | None:
    """(method section, task, seed) of a GRPO run name, or None for base / sft."""
    return next((r for r in cfg.runs() if run_name(*r) == model), None)


def results_frame(cfg: Config, evals: list[dict[str, Any]], curves: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (row label, task, seed): accuracy, mean_reward, steps, seconds."""
    rows = []
    for e in evals:
        run = run_of(cfg, e["model"])
        label, seed = (run[0], run[2]) if run else (e["model"], 0)
        curve = curves.get(e["model"])
        rows.append(
            {
                "row": label,
                "task": e["task"],
                "seed": seed,
                "accuracy": e["accuracy"],
                "mean_reward": e["mean_reward"],
                "steps": int(curve["step"].iloc[-1]) if curve is not None else math.nan,
                "seconds": float(curve["time"].iloc[-1]) if curve is not None else math.nan,
            }
        )
    return pd.DataFrame(rows)


def _cell(values: pd.Series, digits: int) -> str:
    values = values.dropna()
    if values.empty:
        return "—"
    if len(values) == 1:
        return f"{values.iloc[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std():.{digits}f}"


def _mean(values: pd.Series) -> str:
    values = values.dropna()
    return "—" if values.empty else f"{values.mean():.0f}"


def main_table(cfg: Config, frame: pd.DataFrame) -> pd.DataFrame:
    """The comparison table: rows base, SFT, methods; per-task accuracy and reward, RL steps and wall time."""
    order = ["base", "sft", *cfg.grpo.methods]
    out = []
    for label in order:
        sub = frame[frame["row"] == label]
        if sub.empty:
            continue
        row = {"model": display(label)}
        for t in cfg.tasks:
            st = sub[sub["task"] == t]
            row[f"{t} acc (%)"] = _cell(st["accuracy"], 1)
            row[f"{t} reward"] = _cell(st["mean_reward"], 3)
        row["RL steps"] = _mean(sub["steps"])
        row["RL wall time per run (s)"] = _mean(sub["seconds"])
        row["seeds"] = str(sub["seed"].nunique())
        out.append(row)
    return pd.DataFrame(out)


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub Markdown table (no extra dependency)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(str(v) for v in r) + " |" for r in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def to_html(df: pd.DataFrame, title: str) -> str:
    """A standalone HTML page holding the table (what ``snakemake --report`` shows)."""
    table = df.to_html(index=False, border=0, classes="ddmrl-table", na_rep="—")
    style = "body{font-family:sans-serif} table{border-collapse:collapse} td,th{padding:4px;border:1px solid #999}"
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{title}</title><style>{style}</style></head>"
        f"<body><h2>{title}</h2>\n{table}\n</body></html>\n"
    )


def headline_metrics(frame: pd.DataFrame | None, images: pd.DataFrame | None) -> dict[str, Any]:
    """The tables' headline numbers (``dvc metrics``, ``dvc exp show``): held-out accuracy per text task and row,
    GenEval Overall per image task and row, means over seeds (rows: base, sft, method sections)."""
    out: dict[str, Any] = {}
    for key, df, column in (("accuracy", frame, "accuracy"), ("geneval_overall", images, "Overall")):
        if df is None or df.empty:
            continue
        for (task, row), value in df.groupby(["task", "row"], sort=False)[column].mean().items():
            out.setdefault(key, {}).setdefault(task, {})[row] = round(float(value), 2)
    return out


def curves_frame(cfg: Config, curves: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every run's curve in one long table, with ``series`` (the run), method section, task and seed: DVC's plots."""
    frames = [
        curves[run_name(m, t, s)].assign(series=run_name(m, t, s), method=m, task=t, seed=s)
        for m, t, s in cfg.runs()
        if run_name(m, t, s) in curves
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["series", "step"])


def mean_curve(cfg: Config, curves: dict[str, pd.DataFrame], method: str, task: str, key: str) -> pd.Series | None:
    """``key`` against optimiser step for one method section and task, averaged over its seeds (None: no run)."""
    runs = [curves.get(run_name(m, t, s)) for m, t, s in cfg.runs() if (m, t) == (method, task)]
    runs = [r for r in runs if r is not None]
    if not runs:
        return None
    return pd.concat([r.set_index("step")[key] for r in runs], axis=1).mean(axis=1)


def plot_curves(
    cfg: Config, curves: dict[str, pd.DataFrame], key: str, path: str | Path, ylabel: str, image: bool = False
) -> None:
    """One panel per task, one line per method (seeds averaged), ``key`` against optimiser step; text tasks, or
    with ``image`` the text-to-image tasks."""
    tasks, methods = (cfg.image.tasks, list(cfg.image_methods)) if image else (cfg.tasks, cfg.grpo.methods)
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for m in methods:
            mean = mean_curve(cfg, curves, m, task, key)
            if mean is None:
                continue
            ax.plot(mean.index, mean.rolling(3, min_periods=1).mean(), label=display(m))
        ax.set_title(task)
        ax.set_xlabel("optimiser step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def rollout_table(reward_metrics: list[dict[str, Any]]) -> pd.DataFrame:
    """Room for RL: SFT samples at the rollout temperature, per task."""
    cols = ["task", "reward", "accuracy", "pass_at_g", "frac_reward_zero_std", "num_generations", "n"]
    return pd.DataFrame([{c: m[c] for c in cols} for m in reward_metrics]).round(3)


def plot_credit(frame: pd.DataFrame, path: str | Path) -> None:
    """Relative per-token credit against the sampler step that revealed the token: one panel per task for the
    configured methods, one for RebRL's modes under trajectory masks (RebRL Eq. 10 and its rebalancing)."""
    tasks = sorted(frame["task"].unique())
    if not tasks:  # no rollout had a non-zero advantage: nothing to measure
        fig, ax = plt.subplots(figsize=(5, 2))
        ax.text(0.5, 0.5, "no rollout with a non-zero advantage:\nno gradient credit to measure", ha="center")
        ax.axis("off")
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return
    fig, axes = plt.subplots(2, len(tasks), figsize=(5 * len(tasks), 7), squeeze=False)
    for col, task in enumerate(tasks):
        sub = frame[frame["task"] == task]
        for row, variants in enumerate((False, True)):
            ax = axes[row][col]
            for name, g in sub.groupby("method", sort=False):
                if ("[" in name) == variants:
                    ax.plot(g["reveal_step"], g["relative_credit"], marker="o", ms=3, label=display(name))
            ax.axhline(1.0, color="grey", lw=0.8, ls=":")
            ax.set_title(f"{task}: " + ("RebRL modes, trajectory masks" if variants else "methods as configured"))
            ax.set_xlabel("sampler step that revealed the token")
            ax.set_ylabel("gradient credit / mean")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ text-to-image

#: GenEval's tags and the column names of RebRL's and MaskGRPO's tables
IMAGE_COLUMNS = {
    "single_object": "Single",
    "two_object": "Two",
    "counting": "Counting",
    "colors": "Colors",
    "position": "Position",
    "color_attr": "Attr. binding",
}


def image_frame(cfg: Config, results: list[str | Path]) -> pd.DataFrame:
    """One row per (row label, task, seed): per-tag accuracy and Overall (percent), GenEval's summary of each
    results JSONL ``data/evaluate/<model>/<task>_results.jsonl``."""
    rows = []
    for path in map(Path, results):
        model, task = path.parent.name, path.name.removesuffix("_results.jsonl")
        summary = summarize(path)
        run = run_of(cfg, model)
        label, seed = (run[0], run[2]) if run else (model, 0)
        tags = {col: summary["tags"].get(t, {}).get("accuracy", math.nan) for t, col in IMAGE_COLUMNS.items()}
        rows.append({"row": label, "task": task, "seed": seed, **tags, "Overall": summary["overall"]})
    return pd.DataFrame(rows)


def steps_to_reach(curve: pd.Series, target: float, window: int = 3) -> float:
    """The first optimiser step at which the reward, smoothed over ``window`` rollout batches, reaches ``target``
    (nan if it never does)."""
    smooth = curve.rolling(window, min_periods=1).mean()
    hit = smooth[smooth >= target - 1e-12]
    return float(hit.index[0]) if len(hit) else math.nan


def image_table(cfg: Config, frame: pd.DataFrame, curves: dict[str, pd.DataFrame], target: str = "unigrpo"):
    """RebRL's GenEval table: rows base and the image methods; columns the six tags and Overall (GenEval's
    unweighted mean of tag accuracies), mean ± std over seeds; plus the optimiser steps each method needed to reach
    ``target``'s final rollout reward (its last 3 rollout batches, seeds averaged; RebRL reports ~40 % fewer)."""
    task = cfg.image.tasks[0]
    final = mean_curve(cfg, curves, target, task, "reward")
    goal = float(final.iloc[-3:].mean()) if final is not None else math.nan
    out = []
    for label in ["base", *cfg.image_methods]:
        sub = frame[frame["row"] == label]
        if sub.empty:
            continue
        row = {"model": display(label)}
        row |= {col: _cell(sub[col], 1) for col in [*IMAGE_COLUMNS.values(), "Overall"]}
        curve = mean_curve(cfg, curves, label, task, "reward")
        steps = steps_to_reach(curve, goal) if curve is not None else math.nan
        row[f"steps to {display(target)}'s final reward"] = "—" if math.isnan(steps) else f"{steps:.0f}"
        row["seeds"] = str(sub["seed"].nunique())
        out.append(row)
    return pd.DataFrame(out), goal


#: evaluation benchmarks of the image branch (image.eval_tasks): their column in the image table
BENCHMARK_COLUMNS = {"hps": "HPSv3", "dpg": "DPG"}


def with_benchmarks(cfg: Config, table: pd.DataFrame, evals: list[dict[str, Any]]) -> pd.DataFrame:
    """``table`` (one row per image model) with a column per benchmark of ``image.eval_tasks`` after Overall: each
    model's ``score`` (HPSv3: the mean of HPSv3's mu over images; DPG: DPG-Bench's score x 100), over seeds as the
    table's other columns. ``evals`` are the benchmarks' metrics (``data/evaluate/<model>/<benchmark>.json``)."""
    rows = []
    for e in evals:
        run = run_of(cfg, e["model"])
        rows.append({"model": display(run[0] if run else e["model"]), "bench": BENCHMARK_COLUMNS[e["task"]],
                     "score": e["score"]})  # fmt: skip
    if not rows:
        return table
    cells = pd.DataFrame(rows).groupby(["model", "bench"])["score"].apply(lambda v: _cell(v, 2)).unstack("bench")
    out = table.merge(cells, left_on="model", right_index=True, how="left").fillna("—")
    columns = list(table.columns)
    at = columns.index("Overall") + 1 if "Overall" in columns else len(columns)
    names = [BENCHMARK_COLUMNS[b] for b in cfg.image.eval_tasks]
    return out[columns[:at] + names + columns[at:]]


def contact_sheet(folder: str | Path, prompts: list[str], path: str | Path, title: str) -> None:
    """The sample PNGs of the given prompt folders (GenEval layout ``<folder>/<NNNNN>/samples/*.png``) side by side,
    one row per prompt, labelled with its prompt text."""
    from PIL import Image

    folder = Path(folder)
    samples = len(list((folder / prompts[0] / "samples").glob("*.png")))
    size = (max(4.0, 1.3 * samples), 1.45 * len(prompts) + 0.4)
    fig, axes = plt.subplots(len(prompts), 1, figsize=size, squeeze=False)
    for ax, name in zip(axes[:, 0], prompts, strict=True):
        samples = sorted((folder / name / "samples").glob("*.png"))
        images = [Image.open(p).convert("RGB") for p in samples]
        strip = Image.new("RGB", (sum(i.width + 4 for i in images), max(i.height for i in images)), "white")
        x = 0
        for i in images:
            strip.paste(i, (x, 0))
            x += i.width + 4
        ax.imshow(strip)
        ax.set_title(read_json(folder / name / "metadata.jsonl")["prompt"], fontsize=8, loc="left")
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def contact_prompts(folder: str | Path, per_tag: int = 2) -> list[str]:
    """The first ``per_tag`` prompt folders of every tag in a GenEval layout folder (the contact sheets' rows)."""
    chosen: dict[str, list[str]] = {}
    for sub in sorted(p for p in Path(folder).iterdir() if p.name.isdigit()):
        tag = read_json(sub / "metadata.jsonl")["tag"]
        if len(chosen.setdefault(tag, [])) < per_tag:
            chosen[tag].append(sub.name)
    return [name for names in chosen.values() for name in names]
