"""Held-out sets at other difficulty levels than the main job's, for probing its base and SFT models (issue #38: do
tasks spread in difficulty give every base model items at its frontier?). One tasks directory per level, in the
download stage's layout, each with 256 items drawn with the seed purpose "difficulty", none of them a held-out item
of the main job (params.yaml's seed and download.num_eval):

    python docs/difficulty_probe/make_levels.py OUT   # OUT/sudoku4_e<k>/sudoku4, OUT/chain_h<k>/chain
"""

import sys
from pathlib import Path

from ddmrl import config
from ddmrl.seeding import derive_seed
from ddmrl.tasks import make_task
from ddmrl.tasks.store import write_task

#: task: (directory tag, generator key, levels); chain stops at 3 hops, since the main job's model has 50 positions
#: and a 4-hop chain needs 58 (TinyDDM refuses longer sequences)
LEVELS = {"sudoku4": ("e", "num_empty", [4, 6, 8, 10, 12]), "chain": ("h", "hops", [1, 2, 3])}
N = 256


def main() -> None:
    cfg = config.load("params.yaml")
    out = Path(sys.argv[1])
    for name, (tag, key, values) in LEVELS.items():
        main_params = dict(cfg.task_params.get(name, {}))
        held_out = make_task(name, **main_params).held_out(cfg.download.num_eval, derive_seed(cfg.seed, "eval", name))
        exclude = {ex.id for ex in held_out}
        for value in values:
            params = {**main_params, key: value}
            task = make_task(name, **params)
            items = task.generate(N, derive_seed(cfg.seed, "difficulty", name, value), exclude=exclude)
            write_task(out / f"{name}_{tag}{value}", task, params, items)
            print(f"{out}/{name}_{tag}{value}: {len(items)} items, {params}")


if __name__ == "__main__":
    main()
