"""The papers' comparison tables and curves, computed only from the runs' own output files.

Text table: rows base, SFT, then one row per GRPO method section (the RebRL ablation rows when they run); per task
the held-out accuracy (percent, d1's aggregation) with its 95 % interval, the gain over the model the row starts
from with a paired 95 % interval on the same held-out items, and the mean reward; then the budget every RL row had
(rollout batches, samples, optimiser steps), the number of seeds and the wall time per run. Image table: GenEval's
six tags and Overall, each with its interval, Overall's paired gain over the base model, the samples each method
needed to reach UniGRPO's final rollout reward, the budget and the seeds.

Intervals (``ddmrl.stats``): percentile bootstrap over the held-out items (text: the items; images: the image
slots <prompt, sample>, stratified by tag, since Overall is a mean of tags), and over the seeds when a row has
several (two-stage). A paired gain redraws the same items for both models. Machine-readable copies: the CSV tables
hold each estimate with ``low``/``high`` columns, ``intervals.csv`` every interval with its standard error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ddmrl import stats  # noqa: E402
from ddmrl.config import MAR_TASK, Config, mar_run_name, run_name  # noqa: E402
from ddmrl.io import read_json, read_jsonl  # noqa: E402
from ddmrl.methods import METHODS  # noqa: E402
from ddmrl.pipeline.layout import per_seed_bases  # noqa: E402
from ddmrl.tasks import TASKS  # noqa: E402

#: row labels that are not a method's own (a method's is its ``display``, ``ddmrl.methods``)
DISPLAY = {
    "base": "base",
    "sft": "SFT",
    "mdpo_rcr": "MDPO + RCR",  # profiles/extended.yaml: MDPO with running-confidence remasking in its rollouts
    "cogrpo_schedule_only": "Co-GRPO (schedule only)",
    "mar_base": "MAR base",
}


#: the MAR rows (``mar_<section>``) of the extended profile's sections
MAR_DISPLAY = {"grpo_plain": "GRPO (no stabilisers)", "mar_grpo": "MAR-GRPO"}


def display(name: str) -> str:
    """A row's label: a method section named after its method gets the method's ``display``."""
    if name.startswith("mar_") and name not in DISPLAY:  # a MAR run's row: MAR + its section
        section = name.removeprefix("mar_")
        return f"MAR + {MAR_DISPLAY.get(section, section)}"
    if name in DISPLAY:
        return DISPLAY[name]
    return METHODS[name].display if name in METHODS.specs else name


def labelled_runs(cfg: Config) -> list[tuple[str, str, int, str]]:
    """(row label, task, seed, run name) of every GRPO run: the method sections' (labelled by the section), then
    the MAR runs' (``mar:``; labelled ``mar_<section>``, beside the MAR base model's row ``mar_base``)."""
    runs = [(m, t, s, run_name(m, t, s)) for m, t, s in cfg.runs()]
    return runs + [(f"mar_{m}", MAR_TASK, s, mar_run_name(m, MAR_TASK, s)) for m, s in cfg.mar.runs()]


def run_of(cfg: Config, model: str) -> tuple[str, str, int] | None:
    """(row label, task, seed) of a GRPO run name, or None for base / sft / mar_base."""
    return next(((label, t, s) for label, t, s, name in labelled_runs(cfg) if name == model), None)


_PER_SEED = re.compile(r"^(base|sft)_s(\d+)$")


def row_and_seed(cfg: Config, model: str) -> tuple[str, int]:
    """(row label, seed) of an evaluated model: a GRPO run's, a base or SFT model of one GRPO seed
    (``download.base_per_seed``: ``sft_s1`` is row ``sft``, seed 1), or base / sft / mar_base (seed 0)."""
    run = run_of(cfg, model)
    if run is not None:
        return run[0], run[2]
    match = _PER_SEED.match(model)
    return (match[1], int(match[2])) if match else (model, 0)


def start_of(cfg: Config, label: str, image: bool = False) -> str | None:
    """The row a row's gain is measured against: RL rows start from the SFT model (text, when there is one) or the
    base model; SFT starts from base; base has none."""
    if label == "base":
        return None
    if label == "sft" or image or not cfg.sft.max_steps:
        return "base"
    return "sft"


# ------------------------------------------------------------------------------------------------ per-item scores


@dataclass(frozen=True)
class Scores:
    """One model's held-out scores on one task: item ids, per-item numerators and denominators of its accuracy
    (``Task.item_score``: the accuracy is sum(numer) / sum(denom), within each stratum, averaged over strata)."""

    ids: tuple[str, ...]
    numer: np.ndarray  # [N]
    denom: np.ndarray  # [N]
    strata: tuple[str, ...] | None = None  # GenEval's tag of each item (Overall is the mean over tags)


def text_scores(path: str | Path, task: str, sampled: bool = False) -> Scores:
    """Per-item scores from an evaluation's generations (``data/evaluate/<model>/<task>.jsonl``); ``sampled``: of
    its completions sampled at ``evaluate.sampled_temperature`` (each record's ``sampled``)."""
    records = read_jsonl(path, required=("id", "sampled") if sampled else ("id",))
    pairs = [TASKS[task].item_score(r["sampled"] if sampled else r) for r in records]
    return Scores(tuple(r["id"] for r in records), *map(np.array, zip(*pairs, strict=True)))


_SLOT = re.compile(r"(\d+)[/\\]samples[/\\](\d+)\.png$")


def image_scores(path: str | Path) -> Scores:
    """Per-image scores from GenEval results rows; an item is an image slot ``<prompt folder>/<sample>``, the same
    slot in every model's folder, stratified by tag."""
    rows = read_jsonl(path, required=("filename", "tag", "correct"))
    ids = []
    for row in rows:
        match = _SLOT.search(row["filename"])
        if match is None:
            raise ValueError(
                f"{path}: filename {row['filename']!r} is not in GenEval's <NNNNN>/samples/<k>.png layout"
            )
        ids.append("/".join(match.groups()))
    numer = np.array([100.0 * bool(r["correct"]) for r in rows])
    return Scores(tuple(ids), numer, np.ones(len(rows)), tuple(r["tag"] for r in rows))


def stacked(scores: list[Scores]) -> tuple[np.ndarray, np.ndarray, tuple[str, ...] | None]:
    """The seeds of one row on the same items: numer [S, N], denom [N], strata (items in the first one's order)."""
    first = scores[0]
    order = {item: i for i, item in enumerate(first.ids)}
    rows = []
    for s in scores:
        if set(s.ids) != set(order) or len(s.ids) != len(order):
            raise ValueError("the seeds of a row were evaluated on different held-out items")
        idx = np.argsort([order[i] for i in s.ids])
        if not np.array_equal(s.denom[idx], first.denom):
            raise ValueError("the seeds of a row disagree on the items' denominators")
        rows.append(s.numer[idx])
    return np.stack(rows), first.denom, first.strata


def aligned(a: list[Scores], b: list[Scores]) -> list[Scores]:
    """``a``'s scores reordered to ``b``'s item order (for a paired comparison); both must hold the same items."""
    order = {item: i for i, item in enumerate(b[0].ids)}
    out = []
    for s in a:
        if set(s.ids) != set(order):
            raise ValueError("a paired comparison needs both models on the same held-out items")
        idx = np.argsort([order[i] for i in s.ids])
        out.append(Scores(tuple(np.array(s.ids)[idx]), s.numer[idx], s.denom[idx], b[0].strata))
    return out


def row_interval(scores: list[Scores], subset: str | None = None, seed: int = 0) -> stats.Interval:
    """Accuracy of a row (its seeds) with its 95 % interval; ``subset``: one stratum (a GenEval tag) only."""
    numer, denom, strata = stacked(_only(scores, subset))
    return stats.interval(numer, denom, None if subset else strata, seed=seed)


def gain_interval(scores: list[Scores], start: list[Scores], seed: int = 0) -> stats.Interval:
    """A row's accuracy minus its starting model's, with the paired 95 % interval over the same items."""
    numer, denom, strata = stacked(aligned(scores, start))
    base, _, _ = stacked(start)
    return stats.paired_gain(numer, base, denom, strata, seed=seed)


def seedwise_gain(scores: list[Scores], starts: list[Scores], seed: int = 0) -> stats.Interval:
    """A row's accuracy minus its starting models', seed s paired with start model s (each GRPO seed from its own
    base model, ``download.base_per_seed``): the per-item differences bootstrapped over seeds and items, so that
    the interval covers the base model as a level of the bootstrap (Davison & Hinkley 1997, section 3.8)."""
    numer, denom, strata = stacked([difference(m, s) for m, s in zip(scores, starts, strict=True)])  # [S, N], [N]
    return stats.interval(numer, denom, strata, seed=seed)


def difference(scores: Scores, start: Scores) -> Scores:
    """Per-item ``scores`` minus ``start`` on the same items (``start``'s order). Its accuracy, sum(numer) /
    sum(denom), is the gain, since both share the items' denominators (d1's pooled Sudoku cell accuracy too)."""
    (mine,) = aligned([scores], [start])
    if not np.array_equal(mine.denom, start.denom):
        raise ValueError("a paired difference needs the same denominators on both sides")
    return Scores(start.ids, mine.numer - start.numer, start.denom, start.strata)


def _subset(scores: list[Scores], keep: Callable[[Scores], np.ndarray]) -> list[Scores]:
    """Each seed's items where ``keep`` (a boolean mask over its items) holds, without strata."""
    out = []
    for s in scores:
        mask = keep(s)  # [N]
        out.append(Scores(tuple(np.array(s.ids)[mask]), s.numer[mask], s.denom[mask], None))
    return out


def _only(scores: list[Scores], stratum: str | None) -> list[Scores]:
    if stratum is None:
        return scores
    return _subset(scores, lambda s: np.array([t == stratum for t in s.strata]))


def at_level(scores: list[Scores], task: str, level: str) -> list[Scores]:
    """The items of one difficulty level (``Task.item_level``) only."""
    return _subset(scores, lambda s: np.array([TASKS[task].item_level(i) == level for i in s.ids]))


def levels_of(scores: Scores, task: str) -> list[str]:
    """The difficulty levels of a task's items in their first appearance's order (the held-out set's), or none
    when they are all of one level."""
    found = list(dict.fromkeys(TASKS[task].item_level(i) for i in scores.ids))
    return [] if len(found) < 2 or None in found else found


def cell(iv: stats.Interval | None, digits: int = 1, signed: bool = False) -> str:
    """``59.3 [56.1, 62.4]`` (``signed``: ``+8.1 [5.2, 11.0]``, marked * when the interval excludes 0)."""
    if iv is None:
        return "—"
    if not signed:
        return iv.fmt(digits)
    mark = "*" if iv.excludes_zero() else ""
    return f"{iv.estimate:+.{digits}f} [{iv.low:+.{digits}f}, {iv.high:+.{digits}f}]{mark}"


# ------------------------------------------------------------------------------------------------ the runs


def results_frame(cfg: Config, evals: list[dict[str, Any]], curves: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (row label, task, seed): accuracy, mean reward, and the run's budget and time."""
    rows = []
    for e in evals:
        label, seed = row_and_seed(cfg, e["model"])
        rows.append({"row": label, "model": e["model"], "task": e["task"], "seed": seed, "accuracy": e["accuracy"],
                     "mean_reward": e["mean_reward"], **budget(curves.get(e["model"]))})  # fmt: skip
    return pd.DataFrame(rows)


def budget(curve: pd.DataFrame | None) -> dict[str, float]:
    """What a run consumed, from its curve's last row: optimiser steps, rollout batches, samples, seconds."""
    if curve is None:
        return dict.fromkeys(("steps", "rollout_batches", "samples", "seconds"), math.nan)
    last = curve.iloc[-1]
    return {"steps": last["step"], "rollout_batches": last["rollout_batch"], "samples": last["samples"],
            "seconds": last["time"]}  # fmt: skip


def _budget_cells(sub: pd.DataFrame) -> dict[str, str]:
    """The budget columns of a row (the same in every RL row unless the row's name says otherwise)."""
    out = {}
    for key, col in (("rollout_batches", "rollout batches"), ("samples", "samples"), ("steps", "optimiser steps")):
        values = sub[key].dropna()
        out[col] = "—" if values.empty else "/".join(f"{v:.0f}" for v in sorted(values.unique()))
    seconds = sub["seconds"].dropna()
    out["RL wall time per run (s)"] = "—" if seconds.empty else f"{seconds.mean():.0f}"
    return out


def _variants(cfg: Config, scores: dict, sampled: dict | None) -> list[tuple[str, dict]]:
    """(column suffix, scores by model and task): greedy, then the sampled completions when there are any."""
    return [("", scores)] + ([(f" T={cfg.evaluate.sampled_temperature:g}", sampled)] if sampled else [])


def main_table(
    cfg: Config,
    frame: pd.DataFrame,
    scores: dict[tuple[str, str], Scores],
    sampled: dict[tuple[str, str], Scores] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, list[dict[str, Any]]]:
    """The text comparison: (markdown frame, CSV frame with low/high columns, interval records).

    ``scores`` maps (model, task) to its per-item scores; a row's seeds are its models. ``sampled``: the same for
    the completions sampled at ``evaluate.sampled_temperature``, as a second pair of accuracy and gain columns."""
    labels = ["base", "sft", *cfg.text_methods]
    variants = _variants(cfg, scores, sampled)
    md, csv, records = [], [], []
    for label in labels:
        sub = frame[frame["row"] == label]
        if sub.empty:
            continue
        row_md, row_csv = {"model": display(label)}, {"model": display(label)}
        start = start_of(cfg, label)
        for t in cfg.tasks:
            rows = sub[sub["task"] == t]
            if rows.empty:
                continue
            for hot, by_model in variants:
                acc = row_interval([by_model[m, t] for m in rows["model"]])
                gain = None if start is None else start_gain(cfg, frame, rows, start, by_model)
                row_md |= {f"{t}{hot} acc (%)": cell(acc), f"{t}{hot} Δ vs start": cell(gain, signed=True)}
                row_csv |= _csv_cells(f"{t}{hot} acc", acc) | _csv_cells(f"{t}{hot} gain", gain)
                records += _records(label, t, f"accuracy{hot}", acc)
                records += _records(label, t, f"gain vs {start}{hot}", gain)
            reward = rows["mean_reward"].mean()
            row_md[f"{t} reward"], row_csv[f"{t} reward"] = f"{reward:.3f}", reward
        seeds = sub["seed"].nunique()
        row_md |= {**_budget_cells(sub), "seeds": str(seeds)}
        row_csv |= {**_budget_cells(sub), "seeds": seeds}
        md.append(row_md)
        csv.append(row_csv)
    return _fill(pd.DataFrame(md)), pd.DataFrame(csv), records


def _level_scores(by_model: dict[tuple[str, str], Scores], task: str, level: str):
    """A model's scores on one level of ``task`` (for :func:`rows_difference`)."""
    return lambda model: at_level([by_model[model, task]], task, level)[0]


def levels_table(
    cfg: Config,
    frame: pd.DataFrame,
    scores: dict[tuple[str, str], Scores],
    sampled: dict[tuple[str, str], Scores] | None = None,
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Per difficulty level (``Task.item_level``) of each text task whose held-out items span several: one line per
    (task, level) with the base and SFT rows' accuracy and every RL row's gain over its start model (paired as in
    :func:`main_table`), greedy and, with ``sampled``, at ``evaluate.sampled_temperature``. Returns (markdown
    frame, interval records); empty when no task has levels."""
    variants = _variants(cfg, scores, sampled)
    md, records = [], []
    for t in cfg.tasks:
        first = frame[frame["task"] == t]["model"]
        for level in [] if first.empty else levels_of(scores[first.iloc[0], t], t):
            line = {"task": t, "level": level}
            for label in ["base", "sft", *cfg.text_methods]:
                rows = frame[(frame["row"] == label) & (frame["task"] == t)]
                if rows.empty:
                    continue
                start = start_of(cfg, label)
                for hot, by_model in variants:
                    score = _level_scores(by_model, t, level)
                    if label in ("base", "sft"):
                        iv, name, metric = row_interval([score(m) for m in rows["model"]]), display(label), "accuracy"
                    else:
                        starts = frame[(frame["row"] == start) & (frame["task"] == t)]
                        iv = rows_difference(cfg, rows, starts, score, by_seed=True)
                        name, metric = f"{display(label)} Δ", f"gain vs {start}"
                    line[f"{name}{hot}"] = cell(iv, signed=label not in ("base", "sft"))
                    records += _records(label, t, f"{metric}{hot}, {level}", iv)
            md.append(line)
    return _fill(pd.DataFrame(md)), records


def start_gain(
    cfg: Config, frame: pd.DataFrame, rows: pd.DataFrame, start: str, scores: dict[tuple[str, str], Scores]
) -> stats.Interval | None:
    """The gain of a row's models on one task (``rows``: model, task, seed) over its start row's (see
    :func:`rows_difference`)."""
    task = rows["task"].iloc[0]
    starts = frame[(frame["row"] == start) & (frame["task"] == task)]
    return rows_difference(cfg, rows, starts, lambda m: scores[m, task], by_seed=task in cfg.tasks)


def rows_difference(
    cfg: Config, rows: pd.DataFrame, other: pd.DataFrame, score, by_seed: bool
) -> stats.Interval | None:
    """One row's models (``rows``: model, seed) minus another row's (``other``) on one task, paired on the items;
    with one base model per seed (``download.base_per_seed``; ``by_seed``: a text task) also seed by seed, each
    seed's pair from the same base model. ``score``: a model's :class:`Scores`. None when ``other`` is empty."""
    if other.empty:
        return None
    mine = [score(m) for m in rows["model"]]
    if not (by_seed and per_seed_bases(cfg)):
        return gain_interval(mine, [score(m) for m in other["model"]])
    of_seed = dict(zip(other["seed"], other["model"], strict=True))
    return seedwise_gain(mine, [score(of_seed[s]) for s in rows["seed"]])


def pass_at_k_table(cfg: Config, frame: pd.DataFrame, evals: list[dict[str, Any]]) -> tuple[pd.DataFrame, list]:
    """pass@k per row and text task (``evaluate.pass_at_k``): the mean over items of the unbiased estimator, with a
    95 % bootstrap interval over the items and the row's seeds (per-item estimates from each item's count of correct
    samples). Returns (markdown frame, interval records)."""
    by_model = {(e["model"], e["task"]): e["pass_at_k"] for e in evals if "pass_at_k" in e}
    md, records = [], []
    for label in ["base", "sft", *cfg.text_methods]:
        sub = frame[frame["row"] == label]
        row = {"model": display(label)}
        for t in cfg.tasks:
            runs = [by_model[m, t] for m in sub[sub["task"] == t]["model"] if (m, t) in by_model]
            if not runs:
                continue
            if len({tuple(r["ids"]) for r in runs}) > 1:
                raise ValueError(f"{label} on {t}: pass@k of different held-out items across seeds")
            for k in cfg.evaluate.pass_at_k.k:
                numer = np.stack([100 * stats.pass_at_k(r["n"], np.array(r["correct_counts"]), k) for r in runs])
                iv = stats.interval(numer)  # [S, N]
                row[f"{t} pass@{k} (%)"] = cell(iv)
                records += _records(label, t, f"pass@{k}", iv)
        if len(row) > 1:
            md.append(row)
    return _fill(pd.DataFrame(md)), records


def lm_eval_long(cfg: Config, results: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per (model, lm-eval task, metric) of lm-evaluation-harness's results JSONs (``results`` of
    ``model -> results.json``): the value and lm-eval's own standard error, with the model's table row, the task its
    RL run trained on ("" for base and SFT) and its seed."""
    records = []
    for model, out in results.items():
        run = run_of(cfg, model)
        row, seed = row_and_seed(cfg, model)
        for task, metrics in out["results"].items():
            for key, value in metrics.items():
                metric, _, flt = key.partition(",")
                if "_stderr" in metric or not isinstance(value, int | float) or isinstance(value, bool):
                    continue
                stderr = metrics.get(f"{metric}_stderr,{flt}" if flt else f"{metric}_stderr")
                stderr = float(stderr) if isinstance(stderr, int | float) else math.nan  # lm-eval writes "N/A" too
                name = metric if flt in ("", "none") else f"{metric} ({flt})"
                records.append({"model": model, "row": row, "trained_on": run[1] if run else "", "seed": seed,
                                "task": task, "metric": name, "value": float(value), "stderr": stderr})  # fmt: skip
    columns = ["model", "row", "trained_on", "seed", "task", "metric", "value", "stderr"]
    return pd.DataFrame(records, columns=columns)


def lm_eval_table(long: pd.DataFrame) -> pd.DataFrame:
    """One column per (lm-eval task, metric), one row per table row (base, SFT, each method and the task its runs
    trained on): the mean over the row's models (its seeds and base models), with their range when there are
    several."""

    def cell(values: pd.Series) -> str:
        mean = f"{values.mean():.3f}"
        return mean if len(values) == 1 else f"{mean} ({values.min():.3f}-{values.max():.3f}, {len(values)} models)"

    label = long["row"].map(display) + long["trained_on"].map(lambda t: f" (RL on {t})" if t else "")
    table = long.assign(model=label, column=long["task"] + " " + long["metric"]).pivot_table(
        index="model", columns="column", values="value", aggfunc=cell, sort=False
    )
    table.columns.name = None
    return table.reindex(list(dict.fromkeys(label))).reset_index()


def versus_table(
    cfg: Config, frame: pd.DataFrame, scores: dict[Any, Scores], tasks: tuple[str, ...], reference: str = "unigrpo"
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """RebRL against the method it plugs into: each RebRL row (the default and the ablation rows that ran) minus
    ``reference``, per task, with a 95 % interval paired on the held-out items (the two rows' seeds drawn
    independently, or paired when each seed has its own base model). ``scores`` is keyed by (model, task) for text
    and by model for the image task."""
    rows = [m for m in dict.fromkeys([*cfg.text_methods, *cfg.image.methods]) if m in cfg.methods]
    rows = [m for m in rows if cfg.methods[m].method == "rebrl"]
    md, records = [], []
    for label in rows:
        row = {"model": display(label)}
        for t in tasks:
            mine = frame[(frame["row"] == label) & (frame["task"] == t)]
            ref = frame[(frame["row"] == reference) & (frame["task"] == t)]
            if mine.empty or ref.empty:
                continue
            key = (lambda m: m) if t in cfg.image.tasks else (lambda m, t=t: (m, t))
            iv = rows_difference(cfg, mine, ref, lambda m, key=key: scores[key(m)], by_seed=t in cfg.tasks)
            row[f"{t}: Δ vs {display(reference)}"] = cell(iv, signed=True)
            records += _records(label, t, f"difference vs {reference}", iv)
        md.append(row)
    return _fill(pd.DataFrame(md)), records


def _csv_cells(name: str, iv: stats.Interval | None) -> dict[str, float]:
    if iv is None:
        return {name: math.nan, f"{name} low": math.nan, f"{name} high": math.nan}
    return {name: iv.estimate, f"{name} low": iv.low, f"{name} high": iv.high}


def _records(row: str, task: str, metric: str, iv: stats.Interval | None) -> list[dict[str, Any]]:
    if iv is None:
        return []
    return [{"row": row, "task": task, "metric": metric, "estimate": iv.estimate, "low": iv.low, "high": iv.high,
             "se": iv.se, "n_items": iv.n_items, "n_seeds": iv.n_seeds}]  # fmt: skip


def _fill(df: pd.DataFrame) -> pd.DataFrame:
    """A markdown frame with every missing cell shown as a dash (columns one row lacks)."""
    return df.astype(object).where(df.notna(), "—")


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


def headline_metrics(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The tables' headline numbers (``dvc metrics``, ``dvc exp show``) from the tables' interval records: held-out
    accuracy per text task and row, GenEval Overall per image task and row, over the row's seeds (rows: base, sft,
    method sections)."""
    out: dict[str, Any] = {}
    for r in records:
        key = {"accuracy": "accuracy", "Overall": "geneval_overall"}.get(r["metric"])
        if key:
            out.setdefault(key, {}).setdefault(r["task"], {})[r["row"]] = round(float(r["estimate"]), 2)
    return out


def curves_frame(cfg: Config, curves: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every run's curve in one long table, with ``series`` (the run), method section, task and seed: DVC's plots."""
    frames = [
        curves[name].assign(series=name, method=label, task=t, seed=s)
        for label, t, s, name in labelled_runs(cfg)
        if name in curves
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["series", "step"])


# ------------------------------------------------------------------------------------------------ curves


def mean_curve(
    cfg: Config, curves: dict[str, pd.DataFrame], method: str, task: str, key: str, x: str = "samples"
) -> pd.Series | None:
    """``key`` against ``x`` (samples, rollout_batch or step) for one row label (a method section, or
    ``mar_<section>``) and task, averaged over its seeds (None: no run)."""
    runs = [curves.get(name) for label, t, _, name in labelled_runs(cfg) if (label, t) == (method, task)]
    runs = [r for r in runs if r is not None and key in r]  # a method's curve has its objective's terms only
    if not runs:
        return None
    return pd.concat([r.set_index(x)[key] for r in runs], axis=1).mean(axis=1)


def plot_curves(
    cfg: Config, curves: dict[str, pd.DataFrame], key: str, path: str | Path, ylabel: str, image: bool = False
) -> None:
    """One panel per task, one line per method (seeds averaged), ``key`` against the samples seen (completions
    sampled; a rollout batch is num_prompts x G of them and num_iterations optimiser steps); text tasks, or with
    ``image`` the text-to-image tasks."""
    tasks, methods = (cfg.image.tasks, image_rows(cfg)[1:]) if image else (cfg.tasks, cfg.text_methods)
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for m in methods:
            mean = mean_curve(cfg, curves, m, task, key)
            if mean is None:
                continue
            style = ":" if m in cfg.rebrl_ablation.methods and m not in cfg.grpo.methods else "-"
            ax.plot(mean.index, mean.rolling(3, min_periods=1).mean(), style, label=display(m))
        runs = (cfg.image_methods if image else cfg.methods).values()
        per_batch = {r.num_prompts * r.num_generations for r in runs}
        mu = {r.num_iterations for r in runs}
        ax.set_title(task)
        ax.set_xlabel(f"samples seen (a rollout batch: {'/'.join(map(str, sorted(per_batch)))} samples, "
                      f"{'/'.join(map(str, sorted(mu)))} optimiser steps)", fontsize=8)  # fmt: skip
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def samples_to_reach(curve: pd.Series, target: float, window: int = 3) -> float:
    """The samples seen when the reward, smoothed over ``window`` rollout batches, first reaches ``target`` (nan if
    it never does); ``curve`` is indexed by samples."""
    smooth = curve.rolling(window, min_periods=1).mean()
    hit = smooth[smooth >= target - 1e-12]
    return float(hit.index[0]) if len(hit) else math.nan


def samples_table(cfg: Config, curves: dict[str, pd.DataFrame], target: str = "unigrpo") -> pd.DataFrame:
    """Per task and method: the samples to reach ``target``'s final rollout reward (the mean of its last 3 rollout
    batches, seeds averaged), on the seed-averaged curve and per seed (RebRL reports about 40 % fewer steps than
    UniGRPO to its reward; with equal budgets, samples and steps are proportional)."""
    out = []
    for tasks, methods in ((cfg.tasks, cfg.text_methods), (cfg.image.tasks, cfg.image.methods)):
        for task in tasks:
            final = mean_curve(cfg, curves, target, task, "reward")
            if final is None:
                continue
            goal = float(final.iloc[-3:].mean())
            for m in methods:
                mean = mean_curve(cfg, curves, m, task, "reward")
                if mean is None:
                    continue
                seeds = [curves.get(run_name(*r)) for r in cfg.runs() if r[:2] == (m, task)]
                per_seed = [samples_to_reach(c.set_index("samples")["reward"], goal) for c in seeds if c is not None]
                reached = sum(not math.isnan(v) for v in per_seed)
                out.append(
                    {
                        "task": task,
                        "model": display(m),
                        f"{display(target)}'s final reward": round(goal, 3),
                        "samples (mean curve)": samples_to_reach(mean, goal),
                        "samples per seed": ", ".join("—" if math.isnan(v) else f"{v:.0f}" for v in per_seed),
                        "seeds reaching it": f"{reached}/{len(per_seed)}",
                        "budget": float(mean.index[-1]),
                    }
                )
    df = pd.DataFrame(out)
    if not df.empty:
        df["samples (mean curve)"] = df["samples (mean curve)"].map(lambda v: "—" if math.isnan(v) else f"{v:.0f}")
        df["budget"] = df["budget"].map(lambda v: f"{v:.0f}")
    return df


def rollout_table(reward_metrics: list[dict[str, Any]]) -> pd.DataFrame:
    """Room for RL: SFT samples at the rollout temperature, per task."""
    cols = ["task", "reward", "accuracy", "pass_at_g", "frac_reward_zero_std", "num_generations", "n"]
    return pd.DataFrame([{c: m[c] for c in cols} for m in reward_metrics]).round(3)


# ------------------------------------------------------------------------------------------------ credit


def credit_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per task and variant: the relative credit of the tokens revealed first and last, their ratio (RebRL's
    imbalance, Eq. 10: > 1 when late tokens collect more gradient) and the max / min over reveal steps."""
    rows = []
    for (task, method), g in frame.groupby(["task", "method"], sort=False):
        g = g.sort_values("reveal_step")
        first, last = g["relative_credit"].iloc[0], g["relative_credit"].iloc[-1]
        lo = g["relative_credit"].min()
        rows.append({"task": task, "variant": display(method), "first revealed": round(first, 2),
                     "last revealed": round(last, 2), "last / first": round(last / first, 2) if first else math.inf,
                     "max / min": round(g["relative_credit"].max() / lo, 2) if lo else math.inf})  # fmt: skip
    return pd.DataFrame(rows)


def plot_credit(frame: pd.DataFrame, path: str | Path) -> None:
    """Relative per-token credit against the sampler step that revealed the token: per task, one panel for the
    methods as configured, then one per coupling of the training views (independent, nested, trajectory) with
    RebRL's weighting modes on it: each coupling's imbalance (mode none, RebRL's Eq. 10) and what each mode leaves
    of it (token: flat)."""
    tasks = sorted(frame["task"].unique())
    if not tasks:  # no rollout had a non-zero advantage: nothing to measure
        fig, ax = plt.subplots(figsize=(5, 2))
        ax.text(0.5, 0.5, "no rollout with a non-zero advantage:\nno gradient credit to measure", ha="center")
        ax.axis("off")
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return
    panels = [None, "independent", "nested", "trajectory"]  # ddmrl.diagnostics.COUPLINGS
    fig, axes = plt.subplots(len(panels), len(tasks), figsize=(5 * len(tasks), 3.2 * len(panels)), squeeze=False)
    for col, task in enumerate(tasks):
        sub = frame[frame["task"] == task]
        for row, coupling in enumerate(panels):
            ax = axes[row][col]
            for name, g in sub.groupby("method", sort=False):
                variant = re.fullmatch(r".*\[(\w+), (\w+)\]", name)
                if (variant is None) if coupling is None else (variant is not None and variant[2] == coupling):
                    ax.plot(g["reveal_step"], g["relative_credit"], marker="o", ms=3,
                            label=display(name) if variant is None else f"mode {variant[1]}")  # fmt: skip
            ax.axhline(1.0, color="grey", lw=0.8, ls=":")
            title = "methods as configured" if coupling is None else f"RebRL's modes, {coupling} masks"
            ax.set_title(f"{task}: {title}", fontsize=9)
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


def image_rows(cfg: Config) -> list[str]:
    """The image table's row labels: base, the image method sections, then the MAR base model and runs."""
    mar = ["mar_base", *(f"mar_{m}" for m in cfg.mar.methods)] if cfg.mar.methods else []
    return ["base", *cfg.image_methods, *mar]


def image_frame(cfg: Config, results: list[str | Path], curves: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (row label, task, seed) of the image runs: the model name, its results file and its budget."""
    rows = []
    for path in map(Path, results):
        model, task = path.parent.name, path.name.removesuffix("_results.jsonl")
        run = run_of(cfg, model)
        label, seed = (run[0], run[2]) if run else (model, 0)
        rows.append({"row": label, "model": model, "task": task, "seed": seed, **budget(curves.get(model))})
    return pd.DataFrame(rows)


def image_table(
    cfg: Config, frame: pd.DataFrame, scores: dict[str, Scores], curves: dict[str, pd.DataFrame]
) -> tuple[pd.DataFrame, pd.DataFrame, list[dict[str, Any]], float]:
    """RebRL's GenEval table: rows base, the image methods, the MAR base model and runs (:func:`image_rows`; a MAR
    row's gain is over the MAR base model); columns the six tags and Overall (GenEval's
    unweighted mean of tag accuracies) with their intervals, Overall's paired gain over the base model, the samples
    each method needed to reach UniGRPO's final rollout reward, the budget and the seeds. Returns (markdown frame,
    CSV frame, interval records, UniGRPO's final reward)."""
    task = cfg.image.tasks[0]
    final = mean_curve(cfg, curves, "unigrpo", task, "reward")
    goal = float(final.iloc[-3:].mean()) if final is not None else math.nan
    md, csv, records = [], [], []
    for label in image_rows(cfg):
        sub = frame[frame["row"] == label]
        if sub.empty:
            continue
        rows = [scores[m] for m in sub["model"]]
        row_md, row_csv = {"model": display(label)}, {"model": display(label)}
        for tag, col in IMAGE_COLUMNS.items():
            iv = row_interval(rows, tag) if tag in rows[0].strata else None
            row_md[col], row_csv = cell(iv), row_csv | _csv_cells(col, iv)
            records += _records(label, task, col, iv)
        overall = row_interval(rows)
        base = "mar_base" if label.startswith("mar_") else "base"
        base_models = list(frame[frame["row"] == base]["model"])
        gain = gain_interval(rows, [scores[m] for m in base_models]) if label != base and base_models else None
        row_md |= {"Overall": cell(overall), "Δ Overall vs base": cell(gain, signed=True)}
        row_csv |= _csv_cells("Overall", overall) | _csv_cells("gain", gain)
        records += _records(label, task, "Overall", overall) + _records(label, task, "Overall gain vs base", gain)
        curve = mean_curve(cfg, curves, label, task, "reward")
        reach = samples_to_reach(curve, goal) if curve is not None else math.nan
        row_md["samples to UniGRPO's final reward"] = "—" if math.isnan(reach) else f"{reach:.0f}"
        seeds = sub["seed"].nunique()
        row_md |= {**_budget_cells(sub), "seeds": str(seeds)}
        row_csv |= {"samples to UniGRPO's final reward": reach, **_budget_cells(sub), "seeds": seeds}
        md.append(row_md)
        csv.append(row_csv)
    return _fill(pd.DataFrame(md)), pd.DataFrame(csv), records, goal


#: evaluation benchmarks of the image branch (image.eval_tasks): their column in the image table
BENCHMARK_COLUMNS = {"hps": "HPSv3", "dpg": "DPG"}


def with_benchmarks(cfg: Config, table: pd.DataFrame, evals: list[dict[str, Any]], text: bool = True) -> pd.DataFrame:
    """``table`` (one row per image model) with a column per benchmark of ``image.eval_tasks`` after Overall: each
    model's ``score`` (HPSv3: the mean of HPSv3's mu over images; DPG: DPG-Bench's score x 100), averaged over
    seeds; ``text``: as the markdown table's cells (two decimals, a dash where missing), else numbers. ``evals`` are
    the benchmarks' metrics (``data/evaluate/<model>/<benchmark>.json``)."""
    rows = []
    for e in evals:
        run = run_of(cfg, e["model"])
        rows.append({"model": display(run[0] if run else e["model"]), "bench": BENCHMARK_COLUMNS[e["task"]],
                     "score": e["score"]})  # fmt: skip
    if not rows:
        return table
    cells = pd.DataFrame(rows).groupby(["model", "bench"])["score"].mean().unstack("bench")
    out = table.merge(
        cells.map(lambda v: f"{v:.2f}") if text else cells, left_on="model", right_index=True, how="left"
    )
    columns = list(table.columns)
    at = columns.index("Overall") + 1 if "Overall" in columns else len(columns)
    names = [BENCHMARK_COLUMNS[b] for b in cfg.image.eval_tasks]
    out = out[columns[:at] + names + columns[at:]]
    return _fill(out) if text else out


def contact_sheet(folder: str | Path, prompts: list[str], path: str | Path, title: str) -> None:
    """The sample PNGs of the given prompt folders (GenEval layout ``<folder>/<NNNNN>/samples/*.png``) side by side,
    one row per prompt, labelled with its prompt text."""
    from PIL import Image

    folder = Path(folder)
    samples = len(list((folder / prompts[0] / "samples").glob("*.png")))
    size = (max(4.0, 1.3 * min(samples, 8)), 1.45 * len(prompts) + 0.4)
    fig, axes = plt.subplots(len(prompts), 1, figsize=size, squeeze=False)
    for ax, name in zip(axes[:, 0], prompts, strict=True):
        samples = sorted((folder / name / "samples").glob("*.png"))[:8]
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
