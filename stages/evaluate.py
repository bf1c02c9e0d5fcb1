"""evaluate: held-out accuracy of one model on one task.

Text tasks use d1's protocol (greedy, low-confidence, semi-AR). It writes every generation (d1's record fields:
question, ground_truth, generation) and the metrics: accuracy in percent (Sudoku: cell accuracy over the empty
cells, pooled; Countdown: exact), the mean training reward and the model evaluations per sample (``nfe_per_sample``).
A model saved with a learned unmasking policy is evaluated with it, and (its metrics' ``heuristics``, each
generation's ``heuristics``) with the confidence heuristics it is compared with: d1's low-confidence protocol and
Fast-dLLM's threshold rule. With ``evaluate.pass_at_k.n`` > 0 the metrics also hold pass@k from n sampled completions
per item (``pass_at_k``: the estimate per k and each item's count of correct samples). With
``evaluate.sampled_temperature`` > 0 every item is also decoded once at that temperature (the metrics' ``sampled``,
each generation's ``sampled``). A model saved with Co-GRPO's
schedule policy samples its images with that schedule.

    python stages/evaluate.py --params params.yaml --tasks data/download/tasks --model data/sft/model \
        --task sudoku4 --name sft --generations data/evaluate/sft/sudoku4.jsonl \
        --metrics data/evaluate/sft/sudoku4.json

Text-to-image tasks use GenEval's protocol (``image.evaluate``: several sampled images per prompt). The images go
to ``--images`` in GenEval's folder layout (``<NNNNN>/metadata.jsonl``, ``<NNNNN>/samples/<kkkk>.png``) and are
judged from there (geneval-mini: its exact rules; ``geneval``: the official evaluator); the results JSONL in
GenEval's schema goes to ``--results``, and the metrics are GenEval's summary of it (per-tag accuracy, Overall =
unweighted mean of tags, in percent). The benchmarks of ``image.eval_tasks`` follow their own protocols the same
way: ``hps`` (HPSv3 of each image, the mean as ``score``) and ``dpg`` (DPG-Bench: 4 images tiled 2x2 per prompt,
VQA answers, DPG's score).

    python stages/evaluate.py --params params.yaml --tasks data/download/image/tasks \
        --model data/download/image/base --task geneval_mini --name base \
        --generations data/evaluate/base/geneval_mini.jsonl --metrics data/evaluate/base/geneval_mini.json \
        --images data/evaluate/base/geneval_mini --results data/evaluate/base/geneval_mini_results.jsonl
"""

import argparse

from ddmrl import config
from ddmrl.aux_policies.base import load_aux_policy
from ddmrl.cli import run_stage
from ddmrl.evaluation import evaluate, evaluate_images, pass_at_k, with_heuristics, with_sampled
from ddmrl.io import write_json, write_jsonl
from ddmrl.models.checkpoint import load_checkpoint
from ddmrl.models.layout import for_task
from ddmrl.tasks.store import load_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--name", required=True, help="model name in the tables: base, sft or a GRPO run")
    ap.add_argument("--generations", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--images", help="image tasks: GenEval folder layout of the generated images")
    ap.add_argument("--results", help="image tasks: GenEval results JSONL of those images")
    args = ap.parse_args()
    cfg = config.load(args.params)

    model, tok = load_checkpoint(args.model, device="auto")  # the GPU when there is one
    aux = load_aux_policy(args.model, device=str(next(model.parameters()).device))  # a schedule/unmasking policy
    task, held_out = load_task(args.tasks, args.task)
    model = for_task(model, tok, task)
    if task.modality == "image":
        if not (args.images and args.results):
            ap.error(f"{args.task} is an image task: pass --images and --results")
        ecfg = cfg.image.evaluate
        metrics, records, rows = evaluate_images(model, tok, task, held_out, ecfg, args.images, cfg.seed, aux)
        write_jsonl(args.results, rows)
    else:
        ecfg = cfg.evaluate
        metrics, records = evaluate(model, tok, task, held_out, ecfg.sampler, ecfg.batch_size, cfg.seed, aux)
        if (
            aux is not None and aux.kind == "unmasking"
        ):  # the unmasking paper's comparison: the same model, the heuristics
            metrics, records = with_heuristics(
                model, tok, task, held_out, ecfg.sampler, ecfg.batch_size, cfg.seed, metrics, records
            )
        if ecfg.sampled_temperature:  # each item also decoded once at the rollouts' temperature
            metrics, records = with_sampled(
                model, tok, task, held_out, ecfg.sampler, ecfg.sampled_temperature, ecfg.batch_size, cfg.seed,
                metrics, records, aux,
            )  # fmt: skip
        if ecfg.pass_at_k.n:  # n sampled completions per item: pass@k beside the greedy accuracy
            metrics["pass_at_k"] = pass_at_k(
                model, tok, task, held_out, ecfg.sampler, ecfg.pass_at_k, ecfg.batch_size, cfg.seed
            )

    write_jsonl(args.generations, records)
    write_json(args.metrics, {"model": args.name, "task": args.task, **metrics})


if __name__ == "__main__":
    run_stage(main)
