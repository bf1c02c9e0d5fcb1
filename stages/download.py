"""download: the base checkpoint and the task data.

Embedded profiles (``tiny``, ``smoke``) build everything locally, with no network: the held-out evaluation set of
every task, a character tokenizer, and a TinyDDM pre-trained from scratch with the masked-diffusion (ELBO) loss
on whole [prompt | answer] sequences drawn fresh from the task generators (LLaDA pre-training; Nie et al. 2025).
With ``model.kind: tiny_block`` the model is TinyBlockDDM, pre-trained with the same loss as a block-diffusion model
(each noised block of ``model.block_size`` sees itself and the clean blocks before it; ``ddmrl.likelihood.block``).

With ``--modality image`` it builds the text-to-image branch (``image:`` in params.yaml) instead: one unified
model in MMaDA's layout (prompt, <soi>, image tokens, <eoi>), trained as MMaDA trains text-to-image: the prompt is
never masked, the image tokens are, and the caption is dropped with probability ``image.cond_dropout_prob`` so
that classifier-free guidance works.

    python stages/download.py --params params.yaml --tasks-out data/download/tasks \
        --model-out data/download/base --metrics data/download/metrics.json --curve data/download/curve.csv \
        --config-out data/download/config.yaml --checkpoints data/checkpoints/download --log-dir logs/download

With ``download.pretrain.save_steps`` the pre-training checkpoints to ``--checkpoints`` and a rerun after a kill
resumes from the newest intact checkpoint; they are removed once the outputs are written. The curve grows while
the pre-training runs and goes to the trackers of ``download.pretrain.report_to`` under ``--log-dir``.

Paper profiles (``model.kind`` llada | mmada | hf_masked_lm) train nothing here: every ``download.hub`` item
(checkpoints at pinned revisions, data sets by hub id or local path) is fetched into ``download.hub_dir/<name>``
(resumable; ``ddmrl.hub.fetch_all``) with a checksum manifest per item in ``--manifests``; ``--model-out`` gets a
pointer to the checkpoint (``ddmrl.models.checkpoint.POINTER``). Offline, the stage fails at once with one line
naming every missing item and the command that downloads it.
"""

import ddmrl  # noqa: F401, I001  (first: pins the CPU numerics before numpy loads its BLAS; ddmrl.numerics)
import argparse
import dataclasses
import sys
import time

import yaml

