"""Each extended row minus diffu-GRPO and minus UniGRPO, per task: held-out accuracy differences with 95 % intervals
paired on the held-out items, as the tables' RebRL-vs-UniGRPO column: the two rows' seeds drawn independently
(``ddmrl.tables.gain_interval``), or, where the workspace's params.yaml gives each seed its own base model
(``download.base_per_seed``), seed s paired with seed s (``ddmrl.tables.seedwise_gain``: the interval covers the
base models). Run in the workspace of the extended rows, after them:

    python docs/extended_run/versus.py data/evaluate > docs/extended_run/versus.md
    python docs/extended_run/versus.py data/evaluate mdpo,mdpo_rcr diffu_grpo,unigrpo,mdpo > docs/mdpo_run/versus.md

(the optional arguments: the rows, and the references they are set against, comma-separated; ``--sampled`` adds
each task's differences at ``evaluate.sampled_temperature``, the T=1 columns). A row without every seed's evaluation
on a task (IGPO on Sudoku) shows "—" there.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddmrl import config
from ddmrl.pipeline.layout import per_seed_bases
from ddmrl.tables import cell, display, gain_interval, seedwise_gain, text_scores

ROWS = ["coupled_grpo", "vrpo", "espo", "ebpo", "bgpo", "treerpo"]
REFERENCES = ["diffu_grpo", "unigrpo"]
TASKS = ["sudoku4", "chain"]
SEEDS = [0, 1, 2]


def scores(root: Path, method: str, task: str, sampled: bool = False) -> list:
    return [text_scores(root / f"{method}_{task}_s{s}" / f"{task}.jsonl", task, sampled) for s in SEEDS]


def main(root: Path, rows: list[str], references: list[str], sampled: bool = False) -> None:
    paired = seedwise_gain if per_seed_bases(config.load("params.yaml")) else gain_interval
    columns = [(t, at_t1) for t in TASKS for at_t1 in ((False, True) if sampled else (False,))]
    names = [f"{t} T=1" if at_t1 else t for t, at_t1 in columns]
    header = ["model"] + [f"{name}: Δ vs {display(r)}" for name in names for r in references]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for m in rows:
        cells = [
            "—"
            if m == r or not all((root / f"{m}_{t}_s{s}" / f"{t}.jsonl").exists() for s in SEEDS)
            else cell(paired(scores(root, m, t, at_t1), scores(root, r, t, at_t1)), signed=True)
            for t, at_t1 in columns
            for r in references
        ]
        print("| " + " | ".join([display(m), *cells]) + " |")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--sampled"]
    rows = args[1].split(",") if len(args) > 1 else ROWS
    main(Path(args[0]), rows, args[2].split(",") if len(args) > 2 else REFERENCES, "--sampled" in sys.argv)
