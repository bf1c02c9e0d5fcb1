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

from ddmrl.config import Config  # noqa: E402

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
    for m in cfg.grpo.methods:
        for t in cfg.tasks:
            for s in cfg.grpo.seeds:
                if f"{m}_{t}_s{s}" == model:
                    return m, t, s
    return None


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


def plot_curves(cfg: Config, curves: dict[str, pd.DataFrame], key: str, path: str | Path, ylabel: str) -> None:
    """One panel per task, one line per method (seeds averaged), ``key`` against optimiser step."""
    fig, axes = plt.subplots(1, len(cfg.tasks), figsize=(5 * len(cfg.tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], cfg.tasks, strict=True):
        for m in cfg.grpo.methods:
            runs = [curves[f"{m}_{task}_s{s}"] for s in cfg.grpo.seeds if f"{m}_{task}_s{s}" in curves]
            if not runs:
                continue
            mean = pd.concat([r.set_index("step")[key] for r in runs], axis=1).mean(axis=1)
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
