"""rollout: G completions per training prompt from a model, with the sampler that GRPO uses.

Each record carries what is needed to recompute everything downstream: the prompt, the group and sample index,
the completion tokens and text, the sampler step that revealed each token, the seed of the batch, and the seed
from which any method's training views of the batch are built (``view_seed``; ``ddmrl.masking.build_views``
derives one seed per view from it, so the views regenerate identically).

    python stages/rollout.py --params params.yaml --tasks data/download/tasks --model data/sft/model \
        --task sudoku4 --out data/rollout/sft/sudoku4.jsonl
"""

import argparse

from ddmrl import config
from ddmrl.cli import run_stage
from ddmrl.io import write_jsonl
from ddmrl.models.checkpoint import load_checkpoint
from ddmrl.rollout import rollout, sampler_steps
from ddmrl.seeding import derive_seed, generator
from ddmrl.tasks.store import load_task, training_draw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cfg = config.load(args.params)
    rc = cfg.rollout

    model, tok = load_checkpoint(args.model, device="auto")  # the GPU when there is one
    task, held_out = load_task(args.tasks, args.task)
    examples = training_draw(task, held_out, cfg.seed, "rollout", rc.num_prompts)(0)
    seed = derive_seed(cfg.seed, "rollout", args.task)
    out = rollout(model, tok, task, examples, rc.num_generations, rc.sampler, generator(seed))
    view_seed = derive_seed(seed, "views")

    g, steps = rc.num_generations, sampler_steps(rc.sampler, task.completion_length)
    write_jsonl(
        args.out,
        [
            {
                "prompt_id": examples[i // g].id,
                "group": i // g,
                "sample": i % g,
                "example": examples[i // g].to_record(),
                "completion": text,
                "completion_ids": out.completion_ids[i].tolist(),
                "reveal_step": out.reveal_step[i].tolist(),
                "seed": seed,
                "view_seed": view_seed,
                "sampler_steps": steps,
            }
            for i, text in enumerate(out.texts)
        ],
    )


if __name__ == "__main__":
    run_stage(main)
