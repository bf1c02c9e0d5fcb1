"""The GRPO stage as a recipe: :func:`setup` (the models, the accelerator, the run's identity and its resolved
config), :func:`train` (:func:`ddmrl.training.grpo.train_grpo` with the run's checkpoints and trackers), :func:`save`
(the policy and the metrics, main process) and :func:`clean_up`. ``stages/grpo.py`` calls them in that order.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import yaml

from ddmrl.aux_policies.base import AuxPolicy, new_aux_policy
from ddmrl.config import Config, GRPOConfig
from ddmrl.io import write_json, write_text
from ddmrl.methods import METHODS
from ddmrl.models.checkpoint import checkpoint_digest, load_checkpoint
from ddmrl.models.layout import for_task
from ddmrl.plan import check_fits
from ddmrl.rollout import sampler_steps
from ddmrl.tasks.base import Task
from ddmrl.tasks.store import load_task, training_draw
from ddmrl.training import distributed as dist
from ddmrl.training.grpo import Timing, train_grpo
from ddmrl.training.resume import Checkpointer, fingerprint
from ddmrl.training.tracking import RunLog, plain, start_trackers, trackers, without_trackers


@dataclass
class GRPORun:
    """Everything one GRPO run holds between its phases."""

    name: str  # the run, e.g. rebrl_sudoku4_s0
    cfg: GRPOConfig
    task_name: str
    seed: int  # the run's seed (grpo.seeds)
    run_seed: int  # every draw of the run derives from it (ddmrl.seeding.derive_seed)
    model: str  # the starting checkpoint
    policy: Any
    ref: Any  # the frozen reference, or None (LoRA: the base; no KL; a frozen model)
    tok: Any
    task: Task
    aux: AuxPolicy | None
    acc: Any  # accelerate.Accelerator
    draw: Any  # rollout batch -> its prompts (the global batch; each process takes its share)
    resolved: dict[str, Any]  # the run's resolved hyperparameters (--config-out)
    checkpointer: Checkpointer
    log: RunLog
    start: float  # time.time() when the run began
    value: Any = None  # the method's value model (TraceRL's; ddmrl.methods.base.Method.value_model), or None


def setup(
    cfg: Config, run: str, run_seed: int, tasks: str, model: str, curve: str, checkpoints: str | None,
    log_dir: str | None,
) -> GRPORun:  # fmt: skip
    """Load the task and the models (whole, before the Accelerator exists: under ZeRO-3 transformers would otherwise
    load them partitioned), check the plan fits the GPUs, build the reference and the auxiliary policy, prepare the
    policy (mixed precision, checkpointing, LoRA, the task's layout), make the accelerator with its trackers, and
    the run's checkpointer, whose fingerprint is the run, its hyperparameters, the starting checkpoint and the
    processes."""
    start = time.time()
    gcfg, task_name, seed = cfg.run(run)
    task, held_out = load_task(tasks, task_name)
    policy, tok = load_checkpoint(model)
    if gcfg.launch.gpu_memory_gib:  # a run that cannot fit its GPUs stops here, before any GPU work
        check_fits(gcfg, cfg.image.model if task_name in cfg.image.tasks else cfg.model, model, tok, task)
    needs_ref = gcfg.beta and gcfg.kl_target == "ref" and not gcfg.aux_policy.freeze_model
    # LoRA: the base is the reference; a frozen model (only an auxiliary policy trains) or no KL: no reference
    ref = copy.deepcopy(policy).requires_grad_(False) if needs_ref and not gcfg.lora.r else None
    # an auxiliary policy (Co-GRPO's schedule, a learned unmasking policy), initialised from the run's seed
    aux = new_aux_policy(gcfg.aux_policy, sampler_steps(gcfg.sampler, task.completion_length))
    value = METHODS[gcfg.method].value_model(gcfg, policy)  # a copy of the loaded policy (TraceRL's value model)
    policy = dist.prepare_model(policy, gcfg.mixed_precision, gcfg.gradient_checkpointing, gcfg.lora)
    # images: MMaDA's layout (prompt, <soi>, image, <eoi>), logits sliced to the image codes
    policy = for_task(policy, tok, task)
    ref = None if ref is None else for_task(ref, tok, task)
    log_with = trackers(gcfg.report_to, log_dir, f"grpo_{run}", "grpo.report_to")
    acc = dist.make_accelerator(
        gcfg.mixed_precision, gcfg.gradient_accumulation_steps, log_with=log_with, timeout_s=gcfg.launch.timeout_s
    )
    draw = training_draw(task, held_out, run_seed, "grpo", gcfg.num_prompts)
    hyper = dataclasses.asdict(gcfg)
    resolved = plain({"run": run, "task": task_name, "seed": seed, "run_seed": run_seed, "model": model,
                      "profile": cfg.profile, "num_processes": acc.num_processes, "grpo": hyper})  # fmt: skip
    parts = ("grpo", run, run_seed, without_trackers(hyper), checkpoint_digest(model), *dist.fingerprint_parts(acc))
    checkpointer = Checkpointer(checkpoints, fingerprint(*parts), gcfg.save_total_limit)
    return GRPORun(run, gcfg, task_name, seed, run_seed, model, policy, ref, tok, task, aux, acc, draw, resolved,
                   checkpointer, RunLog(curve), start, value)  # fmt: skip


def write_config(r: GRPORun, path: str | None) -> None:
    """The run's resolved hyperparameters as YAML (main process)."""
    if path and r.acc.is_main_process:
        write_text(path, yaml.safe_dump(r.resolved, sort_keys=False))


def train(r: GRPORun, log_dir: str | None) -> tuple[list[dict[str, float]], Timing]:
    """The run's trackers started, then ``cfg.max_steps`` optimiser steps (resumed from the newest checkpoint): the
    curve, a row per rollout batch (appended to the curve file as it comes), and the time per phase."""
    print(f"grpo: process {r.acc.process_index + 1}/{r.acc.num_processes} on {r.acc.device}", flush=True)
    start_trackers(r.acc, f"grpo_{r.name}", r.resolved, log_dir)
    return train_grpo(r.policy, r.ref, r.tok, r.task, r.draw, r.cfg, r.run_seed, r.log, r.checkpointer,
                      accelerator=r.acc, aux_policy=r.aux, value_model=r.value)  # fmt: skip


def save(r: GRPORun, curve: list[dict[str, float]], timing: Timing, model_out: str, metrics: str) -> None:
    """The trained policy (main process only; LoRA adapters merged; the auxiliary policy or value model beside it)
    and the run's metrics: steps, first and last reward, time, non-finite steps skipped."""
    dist.report_weights(r.acc, r.policy, "grpo")
    dist.save_policy(r.acc, r.policy, r.tok, model_out, r.aux, r.value)
    if r.acc.is_main_process:
        write_json(metrics, {
            "run": r.name, "method": r.cfg.method, "task": r.task_name, "seed": r.seed, "run_seed": r.run_seed,
            "steps": curve[-1]["step"], "reward_first": curve[0]["reward"], "reward_last": curve[-1]["reward"],
            "seconds": time.time() - r.start, "timing": dataclasses.asdict(timing),
            "nonfinite_skipped": curve[-1]["nonfinite_skipped"], "num_processes": r.acc.num_processes,
        })  # fmt: skip


def clean_up(r: GRPORun) -> None:
    """The run's checkpoints removed (its outputs are complete), every process done, the trackers closed."""
    if r.acc.is_main_process:
        r.checkpointer.clear()
    r.acc.wait_for_everyone()
    r.acc.end_training()
