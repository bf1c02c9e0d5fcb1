"""The masked-diffusion (ELBO) loss and a small training loop for pre-training and SFT.

LLaDA (Nie et al. 2025, GUIDELINES): draw t ~ U(0, 1) per sequence, p = (1 - eps) t + eps, mask each maskable
token with probability p, and minimise sum over masked tokens of CE / p, divided by the number of maskable
tokens: an upper bound on the negative log-likelihood per token. Pre-training masks the whole sequence; SFT never
masks the prompt and masks the answer with its EOS padding (LLaDA SFT; d1 ``SFT/``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ddmrl.config import TrainConfig
from ddmrl.training.data import Encoded
from ddmrl.training.resume import Checkpointer


def mdm_loss(model, x: torch.Tensor, maskable: torch.Tensor, mask_id: int, gen: torch.Generator, eps: float = 1e-3):
    """ELBO loss of clean sequences ``x`` [N, T] where ``maskable`` [N, T] says which positions may be masked."""
    n = x.shape[0]
    p = (1 - eps) * torch.rand(n, generator=gen) + eps  # [N]
    masked = (torch.rand(x.shape, generator=gen) < p[:, None]) & maskable  # [N, T]
    logits = model(x.masked_fill(masked, mask_id)).logits  # [N, T, V]
    ce = F.cross_entropy(logits.flatten(0, 1).float(), x.flatten(), reduction="none").view_as(x)
    return (ce * masked / p[:, None]).sum() / maskable.sum().clamp_min(1)


def sequences(batch: Encoded, objective: str, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, maskable): ``pretrain`` masks every non-pad position; ``sft`` masks only the completion."""
    x = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    if objective == "pretrain":
        return x, x != pad_id
    if objective == "sft":
        maskable = torch.zeros_like(x, dtype=torch.bool)
        maskable[:, batch.prompt_ids.shape[1] :] = True
        return x, maskable
    raise ValueError(f"unknown objective '{objective}'; choose pretrain or sft")


def lr_lambda(warmup: int, total: int) -> Callable[[int], float]:
    """Linear warm-up then cosine decay to 10 %."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return f


def train_mdm(
    model,
    next_batch: Callable[[int], Encoded],
    cfg: TrainConfig,
    objective: str,
    gen: torch.Generator,
    desc: str = "train",
    checkpointer: Checkpointer | None = None,
) -> list[dict[str, float]]:
    """Train ``model`` for ``cfg.max_steps`` on ``next_batch(step)``; returns the loss curve (one row per log).

    With a ``checkpointer``, the state is saved every ``cfg.save_steps`` steps and a run resumes from the newest
    intact checkpoint; batches depend only on the step and the masking generator's state is saved, so a resumed
    run ends with the same weights and curve as an uninterrupted one.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup_steps, cfg.max_steps))
    mask_id, pad_id = model.config.mask_token_id, model.config.pad_token_id
    curve, window, start, elapsed = [], [], 0, 0.0
    if checkpointer is not None and (found := checkpointer.latest()):
        path, meta = found
        checkpointer.restore(path, model, opt, sched, {"mask": gen})
        curve, window, start, elapsed = meta["curve"], meta["window"], meta["step"], meta["elapsed"]
        print(f"resuming {desc} from {path} (step {start})", flush=True)
    model.train()
    t0 = time.time() - elapsed
    for step in (
        bar := tqdm(range(start, cfg.max_steps), desc=desc, mininterval=5, initial=start, total=cfg.max_steps)
    ):
        x, maskable = sequences(next_batch(step), objective, pad_id)
        loss = mdm_loss(model, x, maskable, mask_id, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
        sched.step()
        window.append(loss.item())
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.max_steps:
            row = {
                "step": step + 1,
                "loss": sum(window) / len(window),
                "lr": sched.get_last_lr()[0],
                "time": time.time() - t0,
            }
            curve.append(row)
            bar.set_postfix(loss=f"{row['loss']:.3f}")
            window = []
        if (
            checkpointer is not None
            and cfg.save_steps
            and (step + 1) % cfg.save_steps == 0
            and step + 1 < cfg.max_steps
        ):
            meta = {"curve": curve, "window": window, "elapsed": time.time() - t0}
            checkpointer.save(step + 1, model, opt, meta, sched, {"mask": gen})
    model.eval()
    return curve
