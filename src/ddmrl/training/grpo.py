"""The online GRPO loop for masked diffusion models, shared by every method.

Per rollout batch (TRL's buffering):
  1. draw ``num_prompts`` training prompts and sample ``num_generations`` completions each (LLaDA semi-AR);
  2. score them with the task reward and compute group advantages;
  3. build the method's training views from the rollout seed, and their token weights;
  4. evaluate old (rollout-time policy) and reference log-probs on every view, once, without gradients;
  5. for each step of the views' schedule (view j at step j for most methods): current log-probs on the step's
     views, the method's objective, one optimiser step (over ``gradient_accumulation_steps`` micro-batches).

Each phase is a function below (:func:`sample`, :func:`score`, :func:`views`, :func:`old_and_reference`,
:func:`update`, :func:`curve_row`); the method (``ddmrl.methods``) enters through its components (view sampler, token
weighting, objective, per-step advantages, augmenter: registry keys) and its hooks (``Method.rollout_options``,
``advantage_eps``, ``legacy_views``, ``broadcast_weighting``, ``view_index``); no method is named here.

Each view is consumed at its own step (the paper intent). d1 indexes views by the micro-step counter
(``_step % mu`` after the increment), which with gradient accumulation gives each micro-batch only every A-th view
(d1's ``compute_loss``); ``legacy_micro_step_views`` reproduces d1's indexing, and a method may index its views its
own way (``Method.view_index``). Every method takes ``num_iterations`` optimiser steps per rollout batch (equal
budgets), and the curve counts rollout batches and samples as well as optimiser steps. Every random draw comes from
a generator derived from (seed, purpose, iteration), never from the global RNG, so a run resumed from a checkpoint at
a rollout-batch boundary continues exactly as the uninterrupted run would have.

Numerical faults (``on_nonfinite``): a non-finite reward or advantage skips the whole rollout batch, a non-finite
loss skips its optimiser step; both are counted (``nonfinite_skipped``). With ``stop`` the run ends with a
diagnostic instead, as it does after 10 consecutive skipped rollout batches.

Several processes (``accelerate launch``; ``ddmrl.training.distributed``): each takes its share of every rollout
batch's prompts and samples with its own seeds; the non-finite decisions are taken by all processes together; the
curve holds rewards and losses gathered over processes. The old and reference log-probs are still computed once per
rollout batch, each process for its own rollouts.

An auxiliary policy (``aux_policy``; ``ddmrl.aux_policies``: Co-GRPO's schedule, a learned unmasking policy) is
consulted by the sampler at every rollout step, which records its actions and their log-probs; every optimiser step
then adds its clipped per-step loss to the method's (one backward pass, its own AdamW and learning rate). With
``aux_policy.freeze_model`` the model is the policy's environment only: no views, no old or reference passes, and
``num_iterations`` optimiser steps of the policy per rollout batch. A sample's reward may be scaled by its speed
(``aux_policy.speed_alpha``: the unmasking paper's multiplicative reward).

A method with a value model (``Method.value_model``: TraceRL's) has its values computed on every view after the old
log-probs, per-token advantages from them in place of the group's (the group advantages are then its rewards), and
the value model's clipped loss added at every optimiser step on the step's views (its own AdamW; in the checkpoints).

A method's rollout augmenter (``ddmrl.augmenters``) edits the scored batch between step 2's rewards and advantages,
and its counts join the curve. A weighting that needs the old policy's entropy (``Weighting.old_entropy``) gets it
from the old pass of step 4. A method with per-step advantages (``Method.step_advantage``) has every step's prediction
rewarded, and the curve gains the share of rollouts an earlier step's prediction scored higher (``over_denoising``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import NamedTuple

import torch
from tqdm import tqdm

from ddmrl.augmenters import AUGMENTERS
from ddmrl.augmenters.base import AugmentInputs
from ddmrl.aux_policies.base import AuxPolicy, aux_clip_loss, speed_reward
from ddmrl.config import ConfigError, GRPOConfig
from ddmrl.likelihood import token_logps, token_logps_entropy
from ddmrl.masking import view_sampler
from ddmrl.masking.views import Views, apply_view, build_views
from ddmrl.methods import METHODS
from ddmrl.methods.base import Method
from ddmrl.objectives import OBJECTIVES, STEP_ADVANTAGES, VIEW_ADVANTAGES, weighting
from ddmrl.objectives.advantages import group_advantages
from ddmrl.objectives.base import ObjectiveInputs
from ddmrl.objectives.weights import hint_entropy_filter, realised_ratio, token_weights
from ddmrl.rollout import Rollouts, rewards, rollout, step_rewards
from ddmrl.seeding import derive_seed
from ddmrl.tasks.base import Example, Task
from ddmrl.training import distributed as dist
from ddmrl.training import preempt
from ddmrl.training.resume import Checkpointer
from ddmrl.training.tracking import RunLog

MAX_CONSECUTIVE_SKIPS = 10


class NonFiniteError(RuntimeError):
    """A non-finite reward, advantage or loss with ``on_nonfinite: stop``."""


@dataclass
class Timing:
    """Seconds spent per phase (verl's phase names), each timed by :meth:`phase`."""

    gen: float = 0.0
    old_ref_logp: float = 0.0
    update: float = 0.0

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the time the block takes to phase ``name``."""
        start = time.time()
        try:
            yield
        finally:
            setattr(self, name, getattr(self, name) + time.time() - start)

    @property
    def total(self) -> float:
        return self.gen + self.old_ref_logp + self.update


class Batch(NamedTuple):
    """A scored rollout batch with its views: everything the inner steps need."""

    rollouts: Rollouts
    rewards: torch.Tensor  # [N]
    advantages: torch.Tensor  # [N]
    zero_std: torch.Tensor  # [B] groups with equal rewards
    views: Views | None  # None: the model is frozen (only an auxiliary policy trains)
    weights: torch.Tensor | None  # [V, N, L]
    z: torch.Tensor | None  # [N]
    inputs: torch.Tensor | None  # [V, N, P + L] the model input of every view (None: the model is frozen)
    target_ids: torch.Tensor | None = None  # [V, N, L] the tokens each view is trained towards (None: the completion)
    # a method's per-view data by name, each [V, N, ...], sliced by the loop to a step's views and rows without knowing
    # the names: ``view_advantages`` [V, N] (per-step or per-edge advantages), a value model's ``old_values``,
    # ``returns`` and ``token_advantages`` [V, N, L] (TraceRL's), an outside method's own
    extras: Mapping[str, torch.Tensor] = MappingProxyType({})


def make_views(
    cfg: GRPOConfig, batch: Rollouts, seed: int, pad_id: int, mask_id: int, step_advantages: torch.Tensor | None = None
):
    """The method's views of a rollout batch, their weights and model inputs (steps 3 of the loop);
    ``step_advantages`` [N, S]: per-step advantages (views may select steps by them)."""
    method = METHODS[cfg.method]
    views = build_views(
        cfg.remasking or method.remasking,
        mu=cfg.num_iterations,
        seed=seed,
        completion_mask=batch.completion_mask,
        prompt_ids=batch.prompt_ids,
        pad_id=pad_id,
        block_length=cfg.sampler.block_length,
        reveal_step=batch.reveal_step,
        completion_ids=batch.completion_ids,
        mask_id=mask_id,
        trajectory=batch.trajectory,
        step_advantages=step_advantages,
        legacy=method.legacy_views(cfg),
        branch_steps=() if batch.tree is None else batch.tree.steps,
        config=cfg,  # the view sampler reads its own keys from the run (coupling, gamma, shrink, ...)
    )
    broadcast = method.broadcast_weighting(cfg)
    mode = getattr(cfg, "rebrl_mode", "token")  # the weighting's mode: RebRL's Params declares it
    weights, z = token_weights(method.weighting, views, batch.completion_mask, mode, broadcast)
    inputs = torch.stack(
        [apply_view(batch.prompt_ids, batch.completion_ids, views, v, mask_id) for v in range(views.masks.shape[0])]
    )
    return views, weights, z, inputs


def loss_positions(cfg: GRPOConfig, batch: Rollouts) -> Rollouts:
    """The rollouts as the loss sees them: their completion mask (up to and including the first EOS), or with
    ``loss_after_eos`` every completion position, the EOS padding included (some releases train every masked or
    unmasked completion position; their masks are not cut at the first EOS: docs/reproduction.md)."""
    if not getattr(cfg, "loss_after_eos", False):  # a switch of the methods whose Params declare it
        return batch
    return batch._replace(completion_mask=torch.ones_like(batch.completion_mask))


def view_targets(views: Views, completion_ids: torch.Tensor) -> torch.Tensor:
    """[V, N, L] the tokens each view is trained towards: its own (views built from the sampler's states) or the
    rollout's completion (a view of it, without copying)."""
    if views.states is not None:
        return views.states.target_ids
    return completion_ids[None].expand(views.masks.shape[0], *completion_ids.shape)


def view_advantages(views: Views, step_advantages: torch.Tensor | None) -> torch.Tensor | None:
    """[V, N] the per-step advantage of each view's sampler step, or None without per-step advantages."""
    if step_advantages is None:
        return None
    if views.states is None:
        raise ValueError("per-step advantages need views built from the sampler's states")
    return step_advantages.gather(1, views.states.step.T).T


#: at most this many logits (rows x positions x vocabulary) per forward pass of :func:`view_logps` (1 GiB in float32)
LOGITS_PER_PASS = 2**28


def view_logps(model, inputs: torch.Tensor, completion_ids: torch.Tensor, entropy: bool = False, **guidance):
    """Token log-probs of every view: [V, N, P + L] inputs -> [V, N, L] (``guidance``: see :func:`logp_guidance`),
    of ``completion_ids`` [N, L] or of each view's own target tokens [V, N, L]. ``entropy``: also the model's
    per-position entropy [V, N, L] from the same passes (a pair is returned).

    The views go through the model together, as many per forward pass as keep its logits under
    :data:`LOGITS_PER_PASS` (at least one view), instead of one pass per view: the same values in fewer, larger
    matrix products, up to rounding (a GEMM kernel blocks a product's rows by its size, so a row's last bits depend
    on the batch it is in). Always the model's own full forward pass, never a sampler's cache.
    """
    v, n, t = inputs.shape
    config = getattr(model, "config", None) or getattr(getattr(model, "module", None), "config", None)  # DDP
    vocab = getattr(config, "vocab_size", None)
    branches = 2 if guidance.get("cfg_scale") else 1
    per_pass = max(1, LOGITS_PER_PASS // (branches * n * t * vocab)) if vocab else 1
    out, entropies = [], []
    for lo in range(0, v, per_pass):
        chunk = inputs[lo : lo + per_pass]  # [v', N, P + L]
        if completion_ids.dim() == 3:
            ids = completion_ids[lo : lo + per_pass].reshape(-1, completion_ids.shape[-1])  # [v' N, L]
        else:
            ids = completion_ids.repeat(chunk.shape[0], 1)  # [v' N, L]
        if entropy:
            logp, h = token_logps_entropy(model, chunk.reshape(-1, t), ids, **guidance)
            entropies.append(h.view(chunk.shape[0], n, -1))
        else:
            logp = token_logps(model, chunk.reshape(-1, t), ids, **guidance)
        out.append(logp.view(chunk.shape[0], n, -1))
    return (torch.cat(out), torch.cat(entropies)) if entropy else torch.cat(out)


def logp_guidance(cfg: GRPOConfig, mask_id: int) -> dict:
    """``token_logps``' guidance keywords: the rollout sampler's CFG scale with ``logp_cfg: guided``, else none; a
    policy sampled by the block sampler is a block-diffusion model, its views read block by block
    (``block_length``)."""
    guidance = {"cfg_scale": cfg.sampler.cfg_scale if cfg.logp_cfg == "guided" else 0.0, "mask_id": mask_id}
    return guidance | ({"block_length": cfg.sampler.block_length} if cfg.sampler.name == "block" else {})


def step_views(views: Views, step: int, micro: int, cfg: GRPOConfig) -> tuple[int, ...]:
    """View indices of inner step ``step`` for micro-batch ``micro``.

    Paper intent: the schedule's entry for the step, whatever the micro-batch. ``legacy_micro_step_views``: d1's
    ``(_step % mu)`` after the increment, with one count per micro-batch; a method may index its views its own way
    (``Method.view_index`` of micro-step m).
    """
    mu, m = views.masks.shape[0], step * cfg.gradient_accumulation_steps + micro
    if cfg.legacy_micro_step_views:
        return ((m + 1) % mu,)
    own = METHODS[cfg.method].view_index(cfg, m, mu) if cfg.method else None  # a bare GRPOConfig names none
    return views.steps[step] if own is None else own


def view_groups(run: Loop, ids: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The step's views as the update takes them: one view at a time when the method's objective is a mean of one
    term per view (``Method.separable_views``: BGPO), so that each view's graph is freed after its backward pass;
    else all together. DeepSpeed counts one backward pass per micro-batch: there always all together."""
    if run.method.separable_views(run.cfg) and len(ids) > 1 and not dist.is_deepspeed(run.acc):
        return [(v,) for v in ids]
    return [ids]


def views_objective(run: Loop, b: Batch, old, kl_ref, ids: tuple[int, ...], rows: slice, progress: float):
    """The method's objective on views ``ids`` of the micro-batch ``rows``, their current log-probs with gradient
    (``progress``: the share of the run's optimiser steps done)."""
    logps = torch.stack(
        [token_logps(run.policy, b.inputs[v, rows], b.target_ids[v, rows], **run.guidance) for v in ids]
    )
    x = objective_inputs(b, old, kl_ref, logps, ids, rows, run.cfg.num_generations, progress)
    return OBJECTIVES[run.method.objective](x, run.cfg)


def with_parts(parts: dict[str, float], out, part: tuple[int, ...], ids: tuple[int, ...]) -> dict[str, float]:
    """The step's diagnostics so far plus the objective's terms on its views ``part`` (whichever it has),
    weighted by their share of its ``ids``."""
    share = len(part) / len(ids)
    return parts | {k: parts.get(k, 0.0) + v * share for k, v in out.terms.items()}


def objective_inputs(
    b: Batch, old, ref, logps, ids: tuple[int, ...], rows: slice, g: int, progress: float = 0.0
) -> ObjectiveInputs:
    """Slice a batch to the step's views and one micro-batch of rows (``progress``: the share of the run's optimiser
    steps done)."""
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
        target_ids=None if b.target_ids is None else b.target_ids[v][:, rows],
        progress=progress,
        extras={name: x[v][:, rows] for name, x in b.extras.items()},
    )


@dataclass
class Loop:
    """What the phases of a run share, set up once by :func:`train_grpo` (models prepared by the accelerator)."""

    acc: object
    cfg: GRPOConfig
    method: Method
    policy: object
    ref: object
    tok: object
    task: Task
    rseed: int  # this process's own draws (process 0: the run's seed)
    aux: object = None  # the auxiliary policy being trained (DDP-wrapped), or None
    acting: AuxPolicy | None = None  # what the sampler consults (no wrapper)
    augmenter: object = None
    value: object = None  # the method's value model being trained (``Method.value_model``), or None

    @property
    def frozen(self) -> bool:
        """The model is only an auxiliary policy's environment: no views, no old or reference passes."""
        return self.cfg.aux_policy.freeze_model

    @property
    def guidance(self) -> dict:
        return logp_guidance(self.cfg, self.tok.mask_token_id)


class Scored(NamedTuple):
    """A rollout batch after :func:`score`."""

    batch: Rollouts
    rewards: torch.Tensor  # [N]
    advantages: torch.Tensor  # [N]
    zero_std: torch.Tensor  # [B]
    step_rewards: torch.Tensor | None  # [N, S] the reward of every step's prediction (per-step advantages)
    step_advantages: torch.Tensor | None  # [N, S]
    augmented: dict[str, float]  # the augmenter's counts


def sample(run: Loop, examples: list[Example], it: int) -> Rollouts:
    """1. ``num_generations`` completions of each of this process's prompts, with its own sampling seed (on the CPU
    afterwards); the sampler records its states when the method's views are built from them."""
    acc, cfg = run.acc, run.cfg
    run.policy.eval()
    if run.acting is not None:
        run.acting.train()  # the exploration distribution its log-probs refer to
    gen = dist.device_generator(acc.device, run.rseed, "rollout", it)
    record = view_sampler(cfg.remasking or run.method.remasking).states
    batch = rollout(run.policy, run.tok, run.task, examples, cfg.num_generations, cfg.sampler, gen,
                    record_trajectory=record, aux_policy=run.acting, **run.method.rollout_options(cfg))  # fmt: skip
    return dist.to_device(batch, torch.device("cpu"))


def score(run: Loop, examples: list[Example], batch: Rollouts, it: int) -> Scored:
    """2. Task rewards; the method's augmenter edits the scored groups; a reward scaled by speed; group advantages,
    and per-step ones when the method has them (a fault in any step's makes the rollout's advantage non-finite)."""
    acc, cfg, g = run.acc, run.cfg, run.cfg.num_generations
    r = rewards(run.task, examples, batch, g)  # [N]
    augmented = {}
    if run.augmenter is not None:
        gen_aug, seed_aug = (
            dist.device_generator(acc.device, run.rseed, "augment", it),
            derive_seed(run.rseed, "aug", it),
        )
        batch, r, augmented = run.augmenter.augment(
            AugmentInputs(run.policy, run.tok, run.task, examples, batch, r, g, cfg, gen_aug, seed_aug)
        )
    if cfg.aux_policy.speed_alpha:
        steps_taken = batch.aux.active.sum(1)  # [N] the model evaluations (steps) of every sample
        r = speed_reward(r, steps_taken, run.task.completion_length, cfg.aux_policy.speed_alpha)
    adv, zero_std = group_advantages(r, g, cfg.scale_rewards, run.method.advantage_eps(cfg))
    step_r = step_adv = None
    if run.method.step_advantage:
        step_r = step_rewards(run.tok, run.task, examples, batch, g)  # [N, S]
        step_adv = STEP_ADVANTAGES[run.method.step_advantage](step_r, g)
        adv = torch.where(torch.isfinite(step_adv).all(1), adv, torch.nan)
    return Scored(batch, r, adv, zero_std, step_r, step_adv, augmented)


def views(run: Loop, s: Scored, it: int) -> Batch:
    """3. The method's views of the batch, their weights and model inputs, all from the rollout seed (on the CPU),
    then everything on the run's device."""
    views = weights = z = inputs = targets = per_view = None
    scored = loss_positions(run.cfg, s.batch)  # the completion mask the loss uses (the curve keeps the true lengths)
    if not run.frozen:
        views, weights, z, inputs = make_views(
            run.cfg, scored, derive_seed(run.rseed, "views", it), run.tok.pad_token_id, run.tok.mask_token_id,
            s.step_advantages,
        )  # fmt: skip
        targets, per_view = view_targets(views, s.batch.completion_ids), view_advantages(views, s.step_advantages)
        if run.method.view_advantage:  # per-view advantages from the rewards (d-TreeRPO's tree edges)
            per_view = VIEW_ADVANTAGES[run.method.view_advantage](s.rewards, s.batch)  # [V, N]
    extras = {} if per_view is None else {"view_advantages": per_view}
    b = Batch(scored, s.rewards, s.advantages, s.zero_std, views, weights, z, inputs, targets, extras)
    return dist.to_device(b, run.acc.device)


def old_and_reference(run: Loop, b: Batch) -> tuple[Batch, torch.Tensor | None, torch.Tensor | None]:
    """4. Old and KL-target log-probs [V, N, L] on identical views, once per rollout batch, without gradients (eval
    mode, or TRL's train mode: dropout active as in the update's forward pass); a weighting that needs the old
    policy's entropy filters the batch's weights here."""
    acc, cfg, policy, guidance = run.acc, run.cfg, run.policy, run.guidance
    inputs, target_ids = b.inputs, b.target_ids  # [V, N, P + L], [V, N, L]
    policy.train(cfg.old_logp_mode == "train")
    old = kl_ref = None
    with torch.no_grad():
        if not run.frozen and b.rollouts.hints is not None and weighting(run.method.weighting).old_entropy:
            old, entropy = view_logps(policy, inputs, target_ids, entropy=True, **guidance)  # [V, N, L] each
            valid = b.views.target_masks & b.rollouts.completion_mask[None]
            kept = hint_entropy_filter(b.weights, valid, entropy, b.rollouts.hints, cfg.hint_entropy_top)
            b = b._replace(weights=kept)
        elif not run.frozen:
            old = view_logps(policy, inputs, target_ids, **guidance)  # [V, N, L]
        if cfg.beta and not run.frozen:
            if cfg.kl_target == "old":
                kl_ref = old
            elif run.ref is None:  # LoRA: the reference is the base model, the adapters switched off
                with dist.adapters_disabled(acc, policy):
                    kl_ref = view_logps(policy, inputs, target_ids, **guidance)
            else:
                with acc.autocast():
                    kl_ref = view_logps(run.ref, inputs, target_ids, **guidance)
    if run.value is not None:
        b = value_credit(run, b)
    return b, old, kl_ref


def view_targets_mask(b: Batch) -> torch.Tensor:
    """[V, N, L] bool: the tokens each view trains (its targets within the loss positions)."""
    return b.views.target_masks & b.rollouts.completion_mask[None]


def value_credit(run: Loop, b: Batch) -> Batch:
    """4b. A value model's old values on every view (eval mode, no gradient: the release's pre-update pass) and
    the per-token returns and advantages they give (``ddmrl.objectives.value.trace_gae``), the group advantages
    as the rollouts' rewards, placed on each rollout's last trace step."""
    from ddmrl.objectives.value import token_rewards, trace_gae  # the method's objective module (a stage's use)

    cfg, length = run.cfg, b.rollouts.completion_mask.shape[1]
    targets = view_targets_mask(b)
    run.value.eval()
    with torch.no_grad(), run.acc.autocast():
        old = torch.stack([run.value(x)[:, -length:] for x in b.inputs])  # [V, N, L]
    old = old.float().masked_fill(~targets, 0.0)
    credit = trace_gae(token_rewards(b.advantages, targets), old, targets, cfg.value_gamma, cfg.value_lambda)
    extras = {"old_values": old, "returns": credit.returns, "token_advantages": credit.advantages}
    return b._replace(extras={**b.extras, **extras})


def value_objective(run: Loop, b: Batch, ids: tuple[int, ...], rows: slice):
    """The value model's clipped loss on views ``ids`` of micro-batch ``rows`` (their mean; with gradient)."""
    from ddmrl.objectives.value import clipped_value_loss

    cfg, length, targets = run.cfg, b.rollouts.completion_mask.shape[1], view_targets_mask(b)
    old, returns = b.extras["old_values"], b.extras["returns"]  # [V, N, L] each
    out = [
        clipped_value_loss(run.value(b.inputs[v, rows])[:, -length:], old[v, rows], returns[v, rows], targets[v, rows],
                           cfg.value_clip, cfg.value_loss_norm)
        for v in ids
    ]  # fmt: skip
    loss = torch.stack([o.loss for o in out]).mean()
    return loss, {"value_loss": loss.item(), "value_clip_ratio": sum(o.clip_ratio for o in out) / len(out)}


class Update(NamedTuple):
    """What :func:`update` did: the mean of its losses and statistics, the optimiser steps taken and skipped."""

    stats: dict[str, float]
    steps: int
    skipped: int


def update(run: Loop, b: Batch, old, kl_ref, steps: int, optimisers: list, bar, start: int = 0) -> Update:
    """5. ``steps`` optimiser steps, one per entry of the views' schedule, each over ``gradient_accumulation_steps``
    micro-batches of whole prompt groups: the method's objective on the step's views plus the auxiliary policy's
    clipped loss or the value model's on the same views (one backward pass); a non-finite loss skips its step.
    ``start``: the run's optimiser steps so far."""
    acc, cfg, policy, aux, value = run.acc, run.cfg, run.policy, run.aux, run.value
    ga = cfg.gradient_accumulation_steps
    rows_per_micro = b.rewards.shape[0] // ga
    micro_rows = [slice(a * rows_per_micro, (a + 1) * rows_per_micro) for a in range(ga)]
    for model in (None if run.frozen else policy, value):
        if model is not None:
            model.train()
    stats, skipped = {"loss": 0.0}, 0  # then the objective's own terms, in its order, and the auxiliary policy's
    trained = [m for m in (None if run.frozen else policy, aux, value) if m is not None]
    for s in range(steps):
        acc.sync_gradients = True
        for o in optimisers:
            o.zero_grad(set_to_none=True)
        finite = True
        for a, rows in enumerate(micro_rows):
            acc.sync_gradients = a == ga - 1  # DeepSpeed steps its engine at the accumulation boundary
            with dist.no_sync_unless(acc, trained, a == ga - 1):
                loss, parts, done = torch.zeros((), device=acc.device), {}, 0.0
                if not run.frozen:
                    ids = step_views(b.views, s, a, cfg)
                    progress = (start + s) / cfg.max_steps
                    *early, last = view_groups(run, ids)
                    for part in early:  # a separable objective: these views' gradients first, each graph freed
                        out = views_objective(run, b, old, kl_ref, part, rows, progress)
                        finite = dist.all_processes(acc, bool(torch.isfinite(out.loss)))
                        if not finite:
                            break
                        with dist.no_sync_unless(acc, trained, False):
                            acc.backward(out.loss * len(part) / len(ids))
                        done, parts = done + out.loss.item() * len(part) / len(ids), with_parts(parts, out, part, ids)
                    if not finite:
                        break
                    out = views_objective(run, b, old, kl_ref, last, rows, progress)
                    loss, parts = loss + out.loss * (len(last) / len(ids)), with_parts(parts, out, last, ids)
                    if value is not None:  # its own parameters: one backward pass trains both
                        value_loss, value_parts = value_objective(run, b, ids, rows)
                        loss, parts = loss + value_loss, parts | value_parts
                if aux is not None:
                    trace = b.rollouts.aux.rows(rows)
                    logp = aux(trace.obs, trace.actions)  # [n, S] with gradient
                    aux_out = aux_clip_loss(logp, trace.logp, trace.active, b.advantages[rows], cfg.epsilon)
                    loss = loss + aux_out.loss
                    parts |= {"aux_loss": aux_out.loss.item(), "aux_clip_ratio": aux_out.clip_ratio}
                finite = dist.all_processes(acc, bool(torch.isfinite(loss)))
                if not finite:
                    break
                acc.backward(loss)  # divides by gradient_accumulation_steps
            for key, x in {"loss": loss.item() + done, **parts}.items():
                stats[key] = stats.get(key, 0.0) + x / (ga * steps)
        acc.sync_gradients = True
        if finite:
            for model, o in zip(trained, optimisers, strict=True):
                acc.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                o.step()
        else:
            if dist.is_deepspeed(acc):
                raise NonFiniteError(f"step {bar.n + 1}: non-finite loss (cannot be skipped under DeepSpeed)")
            skipped += 1
            _nonfinite(cfg, f"step {bar.n + 1}: non-finite loss", 1)
        bar.update(1)
    return Update(stats, steps, skipped)


def curve_row(run: Loop, s: Scored, u: Update, step: int, it: int, skipped: int, timing: Timing) -> dict[str, float]:
    """6. The curve's row of rollout batch ``it`` (rewards and losses gathered over processes)."""
    acc, cfg, g = run.acc, run.cfg, run.cfg.num_generations
    r_all, zero_all = dist.gather(acc, s.rewards), dist.gather(acc, s.zero_std.float())  # [N * world], [B * world]
    lengths = dist.gather(acc, s.batch.completion_mask.sum(1).float())
    return {
        "step": step,
        "rollout_batch": it + 1,
        "samples": (it + 1) * cfg.num_prompts * g,  # completions sampled so far (skipped batches included)
        "reward": r_all.mean().item(),
        "reward_std": r_all.view(-1, g).std(1).mean().item(),
        "frac_reward_zero_std": zero_all.mean().item(),
        **dist.mean_over_processes(acc, u.stats),
        "completions/mean_length": lengths.mean().item(),
        **({} if s.step_rewards is None else over_denoising(acc, s.step_rewards)),
        **({} if run.acting is None else dist.mean_over_processes(acc, run.acting.summary(s.batch.aux))),
        **{k: dist.gather(acc, torch.tensor([v])).sum().item() for k, v in s.augmented.items()},
        "nonfinite_skipped": skipped,
        "time": timing.total,
    }


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
    aux_policy: AuxPolicy | None = None,
    value_model=None,
) -> tuple[list[dict[str, float]], Timing]:
    """Run ``cfg.max_steps`` optimiser steps of GRPO; ``draw_prompts(iteration)`` gives each rollout batch's prompts.

    Returns the curve (one row per rollout batch) and the time spent per phase; each row also goes to ``run_log``
    (the curve file and the trackers) as soon as its rollout batch is done. With a ``checkpointer`` the state is
    saved at the first rollout-batch boundary after every ``cfg.save_steps`` steps, and the run resumes from the
    newest intact checkpoint (under every engine: accelerate's ``save_state``).

    ``ref`` is the frozen reference model, or None when ``policy`` is a peft model whose reference is the policy with
    its adapters disabled. ``accelerator``: the run's ``accelerate.Accelerator`` (None: one process on the device the
    policy is on). ``policy`` is prepared in place (wrapped for DDP/DeepSpeed); save it with
    ``ddmrl.training.distributed.save_policy``. ``aux_policy``: the auxiliary policy ``cfg.aux_policy`` names (a
    fresh ``ddmrl.aux_policies.base.new_aux_policy``), trained in place; ``ref`` may be None when no KL term needs it.
    ``value_model``: the method's learned baseline (``Method.value_model``: TraceRL's value model), trained in place
    with its own AdamW (``cfg.value_learning_rate``); built here from the policy when the method has one and none is
    given.
    """
    acc = accelerator or dist.local_accelerator(policy, cfg.mixed_precision, cfg.gradient_accumulation_steps)
    rank, world = acc.process_index, acc.num_processes
    method = METHODS[cfg.method]
    dist.check_supported(acc, cfg.lora)
    augmenter = AUGMENTERS[method.augmenter] if method.augmenter else None
    if augmenter is not None:
        augmenter.check(task)
    frozen = cfg.aux_policy.freeze_model
    _check_aux(acc, cfg, aux_policy)
    value = value_model if value_model is not None else method.value_model(cfg, policy)
    _check_value(acc, cfg, method, value)
    if ref is None and cfg.beta and cfg.kl_target == "ref" and not frozen and not dist.is_peft(policy):
        raise ValueError("train_grpo: ref is None but the policy has no adapters to disable (lora.r = 0)")
    opt = None
    if not frozen:
        opt = torch.optim.AdamW(
            dist.trainable(policy), lr=cfg.learning_rate, betas=(0.9, 0.99), weight_decay=cfg.weight_decay
        )
    ga = cfg.gradient_accumulation_steps
    if cfg.num_prompts % (world * ga):
        raise ConfigError(
            f"grpo.num_prompts = {cfg.num_prompts}: must be a multiple of processes x gradient_accumulation_steps = "
            f"{world} x {ga} (every micro-batch holds whole prompt groups)"
        )
    dist.set_accumulation(acc, ga)
    dist.configure_deepspeed(acc, cfg.num_prompts // world * cfg.num_generations // ga, ga, cfg.max_grad_norm)
    if not frozen:
        dist.configure_fsdp(acc, policy)  # FSDP shards the policy's own blocks (its _no_split_modules)
    aux, aux_opt = aux_policy, None
    if aux is not None:
        aux_lr = cfg.aux_policy.learning_rate
        aux_opt = torch.optim.AdamW(aux.parameters(), lr=aux_lr, betas=(0.9, 0.99), weight_decay=cfg.weight_decay)
    if frozen:  # the model is the auxiliary policy's environment: placed, never prepared nor saved in checkpoints
        policy = dist.place_reference(acc, policy)
        aux, aux_opt = acc.prepare(aux, aux_opt)
    elif aux is not None:
        policy, opt, aux, aux_opt = acc.prepare(policy, opt, aux, aux_opt)
    else:
        policy, opt = acc.prepare(policy, opt)
    value_opt = None
    if value is not None:  # prepared after the others: the checkpoints' order of models and optimisers is fixed
        value_opt = torch.optim.AdamW(value.parameters(), lr=cfg.value_learning_rate, betas=(0.9, 0.99),
                                      weight_decay=cfg.weight_decay)  # fmt: skip
        value, value_opt = acc.prepare(value, value_opt)
    ref = dist.place_reference(acc, ref)
    acting = None if aux is None else acc.unwrap_model(aux)  # what the sampler consults (no DDP wrapper)
    run = Loop(acc, cfg, method, policy, ref, tok, task, dist.rank_seed(seed, rank), aux, acting, augmenter, value)
    optimisers = [o for o in (opt, aux_opt, value_opt) if o is not None]
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
        saved_at, before = step, timing.total
        with timing.phase("gen"):
            examples = dist.shard(draw_prompts(it), rank, world, "grpo.num_prompts")  # this process's share
            s = score(run, examples, sample(run, examples, it), it)
            finite = dist.all_processes(
                acc, bool(torch.isfinite(s.rewards).all() and torch.isfinite(s.advantages).all())
            )
            if finite:
                b = views(run, s, it)
                schedule = ((),) * cfg.num_iterations if frozen else b.views.steps  # the views of every step
                _same_schedule(acc, len(schedule))
        if not finite:
            skipped, consecutive, it = skipped + 1, consecutive + 1, it + 1
            _nonfinite(cfg, f"rollout batch {it - 1}: non-finite reward or advantage", consecutive)
            continue
        consecutive = 0
        with timing.phase("old_ref_logp"):
            b, old, kl_ref = old_and_reference(run, b)
        with timing.phase("update"):
            u = update(run, b, old, kl_ref, min(len(schedule), cfg.max_steps - step), optimisers, bar, step)
        step, skipped = step + u.steps, skipped + u.skipped
        row = curve_row(run, s, u, step, it, skipped, timing)
        curve.append(row)
        run_log.log(row)
        bar.set_postfix(
            {
                "reward": f"{row['reward']:.3f}",
                **({"kl": f"{row['kl']:.4f}"} if "kl" in row else {}),
                "s/step": f"{(timing.total - before) / u.steps:.2f}",
            }
        )
        it += 1
        due = cfg.save_steps and step // cfg.save_steps > saved_at // cfg.save_steps
        # SIGUSR1 (a scheduler's warning before its time limit): checkpoint now, then stop (ddmrl.training.preempt)
        stop = step < cfg.max_steps and checkpointer is not None and checkpointer.root and preempt.requested(acc)
        if checkpointer is not None and step < cfg.max_steps and (due or stop):
            meta = {"curve": curve, "iteration": it, "skipped": skipped, "timing": asdict(timing)}
            checkpointer.save(acc, step, meta)
        if stop:
            preempt.stop("grpo", step)
    bar.close()
    policy.eval()
    return curve, timing


def over_denoising(acc, step_r: torch.Tensor) -> dict[str, float]:
    """The share of rollouts [N, S] an earlier step's prediction scored higher than the completion ("over-denoising",
    or answer backslide; He et al. 2025, arXiv 2508.13148): a diagnostic of a rollout batch with per-step rewards."""
    worse = dist.gather(acc, (step_r.max(1).values > step_r[:, -1]).float())
    return {"over_denoising": worse.mean().item()}


def _check_aux(acc, cfg: GRPOConfig, aux_policy: AuxPolicy | None) -> None:
    """The auxiliary policy matches the config, and the engine can train two modules (one process or DDP)."""
    kind = cfg.aux_policy.kind
    if (kind == "none") != (aux_policy is None) or (aux_policy is not None and aux_policy.kind != kind):
        got = None if aux_policy is None else aux_policy.kind
        raise ValueError(f"train_grpo: aux_policy.kind = {kind!r} but the auxiliary policy given is {got!r}")
    if aux_policy is not None and (dist.is_deepspeed(acc) or dist.is_sharded(acc)):
        raise ConfigError("aux_policy: an auxiliary policy trains under one process or DDP, not DeepSpeed or FSDP")


def _check_value(acc, cfg: GRPOConfig, method: Method, value) -> None:
    """A value model belongs to a method that has one, trains beside the model (not a frozen one), under one process
    or DDP."""
    if value is None:
        return
    if type(method).value_model is Method.value_model:
        raise ValueError(f"train_grpo: a value model was given but method {cfg.method} has none (its objective)")
    if cfg.aux_policy.freeze_model:
        raise ConfigError("aux_policy.freeze_model: a value model trains beside the model, which must train too")
    if dist.is_deepspeed(acc) or dist.is_sharded(acc):
        raise ConfigError(f"method {cfg.method}: its value model trains under one process or DDP, not DeepSpeed/FSDP")


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
