"""The online GRPO loop for masked diffusion models, shared by every method.

Per rollout batch (TRL's buffering, as in d1 and MaskGRPO):
  1. draw ``num_prompts`` training prompts and sample ``num_generations`` completions each (LLaDA semi-AR);
  2. score them with the task reward and compute group advantages;
  3. build the method's training views from the rollout seed, and their token weights;
  4. evaluate old (rollout-time policy) and reference log-probs on every view, once, without gradients;
  5. for each step of the views' schedule (view j at step j for most methods): current log-probs on the step's
     views, the method's objective, one optimiser step (over ``gradient_accumulation_steps`` micro-batches).

Each view is consumed at its own step (the paper intent). d1 indexes views by the micro-step counter
(``_step % mu`` after the increment), which with gradient accumulation gives each micro-batch only every A-th view
(d1's ``compute_loss``); ``legacy_micro_step_views`` reproduces d1's indexing. MaskGRPO's copy is shifted by one
(``m % mu``, MaskGRPO's ``compute_loss``) and is not reproduced. Every random draw comes from a generator derived from
(seed, purpose, iteration), never from the global RNG, so a run resumed from a checkpoint at a rollout-batch
boundary continues exactly as the uninterrupted run would have.

Numerical faults (``on_nonfinite``): a non-finite reward or advantage skips the whole rollout batch, a non-finite
loss skips its optimiser step; both are counted (``nonfinite_skipped``). With ``stop`` the run ends with a
diagnostic instead, as it does after 10 consecutive skipped rollout batches.

Several processes (``accelerate launch``; ``ddmrl.training.distributed``): each takes its share of every rollout
batch's prompts and samples with its own seeds; the non-finite decisions are taken by all processes together; the
curve holds rewards and losses gathered over processes. The old and reference log-probs are still computed once per
rollout batch, each process for its own rollouts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
from tqdm import tqdm

from ddmrl.config import ConfigError, GRPOConfig
from ddmrl.likelihood import token_logps
from ddmrl.masking import Views, apply_view, build_views
from ddmrl.methods import METHODS
from ddmrl.objectives import OBJECTIVES, ObjectiveInputs, group_advantages, token_weights
from ddmrl.objectives.weights import realised_ratio
from ddmrl.rollout import Rollouts, rewards, rollout
from ddmrl.seeding import derive_seed
from ddmrl.tasks.base import Example, Task
from ddmrl.training import distributed as dist
from ddmrl.training.resume import Checkpointer
from ddmrl.training.tracking import RunLog

MAX_CONSECUTIVE_SKIPS = 10


class NonFiniteError(RuntimeError):
    """A non-finite reward, advantage or loss with ``on_nonfinite: stop``."""


@dataclass
class Timing:
    """Seconds spent per phase (verl's phase names)."""

    gen: float = 0.0
    old_ref_logp: float = 0.0
    update: float = 0.0


class Batch(NamedTuple):
    """A scored rollout batch with its views: everything the inner steps need."""

    rollouts: Rollouts
    rewards: torch.Tensor  # [N]
    advantages: torch.Tensor  # [N]
    zero_std: torch.Tensor  # [B] groups with equal rewards
    views: Views
    weights: torch.Tensor  # [V, N, L]
    z: torch.Tensor | None  # [N]
    inputs: torch.Tensor  # [V, N, P + L] the model input of every view


def make_views(cfg: GRPOConfig, batch: Rollouts, seed: int, pad_id: int, mask_id: int):
    """The method's views of a rollout batch, their weights and model inputs (steps 3 of the loop)."""
    method = METHODS[cfg.method]
    views = build_views(
        cfg.remasking or method.remasking,
        mu=cfg.num_iterations,
        seed=seed,
        completion_mask=batch.completion_mask,
        prompt_ids=batch.prompt_ids,
        pad_id=pad_id,
        reveal_step=batch.reveal_step,
        coupling=cfg.coupling,
        gamma=cfg.gamma,
        p_mask_prompt=cfg.p_mask_prompt,
        shrink=cfg.shrink,
        views_per_step=cfg.views_per_step,
        block_length=cfg.sampler.block_length,
    )
    weights, z = token_weights(
        method.weighting, views, batch.completion_mask, cfg.rebrl_mode, cfg.legacy_broadcast_weighting
    )
    inputs = torch.stack(
        [apply_view(batch.prompt_ids, batch.completion_ids, views, v, mask_id) for v in range(views.masks.shape[0])]
    )
    return views, weights, z, inputs


#: at most this many logits (rows x positions x vocabulary) per forward pass of :func:`view_logps` (1 GiB in float32)
LOGITS_PER_PASS = 2**28


def view_logps(model, inputs: torch.Tensor, completion_ids: torch.Tensor, **guidance) -> torch.Tensor:
    """Token log-probs of every view: [V, N, P + L] inputs -> [V, N, L] (``guidance``: see :func:`logp_guidance`).

    The views go through the model together, as many per forward pass as keep its logits under
    :data:`LOGITS_PER_PASS` (at least one view), instead of one pass per view: the same numbers (rows are
    independent) in fewer, larger matrix products. Always the model's own full forward pass, never a sampler's cache.
    """
    v, n, t = inputs.shape
    config = getattr(model, "config", None) or getattr(getattr(model, "module", None), "config", None)  # DDP
    vocab = getattr(config, "vocab_size", None)
    branches = 2 if guidance.get("cfg_scale") else 1
    per_pass = max(1, LOGITS_PER_PASS // (branches * n * t * vocab)) if vocab else 1
    out = []
    for lo in range(0, v, per_pass):
        chunk = inputs[lo : lo + per_pass]  # [v', N, P + L]
        ids = completion_ids.repeat(chunk.shape[0], 1)  # [v' N, L]
        out.append(token_logps(model, chunk.reshape(-1, t), ids, **guidance).view(chunk.shape[0], n, -1))
    return torch.cat(out)


def logp_guidance(cfg: GRPOConfig, mask_id: int) -> dict:
    """``token_logps``' guidance keywords: the rollout sampler's CFG scale with ``logp_cfg: guided``, else none."""
    return {"cfg_scale": cfg.sampler.cfg_scale if cfg.logp_cfg == "guided" else 0.0, "mask_id": mask_id}


def step_views(views: Views, step: int, micro: int, cfg: GRPOConfig) -> tuple[int, ...]:
    """View indices of inner step ``step`` for micro-batch ``micro``.

    Paper intent: the schedule's entry for the step, whatever the micro-batch. ``legacy_micro_step_views``: d1's
    ``(_step % mu)`` after the increment, with one count per micro-batch.
    """
    if cfg.legacy_micro_step_views:
        mu = views.masks.shape[0]
        return ((step * cfg.gradient_accumulation_steps + micro + 1) % mu,)
    return views.steps[step]


def objective_inputs(b: Batch, old, ref, logps, ids: tuple[int, ...], rows: slice, g: int) -> ObjectiveInputs:
    """Slice a batch to the step's views and one micro-batch of rows."""
    v = list(ids)
    return ObjectiveInputs(
        logps=logps,
        old=old[v][:, rows],
        ref=None if ref is None else ref[v][:, rows],
        advantages=b.advantages[rows],
        weights=b.weights[v][:, rows],
        z=None if b.z is None else b.z[rows],
        t=realised_ratio(b.views, b.rollouts.completion_mask)[v][:, rows],
        targets=(b.views.target_masks[v] & b.rollouts.completion_mask[None])[:, rows],
        completion_mask=b.rollouts.completion_mask[rows],
        num_generations=g,
    )


def train_grpo(
    policy,
    ref,
    tok,
    task: Task,
    draw_prompts: Callable[[int], list[Example]],
    cfg: GRPOConfig,
    seed: int,
    run_log: RunLog | None = None,
    checkpointer: Checkpointer | None = None,
    accelerator=None,
) -> tuple[list[dict[str, float]], Timing]:
    """Run ``cfg.max_steps`` optimiser steps of GRPO; ``draw_prompts(iteration)`` gives each rollout batch's prompts.

    Returns the curve (one row per rollout batch) and the time spent per phase; each row also goes to ``run_log``
    (the curve file and the trackers) as soon as its rollout batch is done. With a ``checkpointer`` the state is
    saved at the first rollout-batch boundary after every ``cfg.save_steps`` steps, and the run resumes from the
    newest intact checkpoint (under every engine: accelerate's ``save_state``).

    ``ref`` is the frozen reference model, or None when ``policy`` is a peft model whose reference is the policy with
    its adapters disabled. ``accelerator``: the run's ``accelerate.Accelerator`` (None: one process on the device the
    policy is on). ``policy`` is prepared in place (wrapped for DDP/DeepSpeed); save it with
    ``ddmrl.training.distributed.save_policy``.
    """
    acc = accelerator or dist.local_accelerator(policy, cfg.mixed_precision, cfg.gradient_accumulation_steps)
    rank, world = acc.process_index, acc.num_processes
    rseed = dist.rank_seed(seed, rank)  # this process's own draws (process 0: the run's seed)
    objective = OBJECTIVES[METHODS[cfg.method].objective]
    dist.check_supported(acc, cfg.lora)
    if ref is None and not dist.is_peft(policy):
        raise ValueError("train_grpo: ref is None but the policy has no adapters to disable (lora.r = 0)")
    opt = torch.optim.AdamW(
        dist.trainable(policy), lr=cfg.learning_rate, betas=(0.9, 0.99), weight_decay=cfg.weight_decay
    )
    g, ga = cfg.num_generations, cfg.gradient_accumulation_steps
    guidance = logp_guidance(cfg, tok.mask_token_id)
    local_prompts = cfg.num_prompts // world
    if cfg.num_prompts % (world * ga):
        raise ConfigError(
            f"grpo.num_prompts = {cfg.num_prompts}: must be a multiple of processes x gradient_accumulation_steps = "
            f"{world} x {ga} (every micro-batch holds whole prompt groups)"
        )
    rows_per_micro = local_prompts * g // ga
    micro_rows = [slice(a * rows_per_micro, (a + 1) * rows_per_micro) for a in range(ga)]
    dist.set_accumulation(acc, ga)
    dist.configure_deepspeed(acc, rows_per_micro, ga, cfg.max_grad_norm)
    policy, opt = acc.prepare(policy, opt)
    ref = dist.place_reference(acc, ref)
    timing, curve, step, it, skipped, consecutive = Timing(), [], 0, 0, 0, 0
    if checkpointer is not None and (found := checkpointer.latest(acc)):
        path, meta = found
        checkpointer.restore(acc, path)
        curve, step, it, skipped = meta["curve"], meta["step"], meta["iteration"], meta["skipped"]
        timing = Timing(**meta["timing"])
        acc.print(f"resuming grpo from {path} (step {step})", flush=True)
    run_log = run_log or RunLog()
    run_log.start(acc, curve)
    bar = tqdm(
        total=cfg.max_steps, initial=step, desc=f"grpo {cfg.method}", mininterval=5, disable=not acc.is_main_process
    )
    while step < cfg.max_steps:
        saved_at = step
        # 1-2. rollouts, rewards, advantages (this process's share of the prompts, its own sampling seed)
        t0 = time.time()
        policy.eval()
        examples = dist.shard(draw_prompts(it), rank, world, "grpo.num_prompts")
        gen = dist.device_generator(acc.device, rseed, "rollout", it)
        batch = dist.to_device(rollout(policy, tok, task, examples, g, cfg.sampler, gen), torch.device("cpu"))
        r = rewards(task, examples, batch, g)  # [N]
        adv, zero_std = group_advantages(r, g, cfg.scale_rewards)
        if not dist.all_processes(acc, bool(torch.isfinite(r).all() and torch.isfinite(adv).all())):
            skipped, consecutive, it = skipped + 1, consecutive + 1, it + 1
            _nonfinite(cfg, f"rollout batch {it - 1}: non-finite reward or advantage", consecutive)
            continue
        consecutive = 0
        # 3. views and weights, all from the rollout seed (on the CPU), then everything on the run's device
        views, weights, z, inputs = make_views(
            cfg, batch, derive_seed(rseed, "views", it), tok.pad_token_id, tok.mask_token_id
        )
        b = dist.to_device(Batch(batch, r, adv, zero_std, views, weights, z, inputs), acc.device)
        inputs, completion_ids = b.inputs, b.rollouts.completion_ids
        _same_schedule(acc, len(views.steps))
        t1 = time.time()
        # 4. old and KL-target log-probs on identical views, once per rollout batch
        with torch.no_grad():
            old = view_logps(policy, inputs, completion_ids, **guidance)  # [V, N, L]
            kl_ref = None
            if cfg.beta:
                if cfg.kl_target == "old":
                    kl_ref = old
                elif ref is None:  # LoRA: the reference is the base model, the adapters switched off
                    with dist.adapters_disabled(acc, policy):
                        kl_ref = view_logps(policy, inputs, completion_ids, **guidance)
                else:
                    with acc.autocast():
                        kl_ref = view_logps(ref, inputs, completion_ids, **guidance)
        t2 = time.time()
        # 5. one optimiser step per entry of the schedule
        policy.train()
        stats = {"loss": 0.0, "kl": 0.0, "clip_ratio": 0.0}
        inner = min(len(views.steps), cfg.max_steps - step)
        for s in range(inner):
            acc.sync_gradients = True
            opt.zero_grad(set_to_none=True)
            finite = True
            for a, rows in enumerate(micro_rows):
                acc.sync_gradients = a == ga - 1  # DeepSpeed steps its engine at the accumulation boundary
                with dist.no_sync_unless(acc, policy, a == ga - 1):
                    ids = step_views(views, s, a, cfg)
                    logps = torch.stack(
                        [token_logps(policy, inputs[v, rows], completion_ids[rows], **guidance) for v in ids]
                    )
                    out = objective(objective_inputs(b, old, kl_ref, logps, ids, rows, g), cfg)
                    finite = dist.all_processes(acc, bool(torch.isfinite(out.loss)))
                    if not finite:
                        break
                    acc.backward(out.loss)  # divides by gradient_accumulation_steps
                stats["loss"] += out.loss.item() / (ga * inner)
                stats["kl"] += out.kl / (ga * inner)
                stats["clip_ratio"] += out.clip_ratio / (ga * inner)
            acc.sync_gradients = True
            if finite:
                acc.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
                opt.step()
            else:
                if dist.is_deepspeed(acc):
                    raise NonFiniteError(f"step {step + 1}: non-finite loss (cannot be skipped under DeepSpeed)")
                skipped += 1
                _nonfinite(cfg, f"step {step + 1}: non-finite loss", 1)
            step += 1
            bar.update(1)
        t3 = time.time()
        timing.gen += t1 - t0
        timing.old_ref_logp += t2 - t1
        timing.update += t3 - t2
        r_all, zero_all = dist.gather(acc, r), dist.gather(acc, zero_std.float())  # [N * world], [B * world]
        lengths = dist.gather(acc, batch.completion_mask.sum(1).float())
        row = {
            "step": step,
            "reward": r_all.mean().item(),
            "reward_std": r_all.view(-1, g).std(1).mean().item(),
            "frac_reward_zero_std": zero_all.mean().item(),
            **dist.mean_over_processes(acc, stats),
            "completions/mean_length": lengths.mean().item(),
            "nonfinite_skipped": skipped,
            "time": timing.gen + timing.old_ref_logp + timing.update,
        }
        curve.append(row)
        run_log.log(row)
        bar.set_postfix(
            {"reward": f"{row['reward']:.3f}", "kl": f"{row['kl']:.4f}", "s/step": f"{(t3 - t0) / inner:.2f}"}
        )
        it += 1
        if checkpointer is not None and cfg.save_steps and step // cfg.save_steps > saved_at // cfg.save_steps:
            if step < cfg.max_steps:
                meta = {"curve": curve, "iteration": it, "skipped": skipped, "timing": asdict(timing)}
                checkpointer.save(acc, step, meta)
    bar.close()
    policy.eval()
    return curve, timing


def _same_schedule(acc, inner_steps: int) -> None:
    """Every process must run the same number of optimiser steps per rollout batch (their collectives pair up)."""
    if acc.num_processes > 1:
        counts = dist.gather(acc, torch.tensor([inner_steps]))
        if not bool((counts == inner_steps).all()):
            raise RuntimeError(f"processes disagree on the optimiser steps of a rollout batch: {counts.tolist()}")


def _nonfinite(cfg: GRPOConfig, what: str, consecutive: int) -> None:
    """Stop with a diagnostic when configured to, or after too many consecutive skipped rollout batches."""
    if cfg.on_nonfinite == "stop":
        raise NonFiniteError(f"{what} (on_nonfinite: stop)")
    if consecutive >= MAX_CONSECUTIVE_SKIPS:
        raise NonFiniteError(f"{what}: {consecutive} consecutive rollout batches skipped; giving up")
    print(f"warning: {what}; skipped (on_nonfinite: skip)", flush=True)
