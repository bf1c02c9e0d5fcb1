"""MAR's pre-training: the diffusion loss on masked tokens (Li et al. 2024, Eq. 2 and section 3.3).

For a batch of images: mask a random subset of each image's tokens, let the transformer propose conditions z from the
prompt and the known tokens, and train the head (and through z the transformer) to predict the noise of the masked
tokens at random diffusion timesteps, ``diffusion_batch_mul`` timesteps per token (MAR's ``diffusion_batch_mul``,
4). MAR draws the mask ratio from a truncated normal on [0.7, 1]; ddmrl draws it as MaskGIT does, cos(pi u / 2) with
u ~ U(0, 1), as the masked-diffusion image base model of geneval-mini is trained (``image.download.pretrain.loss:
maskgit``), so that both base models see the same masking.

The loop is ``ddmrl.training.mdm.train_mdm``'s (AdamW, linear warm-up then cosine decay, accelerate checkpoints
every ``save_steps`` steps that a rerun resumes from, the curve appended as it grows), on one process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ddmrl.mar.diffusion import Schedule, q_sample
from ddmrl.training import distributed as dist
from ddmrl.training.mdm import lr_lambda
from ddmrl.training.resume import Checkpointer
from ddmrl.training.tracking import RunLog


def random_mask(batch: int, num_tokens: int, gen: torch.Generator) -> torch.Tensor:
    """[B, N] bool: ceil(N cos(pi u / 2)) random tokens per image masked (at least one), u ~ U(0, 1)."""
    ratio = torch.cos(math.pi / 2 * torch.rand(batch, generator=gen))
    count = (ratio * num_tokens).ceil().clamp(1, num_tokens)  # [B]
    rank = torch.rand(batch, num_tokens, generator=gen).argsort(-1).argsort(-1)  # [B, N] a random rank per token
    return rank < count[:, None]


def mar_loss(
    model, schedule: Schedule, prompt_ids: torch.Tensor, x0: torch.Tensor, gen: torch.Generator, multiplicity: int = 4
) -> torch.Tensor:
    """The diffusion loss of clean tokens ``x0`` [B, N, C]: mean over masked tokens and ``multiplicity`` draws of
    (timestep, noise) of |eps_theta(x_t, t, z) - eps|^2 / C."""
    mask = random_mask(x0.shape[0], x0.shape[1], gen).to(x0.device)  # [B, N]
    z = model.conditions(prompt_ids, x0, mask)[mask].repeat(multiplicity, 1)  # [M * n, D]
    target = x0[mask].repeat(multiplicity, 1)  # [M * n, C]
    k = torch.randint(0, len(schedule), (target.shape[0],), generator=gen).to(x0.device)
    noise = torch.randn(target.shape, generator=gen).to(x0.device)
    eps = model.head(q_sample(schedule, target, k, noise), schedule.timesteps.to(x0.device)[k], z)
    return F.mse_loss(eps, noise)


def train_mar(
    model,
    next_batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    cfg,
    schedule: Schedule,
    gen: torch.Generator,
    checkpointer: Checkpointer | None = None,
    accelerator=None,
    run_log: RunLog | None = None,
) -> list[dict[str, float]]:
    """Pre-train ``model`` for ``cfg.max_steps`` steps (``cfg``: ``ddmrl.config.MarPretrainConfig``) on
    ``next_batch(step)`` = (prompt ids [B, P], tokens [B, N, C]); the loss curve, one row per ``log_every`` steps.
    Batches depend only on the step and masks on ``gen`` (saved with each checkpoint), so a resumed run ends as an
    uninterrupted one."""
    acc = accelerator or dist.local_accelerator(model)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup_steps, cfg.max_steps))
    model, opt, sched = acc.prepare(model, opt, sched)
    curve, window, start, elapsed = [], [], 0, 0.0
    if checkpointer is not None and (found := checkpointer.latest(acc)):
        path, meta = found
        checkpointer.restore(acc, path, {"mask": gen})
        curve, window, start, elapsed = meta["curve"], meta["window"], meta["step"], meta["elapsed"]
        acc.print(f"resuming MAR pre-training from {path} (step {start})", flush=True)
    run_log = run_log or RunLog()
    run_log.start(acc, curve)
    model.train()
    t0 = time.time() - elapsed
    bar = tqdm(range(start, cfg.max_steps), desc="pretrain", mininterval=5, initial=start, total=cfg.max_steps)
    for step in bar:
        prompt_ids, x0 = (t.to(acc.device) for t in next_batch(step))
        loss = mar_loss(model, schedule, prompt_ids, x0, gen, cfg.diffusion_batch_mul)
        opt.zero_grad(set_to_none=True)
        acc.backward(loss)
        acc.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
        sched.step()
        window.append(loss.item())
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.max_steps:
            row = {"step": step + 1, "loss": sum(window) / len(window), "lr": sched.get_last_lr()[0],
                   "time": time.time() - t0}  # fmt: skip
            curve.append(row)
            run_log.log(row)
            bar.set_postfix({"loss": f"{row['loss']:.4f}"})
            window = []
        due = cfg.save_steps and (step + 1) % cfg.save_steps == 0 and step + 1 < cfg.max_steps
        if checkpointer is not None and due:
            meta = {"curve": curve, "window": window, "elapsed": time.time() - t0}
            checkpointer.save(acc, step + 1, meta, {"mask": gen})
    model.eval()
    return curve
