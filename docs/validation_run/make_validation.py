"""Turn a workspace into a validation workspace: every held-out set becomes a validation set.

RL hyperparameters are chosen on validation items, never on the held-out ones (issue #38). Run after the download
stage of a fresh workspace (`snakemake --cores all --until download`), then the rest of the job as usual: every
`eval.jsonl` is replaced by as many items drawn with the seed purpose "validation", disjoint from the held-out items,
so that every evaluation and table of that workspace reads validation accuracy. Training draws then exclude the
validation ids instead of the held-out ids, so the SFT and RL runs see the main job's training data except where a
draw hits a held-out item (3 of the 12 Sudoku runs of RUN.md, once each in 320 prompts). A marker file, VALIDATION,
keeps a second call from drawing again.

    python docs/validation_run/make_validation.py data/download/s*/tasks
"""

import sys
from pathlib import Path

from ddmrl import config
from ddmrl.io import read_json
from ddmrl.seeding import derive_seed
from ddmrl.tasks.store import load_task, write_task

cfg = config.load("params.yaml")
for root in sys.argv[1:]:
    for task_dir in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        if (task_dir / "VALIDATION").exists():
            sys.exit(f"{task_dir}: already holds validation items (its VALIDATION file)")
        task, held_out = load_task(root, task_dir.name)
        params = read_json(task_dir / "task.json")["params"]
        seed = derive_seed(cfg.seed, "validation", task.name)
        validation = task.generate(len(held_out), seed, exclude={ex.id for ex in held_out})
        write_task(root, task, params, validation)
        (task_dir / "VALIDATION").write_text(f"validation items drawn with seed {seed}\n")
        print(f"{task_dir}: {len(validation)} validation items replace {len(held_out)} held-out items")
