"""How much the text table moves with the base model: the same DAG run from base models of other pre-training seeds
(``download.seed``; the held-out items follow the global seed and stay the same), each with its own SFT model and
one GRPO run per method (seed 0). ``stages/base_models.py`` tables it from those runs' evaluation files, and the
tables stage from one DAG with a base model per GRPO seed (``download.base_per_seed``, the main job).

The tables' intervals (``ddmrl.tables``) cover the held-out items and the RL seeds of one base model; this one adds
the base model as a level of the bootstrap (Davison & Hinkley 1997, section 3.8, as the seeds are), so that a reader
sees which gains survive a different base model.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ddmrl.config import Config, run_name
from ddmrl.pipeline.layout import model_name
from ddmrl.tables import (
    Scores,
    _fill,
    _records,
    cell,
    display,
    gain_interval,
    row_interval,
    seedwise_gain,
    start_of,
)

#: the columns of each task, in order
COLUMNS = ("acc per base model", "acc over base models", "Δ vs start per base model", "Δ vs start over base models")
#: rollout batches averaged at each end of a run's curve (training_reward_table)
ENDS = 5


def base_model_table(
    cfg: Config, per_base: dict[int, dict[tuple[str, str], Scores]]
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """(markdown frame, interval records). ``per_base`` maps a base seed to its scores, keyed (model, task) as in
    ``ddmrl.tables.main_table``; a method's row is its seed-0 run on each base model.

    Per task: the row's accuracy on each base model; its accuracy over the base models (two-stage bootstrap over base
    models and items); its gain over its start model on each base model (paired on the items, * when the interval
    excludes 0); and that gain over the base models, each base model's run paired with its own start model (the
    per-item differences, bootstrapped over base models and items). A gain whose last interval excludes 0 survives a
    change of base model."""
    bases = sorted(per_base)
    md, records = [], []
    for label in ["base", "sft", *cfg.text_methods]:
        row = {"model": display(label)}
        start = start_of(cfg, label)
        for t in cfg.tasks:
            model = label if label in ("base", "sft") else run_name(label, t, 0)
            if any((model, t) not in per_base[b] for b in bases):
                continue
            mine = [per_base[b][model, t] for b in bases]
            row[f"{t}: acc per base model"] = " / ".join(f"{row_interval([s]).estimate:.1f}" for s in mine)
            acc = row_interval(mine)
            row[f"{t}: acc over base models"] = cell(acc)
            records += _records(label, t, "accuracy over base models", acc)
            if start is None:
                continue
            starts = [per_base[b][start, t] for b in bases]
            gains = [gain_interval([m], [s]) for m, s in zip(mine, starts, strict=True)]
            row[f"{t}: Δ vs start per base model"] = " / ".join(
                f"{g.estimate:+.1f}{'*' if g.excludes_zero() else ''}" for g in gains
            )
            gain = seedwise_gain(mine, starts)  # each base model's run paired with its own start model
            row[f"{t}: Δ vs start over base models"] = cell(gain, signed=True)
            records += _records(label, t, f"gain vs {start} over base models", gain)
        md.append(row | {"base models": str(len(bases))})
    frame = pd.DataFrame(md)
    columns = [f"{t}: {c}" for t in cfg.tasks for c in COLUMNS]
    return _fill(frame[["model", *(c for c in columns if c in frame), "base models"]]), records


def per_seed_scores(cfg: Config, scores: dict[tuple[str, str], Scores]) -> dict[int, dict[tuple[str, str], Scores]]:
    """The scores of a DAG with one base model per GRPO seed (``download.base_per_seed``; keyed (model, task) as
    the tables stage reads them) as :func:`base_model_table` takes them: base model s holds ``base_s<s>``,
    ``sft_s<s>`` and seed s's runs, under the names of one base model's DAG (base, sft, the seed-0 run names)."""
    per_base = {}
    for seed in cfg.grpo.seeds:
        mine = {}
        for t in cfg.tasks:
            names = {model_name(m, seed): m for m in ("base", "sft")}
            names |= {run_name(label, t, seed): run_name(label, t, 0) for label in cfg.text_methods}
            mine |= {(as_one, t): scores[model, t] for model, as_one in names.items() if (model, t) in scores}
        per_base[seed] = mine
    return per_base


def training_reward_table(cfg: Config, curves: dict[str, pd.DataFrame], ends: int = ENDS) -> pd.DataFrame:
    """What RL did to the reward it trained on, base model by base model (seed s's run starts from base model s):
    per task, each run's mean training reward over its first and over its last ``ends`` rollout batches
    (``first→last``), and the fraction of its groups whose G rewards were all equal, which carry no advantage and
    so no gradient (TRL's ``frac_reward_zero_std``, over the whole run). ``curves`` maps run names
    (``<label>_<task>_s<seed>``) to their ``curve.csv``. Where a base model's held-out accuracy does not move, this
    says whether the training reward did not move either (no signal) or moved without carrying over."""
    md = []
    for label in cfg.text_methods:
        row = {"model": display(label)}
        for t in cfg.tasks:
            runs = [curves.get(run_name(label, t, s)) for s in cfg.grpo.seeds]
            if any(c is None for c in runs):
                continue
            row[f"{t}: reward first→last"] = " / ".join(
                f"{c['reward'].head(ends).mean():.2f}→{c['reward'].tail(ends).mean():.2f}" for c in runs
            )
            row[f"{t}: groups without spread"] = " / ".join(f"{c['frac_reward_zero_std'].mean():.0%}" for c in runs)
        md.append(row)
    return _fill(pd.DataFrame(md))
