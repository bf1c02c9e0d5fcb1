"""The online GRPO loop for masked diffusion models, shared by every method.

Per rollout batch (every ``num_iterations`` optimiser steps; TRL's buffering, d1 and MaskGRPO):
  1. draw ``num_prompts`` training prompts and sample ``num_generations`` completions each (LLaDA semi-AR);
  2. score them with the task reward and compute group advantages;
  3. build the mu training views from the rollout seed (the method's re-masking) and their token weights;
  4. evaluate old (rollout-time policy) and reference log-probs on every view, once, without gradients;
  5. for j = 1..mu: current log-probs on view j, clipped token ratio + beta k3 KL, weighted aggregate, one step.

View j is consumed at inner step j (the paper intent; d1 and MaskGRPO index views by the micro-step counter,
which with gradient accumulation skips views: maskgrpo.md section 2). Every random draw comes from a generator
derived from (seed, purpose, iteration), never from the global RNG.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tqdm import tqdm

from ddmrl.config import GRPOConfig
from ddmrl.likelihood import token_logps
from ddmrl.masking import apply_view, build_views
from ddmrl.methods import METHODS
from ddmrl.objectives import aggregate, clipped_token_loss, group_advantages, token_weights
from ddmrl.rollout import rewards, rollout
from ddmrl.seeding import derive_seed, generator
from ddmrl.tasks.base import Example, Task


@dataclass
class Timing:
    """Seconds spent per phase (verl's phase names)."""

    gen: float = 0.0
    old_ref_logp: float = 0.0
    update: float = 0.0


def grpo_iteration_logps(policy, ref, inputs: list[torch.Tensor], completion_ids: torch.Tensor, beta: float):
    """Old and reference log-probs [mu, N, L] of every view (no gradient); ref is None when beta = 0."""
    with torch.no_grad():
        old = torch.stack([token_logps(policy, x, completion_ids) for x in inputs])
        refs = torch.stack([token_logps(ref, x, completion_ids) for x in inputs]) if beta else None
    return old, refs


def train_grpo(
    policy,
    ref,
    tok,
    task: Task,
    draw_prompts: Callable[[int], list[Example]],
    cfg: GRPOConfig,
    seed: int,
    on_iteration: Callable[[dict[str, float]], None] | None = None,
) -> tuple[list[dict[str, float]], Timing]:
    """Run ``cfg.max_steps`` optimiser steps of GRPO; ``draw_prompts(iteration)`` gives each rollout batch's prompts.

    Returns the curve (one row per rollout batch) and the time spent per phase.
    """
    method = METHODS[cfg.method]
    remasking = cfg.remasking or method.remasking
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.learning_rate, betas=(0.9, 0.99), weight_decay=cfg.weight_decay)
    mu, g = cfg.num_iterations, cfg.num_generations
    timing, curve, step = Timing(), [], 0
    ref.eval()
    for it in tqdm(range(math.ceil(cfg.max_steps / mu)), desc=f"grpo {cfg.method}", mininterval=5):
        # 1-2. rollouts, rewards, advantages
        t0 = time.time()
        policy.eval()
        examples = draw_prompts(it)
        batch = rollout(policy, tok, task, examples, g, cfg.sampler, generator(seed, "rollout", it))
        r = rewards(task, examples, batch.texts, g)  # [N]
        adv, zero_std = group_advantages(r, g, cfg.scale_rewards)
        # 3. views and weights, all from the rollout seed
        views = build_views(
            remasking, mu=mu, seed=derive_seed(seed, "views", it), completion_mask=batch.completion_mask,
            prompt_ids=batch.prompt_ids, pad_id=tok.pad_token_id, reveal_step=batch.reveal_step,
            coupling=cfg.coupling, gamma=cfg.gamma, p_mask_prompt=cfg.p_mask_prompt,
        )
        weights, z = token_weights(method.weighting, views, batch.completion_mask, cfg.rebrl_mode)  # [mu, N, L]
        inputs = [apply_view(batch.prompt_ids, batch.completion_ids, views, j, tok.mask_token_id) for j in range(mu)]
        t1 = time.time()
        # 4. old and reference log-probs on identical views
        old, refs = grpo_iteration_logps(policy, ref, inputs, batch.completion_ids, cfg.beta)
        t2 = time.time()
        # 5. mu optimiser steps, view j at inner step j
        policy.train()
        stats = {"loss": 0.0, "kl": 0.0, "clip_ratio": 0.0}
        inner = min(mu, cfg.max_steps - step)
        for j in range(inner):
            logps = token_logps(policy, inputs[j], batch.completion_ids)
            tl = clipped_token_loss(logps, old[j], None if refs is None else refs[j], adv, cfg.epsilon, cfg.beta)
            loss = aggregate(tl.loss, weights[j], cfg.loss_type, z)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
            opt.step()
            step += 1
            stats["loss"] += loss.item() / inner
            stats["kl"] += aggregate(tl.kl, weights[j], "token_mean").item() / inner
            stats["clip_ratio"] += aggregate(tl.clipped, weights[j], "token_mean").item() / inner
        t3 = time.time()
        timing.gen += t1 - t0
        timing.old_ref_logp += t2 - t1
        timing.update += t3 - t2
        row = {
            "step": step,
            "reward": r.mean().item(),
            "reward_std": r.view(-1, g).std(1).mean().item(),
            "frac_reward_zero_std": zero_std.float().mean().item(),
            **stats,
            "completions/mean_length": batch.completion_mask.sum(1).float().mean().item(),
            "time": timing.gen + timing.old_ref_logp + timing.update,
        }
        curve.append(row)
        if on_iteration:
            on_iteration(row)
    policy.eval()
    return curve, timing
