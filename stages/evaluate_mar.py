"""evaluate_mar: GenEval's protocol on geneval-mini for a MAR model (the base model or a MAR GRPO run).

As ``stages/evaluate.py`` for images: several sampled images per held-out prompt (``image.evaluate``'s counts, so
every image row has the same image slots), decoded to the nearest colour codes, written in GenEval's folder layout
(``<NNNNN>/metadata.jsonl``, ``<NNNNN>/samples/<kkkk>.png``) and judged from those PNGs by geneval-mini's exact
rules; the results JSONL in GenEval's schema goes to ``--results`` and the metrics are GenEval's summary of it.
Sampling: ``mar.evaluate.sampler``.

    python stages/evaluate_mar.py --params params.yaml --tasks data/download/mar/tasks \
        --model data/download/mar/base --name mar_base --generations data/evaluate/mar_base/geneval_mini.jsonl \
        --metrics data/evaluate/mar_base/geneval_mini.json --images data/evaluate/mar_base/geneval_mini \
        --results data/evaluate/mar_base/geneval_mini_results.jsonl
"""

import argparse

from ddmrl import config
from ddmrl.cli import run_stage
from ddmrl.config import MAR_TASK
from ddmrl.io import write_json, write_jsonl
from ddmrl.mar.evaluation import evaluate_mar
from ddmrl.mar.model import load_mar
from ddmrl.mar.sampler import schedule_of
from ddmrl.tasks.store import load_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", required=True, help="model name in the tables: mar_base or a MAR run")
    ap.add_argument("--generations", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--images", required=True, help="GenEval folder layout of the generated images")
    ap.add_argument("--results", required=True, help="GenEval results JSONL of those images")
    args = ap.parse_args()
    cfg = config.load(args.params)
    ecfg = cfg.mar.evaluate

    model = load_mar(args.model)
    task, held_out = load_task(args.tasks, MAR_TASK)
    counts = [cfg.image.evaluate.samples_per_prompt] * len(held_out)
    metrics, records, rows = evaluate_mar(model, task, held_out, counts, args.images, ecfg.sampler.ar_steps,
                                          schedule_of(model, ecfg.sampler), ecfg.sampler.temperature,
                                          ecfg.batch_size, cfg.seed)  # fmt: skip
    write_jsonl(args.results, rows)
    write_jsonl(args.generations, records)
    write_json(args.metrics, {"model": args.name, "task": MAR_TASK, **metrics})


if __name__ == "__main__":
    run_stage(main)
