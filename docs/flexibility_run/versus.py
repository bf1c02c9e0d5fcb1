"""pass@k differences of the flexibility comparison (issue #24): each RL row minus its own SFT model, and JustGRPO
(left to right) minus diffu-GRPO and UniGRPO (arbitrary order), per task and k, with 95 % intervals paired on the
held-out items (the rows' seeds drawn independently; ``ddmrl.stats.paired_gain`` over the per-item unbiased pass@k
estimates of Chen et al. 2021). Run after the two workspaces' evaluations:

    python docs/flexibility_run/versus.py FLEX/data/evaluate BLOCK/data/evaluate > docs/flexibility_run/versus.md

FLEX is the main job's workspace after ``--config profile=flexibility``, BLOCK the block profile's workspace.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from ddmrl import stats
from ddmrl.tables import cell, display

TASKS = ["sudoku4", "chain"]
SEEDS = [0, 1, 2]
KS = [1, 4, 16]
FULL, LEFT_TO_RIGHT = ["diffu_grpo", "unigrpo"], "justgrpo"


def per_item(root: Path, model: str, task: str, k: int) -> tuple[tuple[str, ...], np.ndarray]:
    """The held-out items' ids and their pass@k estimates in % ([N]) of one evaluation."""
    record = json.loads((root / model / f"{task}.json").read_text())["pass_at_k"]
    return tuple(record["ids"]), 100 * stats.pass_at_k(record["n"], np.array(record["correct_counts"]), k)


def row(root: Path, method: str, task: str, k: int) -> np.ndarray:
    """[S, N] pass@k of a method's seeds (the SFT model: [1, N]), on the same items in the same order."""
    models = ["sft"] if method == "sft" else [f"{method}_{task}_s{s}" for s in SEEDS]
    runs = [per_item(root, m, task, k) for m in models]
    if len({ids for ids, _ in runs}) != 1:
        raise ValueError(f"{method} on {task}: pass@k of different held-out items across seeds")
    return np.stack([values for _, values in runs])


def diff(a: np.ndarray, b: np.ndarray) -> str:
    return cell(stats.paired_gain(a, b), signed=True)


def main(flex: Path, block: Path) -> None:
    header = ["row", "versus"] + [f"{t} pass@{k}" for t in TASKS for k in KS]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    workspaces = {"full-sequence": flex, "block": block}
    for family, root in workspaces.items():
        methods = [*FULL, LEFT_TO_RIGHT] if family == "full-sequence" else FULL
        for m in methods:
            cells = [diff(row(root, m, t, k), row(root, "sft", t, k)) for t in TASKS for k in KS]
            print("| " + " | ".join([f"{display(m)} ({family})", "its SFT", *cells]) + " |")
    for ref in FULL:
        cells = [diff(row(flex, LEFT_TO_RIGHT, t, k), row(flex, ref, t, k)) for t in TASKS for k in KS]
        print("| " + " | ".join([display(LEFT_TO_RIGHT), display(ref), *cells]) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