from ddmrl import config, embedded
from ddmrl.cli import run_stage, write_csv
from ddmrl.io import atomic_path, file_digest, write_json, write_text
from ddmrl.models.checkpoint import save_checkpoint, write_pointer
from ddmrl.models.layout import for_task
from ddmrl.models.tiny import new_tiny_model
from ddmrl.models.tiny_block import new_tiny_block_model
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.seeding import derive_seed, generator, seed_everything
from ddmrl.tasks import make_task
from ddmrl.tasks.store import training_draw, write_task
from ddmrl.training import distributed as dist
from ddmrl.tasks.encoding import drop_prompts, encode_examples, prompt_length
from ddmrl.training.mdm import train_mdm
from ddmrl.training.resume import Checkpointer
from ddmrl.training.tracking import RunLog, plain, start_trackers, trackers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--tasks-out", required=True)
    ap.add_argument("--model-out", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--curve", required=True)
    ap.add_argument("--config-out", help="the resolved configuration of the pre-training (YAML)")
    ap.add_argument("--checkpoints", help="directory for resumable checkpoints (not an output)")
    ap.add_argument("--log-dir", help="directory for the experiment trackers' files (not an output)")
    ap.add_argument("--modality", choices=("text", "image"), default="text")
    ap.add_argument("--manifests", help="paper profiles: directory for the checksum manifests of the downloads")
    ap.add_argument("--seed", type=int, help="the pre-training's seed (download.base_per_seed: the GRPO seed's)")
    args = ap.parse_args()
    cfg = config.load(args.params)
    branch = cfg.image if args.modality == "image" else cfg  # both have tasks, task_params, model, download
    seed = cfg.seed if branch.download.seed is None else branch.download.seed  # the pre-training's; held-out: cfg's
    seed = seed if args.seed is None else args.seed
    seed_everything(seed)
    start = time.time()

    # 0. paper profiles: the checkpoint and data sets, before anything else (offline: one line naming what is missing)
    if branch.model.pretrained:
        from ddmrl.hub import fetch_all  # real models only: the embedded default does not run (or depend on) it

        if not args.manifests:
            ap.error("a paper profile (model.kind != tiny) needs --manifests")
        fetched = fetch_all(branch.download.hub_items(), branch.download.hub_dir, args.manifests)

    # 1. tasks and their held-out sets
    tasks, draws = [], []
    for name in branch.tasks:
        params = branch.task_params.get(name, {})
        task = make_task(name, **params)
        held_out = task.held_out(branch.download.num_eval, derive_seed(cfg.seed, "eval", name))
        write_task(args.tasks_out, task, params, held_out)
        tasks.append(task)
        draws.append(training_draw(task, held_out, seed, "pretrain", branch.download.pretrain.batch_size))
    for name in cfg.image.eval_tasks if args.modality == "image" else ():  # benchmarks: every prompt, held out
        params = branch.task_params.get(name, {})
        task = make_task(name, **params)
        write_task(args.tasks_out, task, params, task.held_out(sys.maxsize, cfg.seed))

    if branch.model.pretrained:  # the model is the downloaded checkpoint, pinned by the manifests' digests
        manifests = {name: file_digest(f"{args.manifests}/{name}.manifest.json") for name in fetched}
        with atomic_path(args.model_out) as tmp:
            write_pointer(tmp, {**dataclasses.asdict(branch.model.spec()), "manifests": manifests})
        write_csv(args.curve, [])
        write_json(
            args.metrics, {"downloads": {k: str(v) for k, v in fetched.items()}, "seconds": time.time() - start}
        )
        return

    # 2. tokenizer and a fresh model (images: seen through MMaDA's layout, which appends <eoi>)
    tok = build_tokenizer([t.alphabet for t in tasks], [w for t in tasks for w in t.special_tokens])
    positions = max(prompt_length(t) + t.completion_length + len(t.completion_suffix) for t in tasks)
    block = branch.model.block_size if branch.model.kind == "tiny_block" else None  # block diffusion's blocks
    if block is None:
        model = new_tiny_model(branch.model, tok, positions)
    else:
        model = new_tiny_block_model(branch.model, tok, positions, block)
    trained = for_task(model, tok, tasks[0]) if args.modality == "image" else model

    # 3. pre-train, tasks in turn: text on whole sequences; images on the image tokens, with caption dropout
    def next_batch(step: int):
        i = step % len(tasks)
        batch = encode_examples(tok, tasks[i], draws[i](step))
        if args.modality == "text":
            return batch
        dropout = generator(seed, "cond_dropout", step)
        return batch._replace(
            prompt_ids=drop_prompts(batch.prompt_ids, cfg.image.cond_dropout_prob, tok.mask_token_id, dropout)
        )

    pre = branch.download.pretrain
    download = dataclasses.asdict(branch.download) | {"seed": seed}  # the pre-training's seed, whoever set it
    dropout = cfg.image.cond_dropout_prob
    resolved = plain(
        {
            "modality": args.modality,
            "seed": cfg.seed,
            "profile": cfg.profile,
            "tasks": branch.tasks,
            "task_params": branch.task_params,
            "model": dataclasses.asdict(branch.model),
            "download": download,
            "cond_dropout_prob": dropout if args.modality == "image" else None,
        }
    )
    if args.config_out:
        write_text(args.config_out, yaml.safe_dump(resolved, sort_keys=False))
    run_id = embedded.recipe_id(cfg, args.modality, seed)  # also the resumable checkpoints' fingerprint
    packaged = embedded.packaged_base(run_id) if branch.download.packaged and args.modality == "text" else None
    if packaged is not None:  # the package's base model of this recipe, its sha256 checked: no pre-training
        embedded.load_weights(model, packaged.weights)
        save_checkpoint(model, tok, args.model_out)
        embedded.check_saved(args.model_out, packaged.entry)
        write_text(args.curve, packaged.curve.read_text())
        origin = {"recipe": run_id, "packaged": packaged.entry["file"], "seconds": time.time() - start}
        write_json(args.metrics, {**packaged.entry["metrics"], **origin})
        return
    objective = "sft" if args.modality == "image" else "pretrain"  # MMaDA never masks the caption
    ckpt = Checkpointer(args.checkpoints, run_id, pre.save_total_limit)
    name, key = (
        ("download", "download.pretrain") if args.modality == "text" else ("download_image", "image.download.pretrain")
    )
    acc = dist.local_accelerator(trained, log_with=trackers(pre.report_to, args.log_dir, name, f"{key}.report_to"))
    start_trackers(acc, name, resolved, args.log_dir)
    masking = generator(seed, "pretrain")
    curve = train_mdm(
        trained, next_batch, pre, objective, masking, "pretrain", ckpt, acc, RunLog(args.curve), block_length=block
    )

    # 4. outputs
    save_checkpoint(model, tok, args.model_out)
    write_json(
        args.metrics,
        {
            "pretrain_loss": curve[-1]["loss"] if curve else None,
            "num_parameters": sum(p.numel() for p in model.parameters()),
            "vocab_size": len(tok),
            "recipe": run_id,
            "seconds": time.time() - start,
        },
    )
    ckpt.clear()
    acc.end_training()


if __name__ == "__main__":
    run_stage(main)
