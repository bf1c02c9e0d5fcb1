"""The GRPO loop on TinyMAR: plain GRPO over the head's denoising transitions, or MAR-GRPO with its stabilisers.

One rollout batch: ``num_prompts`` prompts x G images sampled with drafts recorded (``ddmrl.mar.sampler``), rewarded
by the task (geneval-mini's partial credit on the decoded grid), group advantages (``ddmrl.objectives``). Then, once
per batch: the AR steps and diffusion steps the updates use (all, or a random subset as MAR-GRPO's release takes 12
of 64 AR steps and 10 of 25 diffusion steps), the tokens each AR step trains (:func:`token_weights`), MTE's extra
trajectories and its top-k % most uncertain tokens, and the old and reference terms. Then ``num_iterations``
optimiser steps, each averaging the AR steps' losses (one backward per AR step; the release sums them):

    loss_s = - [ sum_{i,k} w_si psi_sik / sum w_si - beta sum_{i,k} w'_si KL_sik / sum w'_si ],  loss = mean_s loss_s

psi the clipped surrogate of one transition (MTE's mean over M trajectories on the selected tokens), w the tokens the
step trains, w' those its KL covers (``kl_tokens``: every token unknown at the step, as MAR-GRPO's release, or w),
KL the exact KL between the policy's and the reference's Gaussian transitions at the rollout's state
(``kl_estimator: k3_means``: the release's k3 of the difference of the means). Everything a batch draws is seeded
by (seed, purpose, batch), so a run killed and resumed from a checkpoint ends with the same weights and curve as an
uninterrupted one.

The head is trained with the transformer (``train_head: true``, plain GRPO's end-to-end update) or frozen
(``false``, MAR-GRPO's first stabiliser: "fix the diffusion head during RL"), gradients then reaching the transformer
through the conditions. One process only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tqdm import tqdm

from ddmrl.mar.diffusion import Schedule, gaussian_kl, step_std
from ddmrl.mar.encoding import codes_to_grids
from ddmrl.mar.objective import (
    clipped_surrogate,
    consistency_mask,
    mte_surrogate,
    top_percent,
    transition_log_probs,
    uncertainty,
)
from ddmrl.mar.sampler import MARRollout, generate, sample_head
from ddmrl.objectives.advantages import group_advantages
from ddmrl.seeding import generator
from ddmrl.training import distributed as dist
from ddmrl.training.resume import Checkpointer
from ddmrl.training.tracking import RunLog


def token_weights(
    roll: MARRollout, train_tokens: str, consistency: bool, threshold: float = 0.0, start: int = 2
) -> torch.Tensor:
    """[S, B, N] bool: the tokens each AR step trains. ``masked``: every token unknown at the start of the step (the
    ones it reveals and the drafts of the others), ``committed``: the revealed ones only. With ``consistency``, from
    AR step ``start`` (0-based, >= 1: the rule compares with the previous step's draft) on, a draft is kept only when
    it moved towards the final image (:func:`consistency_mask`). MAR-GRPO's release starts at step 2 (``i > 1``)."""
    if start < 1:
        raise ValueError(f"consistency start {start}: the rule needs the previous step's draft (start >= 1)")
    if train_tokens == "committed":
        return roll.committed
    weights = roll.masks[:-1].clone()
    if consistency:
        drafts = roll.trajectories[:, 0]  # [S, B, N, C] every step's sample of every token it sampled
        for s in range(start, weights.shape[0]):
            weights[s] = consistency_mask(
                drafts[s], drafts[s - 1], roll.final, roll.masks[s + 1], roll.committed[s], threshold
            )
    return weights


@dataclass
class StepTerms:
    """One AR step's transitions under one model: log-probs [I, B, N] and means [I, B, N, C] of the rollout's
    trajectories at the trained tokens (0 elsewhere), and of MTE's trajectories [M, I, B, N] at the selected ones."""

    logp: torch.Tensor
    means: torch.Tensor
    logp_mte: torch.Tensor | None


def step_terms(
    model,
    schedule: Schedule,
    roll: MARRollout,
    s: int,
    steps: torch.Tensor,
    where: torch.Tensor,
    temperature: float,
    mte: torch.Tensor | None = None,
    mte_where: torch.Tensor | None = None,
) -> StepTerms:
    """The transitions of AR step ``s`` at diffusion steps ``steps`` [I] under ``model``, the tokens' conditions
    computed from the step's state (differentiable when grad is on). ``where`` [B, N]: the tokens needed; ``mte``
    [M, K + 1, B, N, C] and ``mte_where`` [B, N]: MTE's trajectories and the tokens that use them."""
    z = model.conditions(roll.prompt_ids, roll.tokens[s], roll.masks[s])  # [B, N, D]
    i, (b, n, c) = len(steps), roll.final.shape
    logp, means = z.new_zeros(i, b, n), z.new_zeros(i, b, n, c)
    logp[:, where], means[:, where] = transition_log_probs(
        model.head, schedule, z[where], roll.trajectories[s][:, where], steps, temperature
    )
    logp_mte = None
    if mte is not None:
        m = mte.shape[0]
        traj = mte[:, :, mte_where].transpose(0, 1).flatten(1, 2)  # [K + 1, M * n', C]
        lp, _ = transition_log_probs(model.head, schedule, z[mte_where].repeat(m, 1), traj, steps, temperature)
        logp_mte = z.new_zeros(m, i, b, n)
        logp_mte[:, :, mte_where] = lp.view(i, m, -1).transpose(0, 1)
    return StepTerms(logp, means, logp_mte)


def k3_means(means: torch.Tensor, ref_means: torch.Tensor) -> torch.Tensor:
    """MAR-GRPO's release's KL term: k3 of the difference of the means, exp(d) - d - 1 with d = ref_mean - mean per
    channel, summed over channels. [..., C] -> [...]. Not a KL of the transitions (it ignores their variance)."""
    d = ref_means - means
    return (torch.exp(d) - d - 1).sum(-1)


def step_loss(
    terms: StepTerms,
    old: StepTerms,
    ref_means: torch.Tensor | None,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    mte_selected: torch.Tensor | None,
    std: torch.Tensor,
    epsilon: float,
    beta: float,
    kl_weights: torch.Tensor | None = None,
    kl_estimator: str = "exact",
) -> tuple[torch.Tensor, dict[str, float]]:
    """loss_s = -(sum w psi / sum w - beta sum w' KL / sum w') over the step's diffusion steps, w [B, N] the trained
    tokens and w' ``kl_weights`` [B, N] (None: w; MAR-GRPO's release: every token unknown at the step). ``std`` [I]
    the steps' noise scales; ``kl_estimator``: exact (Gaussian KL) or k3_means (:func:`k3_means`, the release's).
    Returns the loss, its KL (mean over w') and clip ratio (mean over the trained transitions)."""
    psi, clipped = clipped_surrogate(terms.logp, old.logp, advantages, epsilon)  # [I, B, N]
    if terms.logp_mte is not None:
        psi_mte, clipped_mte = clipped_surrogate(terms.logp_mte, old.logp_mte, advantages, epsilon)  # [M, I, B, N]
        psi = mte_surrogate(psi, psi_mte, mte_selected)
        clipped = torch.where(mte_selected, clipped_mte.float().mean(0), clipped.float())
    if ref_means is None:
        kl = torch.zeros_like(psi)
    elif kl_estimator == "k3_means":
        kl = k3_means(terms.means, ref_means)
    else:
        kl = gaussian_kl(terms.means, ref_means, std[:, None, None])
    w = weights.float().expand_as(psi)
    total = w.sum().clamp_min(1)
    wk = w if kl_weights is None else kl_weights.float().expand_as(psi)
    kl_term = (wk * kl).sum() / wk.sum().clamp_min(1)
    loss = -((w * psi).sum() / total - beta * kl_term)
    clipped = clipped.float()
    return loss, {"kl": float(kl_term.detach()), "clip_ratio": float((w * clipped).sum() / total)}


@dataclass
class PreparedBatch:
    """What every update of one rollout batch reuses."""

    roll: MARRollout
    advantages: torch.Tensor  # [B]
    ar_steps: list[int]  # the AR steps the updates train
    steps: torch.Tensor  # [I] the diffusion steps (>= 1)
    weights: torch.Tensor  # [S, B, N] bool
    kl_weights: torch.Tensor | None  # [S, B, N] bool the tokens the KL covers (None: the trained ones)
    mte: torch.Tensor | None  # [M, K + 1, B, N, C]
    mte_selected: torch.Tensor | None  # [B, N] bool
    old: dict[int, StepTerms]
    ref_means: dict[int, torch.Tensor | None]


def _subset(n: int, k: int, gen: torch.Generator, offset: int = 0) -> list[int]:
    """``k`` of ``range(offset, offset + n)`` drawn without replacement, sorted (all of them when ``k`` is 0)."""
    if k == 0 or k >= n:
        return list(range(offset, offset + n))
    return sorted((torch.randperm(n, generator=gen)[:k] + offset).tolist())


@torch.no_grad()
def prepare(
    policy, ref, schedule: Schedule, roll: MARRollout, advantages: torch.Tensor, cfg, seed: int, batch: int
) -> PreparedBatch:
    """Selections, MTE's trajectories and uncertain tokens, old and reference terms of one rollout batch."""
    gen = generator(seed, "mar_select", batch)
    ar_steps = _subset(roll.masks.shape[0] - 1, cfg.ar_steps_per_update, gen)
    steps = torch.tensor(_subset(len(schedule) - 1, cfg.diffusion_steps_per_update, gen, offset=1))
    weights = token_weights(roll, cfg.train_tokens, cfg.consistency, cfg.consistency_threshold, cfg.consistency_start)
    kl_weights = roll.masks[:-1] if cfg.kl_tokens == "masked" and cfg.beta else None
    mte = selected = None
    if cfg.mte_trajectories:
        b, n, _ = roll.conditions.shape
        m = cfg.mte_trajectories
        z = roll.conditions.flatten(0, 1).repeat(m, 1)  # [M * B * N, D] the condition each token was revealed under
        traj = sample_head(policy.head, schedule, z, generator(seed, "mte", batch), cfg.sampler.temperature)
        mte = traj.view(len(schedule) + 1, m, b, n, -1).transpose(0, 1)  # [M, K + 1, B, N, C]
        selected = top_percent(uncertainty(mte[:, 0]), cfg.mte_top_percent)
    old, ref_means = {}, {}
    for s in ar_steps:
        where = weights[s] if kl_weights is None else weights[s] | kl_weights[s]  # the transitions needed
        mte_where = weights[s] & selected if mte is not None else None
        old[s] = step_terms(policy, schedule, roll, s, steps, where, cfg.sampler.temperature, mte, mte_where)
        ref_means[s] = None
        if cfg.beta:
            ref_means[s] = step_terms(ref, schedule, roll, s, steps, where, cfg.sampler.temperature).means
    return PreparedBatch(roll, advantages, ar_steps, steps, weights, kl_weights, mte, selected, old, ref_means)


def update(policy, opt, acc, batch: PreparedBatch, schedule: Schedule, cfg) -> dict[str, float]:
    """One optimiser step on a prepared batch: a backward per AR step, then clipping and the step."""
    opt.zero_grad(set_to_none=True)
    std = step_std(schedule, batch.steps, cfg.sampler.temperature)  # [I]
    stats = {"loss": 0.0, "kl": 0.0, "clip_ratio": 0.0}
    for s in batch.ar_steps:
        trained, kl_where = batch.weights[s], None if batch.kl_weights is None else batch.kl_weights[s]
        where = trained if kl_where is None else trained | kl_where
        mte_where = trained & batch.mte_selected if batch.mte is not None else None
        terms = step_terms(
            policy, schedule, batch.roll, s, batch.steps, where, cfg.sampler.temperature, batch.mte, mte_where
        )
        loss, parts = step_loss(terms, batch.old[s], batch.ref_means[s], batch.advantages, trained,
                                batch.mte_selected, std, cfg.epsilon, cfg.beta, kl_where,
                                cfg.kl_estimator)  # fmt: skip
        if not torch.isfinite(loss):
            raise FloatingPointError(f"MAR GRPO: non-finite loss at AR step {s}")
        acc.backward(loss / len(batch.ar_steps))
        for key, value in (("loss", loss.item()), *parts.items()):
            stats[key] += value / len(batch.ar_steps)
    stats["grad_norm"] = float(acc.clip_grad_norm_(dist.trainable(policy), cfg.max_grad_norm))
    opt.step()
    return stats


def train_mar_grpo(
    policy,
    ref,
    task,
    draw: Callable[[int], list],
    cfg,
    schedule: Schedule,
    seed: int,
    run_log: RunLog | None = None,
    checkpointer: Checkpointer | None = None,
    accelerator=None,
) -> list[dict[str, float]]:
    """GRPO on ``policy`` (``cfg``: a resolved ``ddmrl.config.MarRunConfig``) for ``cfg.max_steps`` optimiser steps,
    ``num_iterations`` per rollout batch of ``draw(batch)`` prompts; ``ref`` the frozen reference (None with beta 0).
    Returns the curve, one row per rollout batch."""
    policy.head.requires_grad_(cfg.train_head)
    acc = accelerator or dist.local_accelerator(policy)
    opt = torch.optim.AdamW(dist.trainable(policy), lr=cfg.learning_rate, weight_decay=0.0)
    policy, opt = acc.prepare(policy, opt)
    g, mu = cfg.num_generations, cfg.num_iterations
    curve, start, elapsed = [], 0, 0.0
    if checkpointer is not None and (found := checkpointer.latest(acc)):
        path, meta = found
        checkpointer.restore(acc, path)
        curve, start, elapsed = meta["curve"], meta["rollout_batch"], meta["elapsed"]
        acc.print(f"resuming MAR GRPO from {path} (rollout batch {start})", flush=True)
    run_log = run_log or RunLog()
    run_log.start(acc, curve)
    t0 = time.time() - elapsed
    batches = cfg.max_steps // mu
    height, width = task.height, task.width
    # train mode throughout (TinyMAR has no dropout): rollouts, old/reference terms and updates run the same code,
    # so ratios start at exactly 1
    policy.train()
    if ref is not None:
        ref.train()
    for it in tqdm(range(start, batches), desc="mar grpo", mininterval=5, initial=start, total=batches):
        t_start = time.time()
        examples = draw(it)
        prompt_ids = policy.encode_prompts([ex.gold["prompt"] for ex in examples for _ in range(g)])
        drafts = cfg.train_tokens == "masked"
        roll = generate(policy, prompt_ids, cfg.sampler.ar_steps, schedule, generator(seed, "rollout", it),
                        cfg.sampler.temperature, drafts=drafts)  # fmt: skip
        grids = codes_to_grids(roll.codes, height, width)
        per_image = [ex for ex in examples for _ in range(g)]
        texts = [task.to_text(grid) for grid in grids]
        rewards = torch.tensor([task.reward(text, ex) for text, ex in zip(texts, per_image, strict=True)])
        advantages, zero_std = group_advantages(rewards, g, cfg.scale_rewards)
        t_roll = time.time()
        batch = prepare(policy, ref, schedule, roll, advantages.to(prompt_ids.device), cfg, seed, it)
        t_prep = time.time()
        stats = [update(policy, opt, acc, batch, schedule, cfg) for _ in range(mu)]
        masked = roll.masks[:-1].sum().clamp_min(1)
        row = {
            "step": (it + 1) * mu,
            "rollout_batch": it + 1,
            "samples": (it + 1) * cfg.num_prompts * g,
            "reward": float(rewards.mean()),
            "reward_std": float(rewards.view(-1, g).std(1).mean()),
            "frac_reward_zero_std": float(zero_std.float().mean()),
            **{k: sum(s[k] for s in stats) / mu for k in stats[0]},
            "tokens_trained": float(batch.weights.sum() / masked),  # of the tokens unknown at their AR step
            "mte_tokens": float(batch.mte_selected.float().mean()) if batch.mte_selected is not None else 0.0,
            "rollout_seconds": t_roll - t_start,
            "prepare_seconds": t_prep - t_roll,
            "update_seconds": time.time() - t_prep,
            "time": time.time() - t0,
        }
        curve.append(row)
        run_log.log(row)
        if checkpointer is not None and cfg.save_steps and row["step"] % cfg.save_steps == 0 and it + 1 < batches:
            checkpointer.save(acc, row["step"], {"curve": curve, "rollout_batch": it + 1, "elapsed": row["time"]})
    policy.head.requires_grad_(True)
    policy.eval()
    return curve
