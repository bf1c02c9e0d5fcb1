"""base_models: how much the text table moves with the base model. Not a stage of the DAG: it reads several runs of
the DAG that differ only in the pre-training seed (``download.seed``), each in its own checkout, and tables each
row's accuracy and gain per base model and over them (``ddmrl.base_models``).

    # base models 1 and 2 beside the main job (base model 0), one GRPO seed each, text only (26 jobs each):
    printf 'download: {seed: 1}\\ngrpo: {seeds: [0]}\\nimage: {tasks: []}\\n' > ../base1.yaml
    (cd ../ddmrl-base1 && snakemake --cores all --configfile ../base1.yaml --omit-from credit)
    python stages/base_models.py --params params.yaml --runs 0=. 1=../ddmrl-base1 2=../ddmrl-base2 \
        --out data/base_models

The runs' files are found by the path convention (``ddmrl.pipeline.layout``); every row's GRPO run is its seed 0.
"""

import argparse
from pathlib import Path

from ddmrl import config
from ddmrl.base_models import base_model_table
from ddmrl.cli import run_stage, write_csv
from ddmrl.config import run_name
from ddmrl.io import write_text
from ddmrl.pipeline.layout import EVALUATE_DIR
from ddmrl.tables import text_scores, to_markdown

NOTE = """
Each base model pre-trained with its own seed (download.seed), then SFT and one GRPO run per method (seed 0), scored
on the same held-out items. Per base model: accuracy, and the gain over the start model (RL: SFT; SFT: base) with
* where its paired 95 % interval excludes 0. Over base models: 95 % bootstrap intervals over base models and items;
the gain pairs each base model's run with its own start model. A gain whose interval over base models excludes 0
survives a change of base model.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--runs", nargs="+", required=True, help="SEED=CHECKOUT: the checkout that ran each base seed")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cfg = config.load(args.params)
    roots = {int(seed): Path(root) for seed, root in (item.split("=", 1) for item in args.runs)}

    keys = [(m, t) for t in cfg.tasks for m in ("base", "sft", *(run_name(r, t, 0) for r in cfg.text_methods))]
    per_base = {
        seed: {(m, t): text_scores(root / EVALUATE_DIR / m / f"{t}.jsonl", t) for m, t in keys}
        for seed, root in roots.items()
    }
    table, records = base_model_table(cfg, per_base)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(
        out / "base_models.md", "# Held-out accuracy per base model (text tasks)\n\n" + to_markdown(table) + NOTE
    )
    write_csv(out / "base_models.csv", records)


if __name__ == "__main__":
    run_stage(main)
