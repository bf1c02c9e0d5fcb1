"""The rows of issue #42's members as the main job's text table gives them: held-out accuracy over the three seeds
(each from its own base model) with its 95 % interval (``ddmrl.tables.row_interval``), and the gain over the SFT model
of the same base model, paired seed by seed (``ddmrl.tables.seedwise_gain``: the interval covers base models and
items). A method without every seed's evaluation on a task (IGPO on Sudoku) shows "—" there. Run in the workspace of
the rows, after them:

    python docs/members_run/rows.py data/evaluate gdsd,gdsd_tlc,tracerl_value,dipo,rldf > docs/members_run/rows.md
    python docs/members_run/rows.py data/evaluate tracerl,gdpo,spg,wd1,mdpo,cj_grpo,igpo > docs/field_run/rows.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddmrl.tables import cell, display, row_interval, seedwise_gain, text_scores

TASKS = ["sudoku4", "chain"]
SEEDS = [0, 1, 2]


def scores(root: Path, run: str, task: str) -> list:
    return [text_scores(root / f"{run}_s{s}" / f"{task}.jsonl", task) for s in SEEDS]


def main(root: Path, rows: list[str]) -> None:
    header = ["model"] + [f"{t} {c}" for t in TASKS for c in ("acc (%)", "Δ vs SFT")]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for m in rows:
        cells = []
        for t in TASKS:
            if not all((root / f"{m}_{t}_s{s}" / f"{t}.jsonl").exists() for s in SEEDS):
                cells += ["—", "—"]
                continue
            mine = scores(root, f"{m}_{t}", t)
            cells += [cell(row_interval(mine)), cell(seedwise_gain(mine, scores(root, "sft", t)), signed=True)]
        print("| " + " | ".join([display(m), *cells]) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2].split(","))
