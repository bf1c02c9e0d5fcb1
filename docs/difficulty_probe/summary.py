"""The probe's table: greedy accuracy of each model per difficulty level, base models 0 / 1 / 2 (probe.sh's
data/difficulty/<model>_s<seed>/<level>.json). 256 items per level: a binomial standard error of up to 3.1 points
(chain) and under 2 points for Sudoku's pooled cells.

    python docs/difficulty_probe/summary.py > docs/difficulty_probe/summary.md   # in the workspace
"""

import json
from pathlib import Path

from make_levels import LEVELS

MODELS = {"base": "base", "SFT": "sft", "UniGRPO": "unigrpo"}

for task, (tag, key, values) in LEVELS.items():
    print(f"| {task}: model | " + " | ".join(f"{key} = {v}" for v in values) + " |")
    print("|---|" + "---|" * len(values))
    for label, name in MODELS.items():
        cells = []
        for v in values:
            paths = [Path("data/difficulty") / f"{name}_s{s}" / f"{task}_{tag}{v}.json" for s in range(3)]
            cells.append(" / ".join(f"{json.loads(p.read_text())['accuracy']:.1f}" for p in paths))
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
