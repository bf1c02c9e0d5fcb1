"""Validation items for Sudoku with a spread of blanks, laid out as the held-out set is: every number of blanks in
equal shares (``Sudoku4.held_out``), each level drawn with the seed purpose "validation" and none of them a
held-out item. Run in a workspace made by ``setup.sh`` with a spread (``SUDOKU_PARAMS`` 'num_empty: 4,
num_empty_max: 12' and no level folders); it fills each ``data/download/s*/tasks/sudoku4/eval.jsonl``.

    python docs/longer_bases_run/spread_validation.py data/download/s*/tasks
"""

import sys
from pathlib import Path

from ddmrl import config
from ddmrl.io import read_json
from ddmrl.seeding import derive_seed
from ddmrl.tasks import make_task
from ddmrl.tasks.store import write_task

cfg = config.load("params.yaml")
params = dict(cfg.task_params["sudoku4"])
task = make_task("sudoku4", **params)
held_out = task.held_out(cfg.download.num_eval, derive_seed(cfg.seed, "eval", "sudoku4"))
exclude = {ex.id for ex in held_out}
levels = range(params["num_empty"], params["num_empty_max"] + 1)
per, extra = divmod(cfg.download.num_eval, len(levels))
validation = [
    ex
    for i, k in enumerate(levels)
    for ex in make_task("sudoku4", num_empty=k).generate(
        per + (i < extra), derive_seed(cfg.seed, "validation", "sudoku4", k), exclude=exclude
    )
]
for root in sys.argv[1:]:
    if read_json(Path(root) / "sudoku4" / "task.json")["params"] != params:
        sys.exit(f"{root}/sudoku4/task.json: not params.yaml's task_params.sudoku4 {params}")
    write_task(root, task, params, validation)
    print(f"{root}/sudoku4: {len(validation)} validation items, {per}-{per + 1} per level {levels[0]}..{levels[-1]}")
