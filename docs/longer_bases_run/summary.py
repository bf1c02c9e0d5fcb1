"""The longer-pre-training workspace's rows (RUN.md here): each model's validation accuracy over its three seeds
(seed s from base model s) and each run's gain over its SFT model, paired seed by seed and bootstrapped over base
models and items (``ddmrl.tables.seedwise_gain``, the main job's Δ vs start), in greedy decoding
(``data/evaluate``, d1's protocol) and sampled at temperature 1 (``data/evaluate_t1``, one sample per item).
Sudoku's items with a spread of blanks also get one gain column per number of blanks (the blanks are the 0s of an
item's id, its puzzle).

    python docs/longer_bases_run/summary.py > summary.md   # in the workspace, after its job and sampled.sh
"""

from pathlib import Path

import numpy as np

from ddmrl.tables import Scores, cell, display, row_interval, seedwise_gain, text_scores

TASKS = ["sudoku4", "chain"]
SEEDS = [0, 1, 2]
METHODS = ["diffu_grpo", "unigrpo", "maskgrpo", "rebrl"]
FOLDERS = {"greedy": "evaluate", "T = 1": "evaluate_t1"}


def scores(folder: str, name: str, task: str) -> list[Scores]:
    return [text_scores(Path("data") / folder / name.format(s=s) / f"{task}.jsonl", task) for s in SEEDS]


def blanks(item: str) -> int:
    return item.count("0")


def only(rows: list[Scores], level: int) -> list[Scores]:
    """The items of one number of blanks."""
    out = []
    for s in rows:
        keep = np.array([blanks(i) == level for i in s.ids])
        out.append(Scores(tuple(np.array(s.ids)[keep]), s.numer[keep], s.denom[keep]))
    return out


def levels(task: str) -> list[int]:
    if task != "sudoku4":
        return []
    found = sorted({blanks(i) for i in scores("evaluate", "sft_s{s}", task)[0].ids})
    return found if len(found) > 1 else []


for task in TASKS:
    per_level = levels(task)
    heads = [f"{how}: {what}" for how in FOLDERS for what in ("accuracy", "Δ vs SFT")]
    heads += [f"greedy Δ, {n} blanks" for n in per_level]
    print(f"\n**{task}** (validation items)\n\n| model | " + " | ".join(heads) + " |")
    print("|---|" + "---|" * len(heads))
    for name in ["sft", *METHODS]:
        run = "sft_s{s}" if name == "sft" else f"{name}_{task}_s{{s}}"
        cells = []
        for folder in FOLDERS.values():
            mine, start = scores(folder, run, task), scores(folder, "sft_s{s}", task)
            gain = "—" if name == "sft" else cell(seedwise_gain(mine, start), signed=True)
            cells += [cell(row_interval(mine)), gain]
            if folder == "evaluate":
                greedy, first = mine, start
        for n in per_level:
            cells.append("—" if name == "sft" else cell(seedwise_gain(only(greedy, n), only(first, n)), signed=True))
        print(f"| {'SFT' if name == 'sft' else display(name)} | " + " | ".join(cells) + " |")
