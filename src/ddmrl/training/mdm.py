"""The masked-diffusion (ELBO, or MaskGIT's) loss and a small training loop for pre-training and SFT.

LLaDA (Nie et al. 2025, GUIDELINES): draw t ~ U(0, 1) per sequence, p = (1 - eps) t + eps, mask each maskable
token with probability p, and minimise sum over masked tokens of CE / p, divided by the number of maskable
tokens: an upper bound on the negative log-likelihood per token. Pre-training masks the whole sequence; SFT never
masks the prompt and masks the answer with its EOS padding (LLaDA SFT; d1 ``SFT/``).

The loop runs under ``accelerate`` (``ddmrl.training.distributed``): with several processes each trains on its share
of the batch with its own masking generator, the gradients are averaged, the curve holds the mean loss over
processes (written by the main process as it grows) and every process saves its part of a checkpoint.

A block-diffusion model (``block_length``; SDAR, Cheng et al. 2025; Arriola et al. 2025) trains on the same noised
sequences with the same loss, its logits read from the [noised | clean] input (``ddmrl.likelihood.block``): each
noised block sees itself and the clean blocks before it, the prompt clean.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ddmrl.config import TRAIN_LOSSES, TrainConfig
from ddmrl.likelihood.block import sequence_logits
from ddmrl.tasks.encoding import Encoded
from ddmrl.training import distributed as dist
from ddmrl.training.resume import Checkpointer
from ddmrl.training.tracking import RunLog


def mdm_loss(
    model,
    x: torch.Tensor,
    maskable: torch.Tensor,
    mask_id: int,
    gen: torch.Generator,
    eps: float = 1e-3,
    loss: str = "elbo",
    logits_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Masked-diffusion loss of clean sequences ``x`` [N, T] where ``maskable`` [N, T] says which positions may be
    masked; u ~ U(0, 1) per sequence.

    ``elbo`` (LLaDA): mask rate p = (1 - eps) u + eps, sum of CE / p over masked tokens per maskable token.
    ``maskgit`` (MaskGIT, Chang et al. 2022 section 3.1; MMaDA's image loss): mask rate cos(pi u / 2) (at least
    eps), CE averaged over the masked tokens, which weighs the heavily masked draws that decide a whole image more
    than the ELBO's 1 / p does.

    ``logits_fn(noised, clean)`` [N, T, V]: the logits of the noised sequences (default ``model(noised).logits``; a
    block-diffusion model's from its [noised | clean] input, :func:`ddmrl.likelihood.block.sequence_logits`).
    """
    n = x.shape[0]
    u = torch.rand(n, generator=gen)  # [N] drawn on the CPU generator
    if loss == "maskgit":
        p = torch.cos(math.pi / 2 * u).clamp_min(eps)
    elif loss == "elbo":
        p = (1 - eps) * u + eps
    else:
        raise ValueError(f"unknown loss '{loss}'; choose one of {', '.join(TRAIN_LOSSES)}")
    p = p.to(x.device)
    masked = (torch.rand(x.shape, generator=gen).to(x.device) < p[:, None]) & maskable  # [N, T]
    noised = x.masked_fill(masked, mask_id)
    logits = model(noised).logits if logits_fn is None else logits_fn(noised, x)  # [N, T, V]
    ce = F.cross_entropy(logits.flatten(0, 1).float(), x.flatten(), reduction="none").view_as(x)
    if loss == "maskgit":
        return (ce * masked).sum() / masked.sum().clamp_min(1)
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
    accelerator=None,
    run_log: RunLog | None = None,
    block_length: int | None = None,
) -> list[dict[str, float]]:
    """Train ``model`` for ``cfg.max_steps`` on ``next_batch(step)``; returns the loss curve (one row per log), each
    row also given to ``run_log`` (the curve file and the trackers) when it is logged.

    With a ``checkpointer``, the state is saved every ``cfg.save_steps`` steps (accelerate's ``save_state``: model,
    optimiser, scheduler, random states; plus every process's masking generator) and a run resumes from the newest
    intact checkpoint; batches depend only on the step, so a resumed run ends with the same weights and curve as an
    uninterrupted one.

    ``accelerator``: the run's ``accelerate.Accelerator`` (None: one process on the model's device). With several
    processes, ``next_batch`` gives this process's share and ``gen`` its own generator
    (``ddmrl.training.distributed.rank_seed``). ``model`` is prepared in place; save it with
    ``ddmrl.training.distributed.save_policy``.

    ``block_length``: the model is a block-diffusion model (``ddmrl.samplers.block.BlockModel``, one process; its
    blocks aligned at the completion: pre-training's sequences are all completion, SFT's prompt is the clean prefix).
    """
    acc = accelerator or dist.local_accelerator(model, getattr(cfg, "mixed_precision", "no"))
    mask_id, pad_id = model.config.mask_token_id, model.config.pad_token_id
    opt = torch.optim.AdamW(dist.trainable(model), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup_steps, cfg.max_steps))
    dist.set_accumulation(acc, 1)
    dist.configure_deepspeed(acc, cfg.batch_size // acc.num_processes, 1, cfg.max_grad_norm)
    dist.configure_fsdp(acc, model)  # FSDP shards the model's own blocks (its _no_split_modules)
    model, opt, sched = acc.prepare(model, opt, sched)  # the scheduler is prepared so that save_state holds it
    sched.step_with_optimizer = False  # one scheduler step per optimiser step, whatever the number of processes
    curve, window, start, elapsed = [], [], 0, 0.0
    if checkpointer is not None and (found := checkpointer.latest(acc)):
        path, meta = found
        checkpointer.restore(acc, path, {"mask": gen})
        curve, window, start, elapsed = meta["curve"], meta["window"], meta["step"], meta["elapsed"]
        acc.print(f"resuming {desc} from {path} (step {start})", flush=True)
    run_log = run_log or RunLog()
    run_log.start(acc, curve)
    model.train()
    t0 = time.time() - elapsed
    bar = tqdm(
        range(start, cfg.max_steps),
        desc=desc,
        mininterval=5,
        initial=start,
        total=cfg.max_steps,
        disable=not acc.is_main_process,
    )
    t_log = time.time()
    for step in bar:
        batch = next_batch(step)
        x, maskable = sequences(batch, objective, pad_id)
        x, maskable = x.to(acc.device), maskable.to(acc.device)
        logits_fn = None
        if block_length is not None:  # pre-training: the whole sequence is noised; SFT: after the prompt
            start = 0 if objective == "pretrain" else batch.prompt_ids.shape[1]
            logits_fn = partial(sequence_logits, acc.unwrap_model(model), start=start, block_length=block_length)
        loss = mdm_loss(model, x, maskable, mask_id, gen, loss=cfg.loss, logits_fn=logits_fn)
        acc.sync_gradients = True
        opt.zero_grad(set_to_none=True)
        acc.backward(loss)
        acc.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
        sched.step()
        window.append(dist.mean_over_processes(acc, {"loss": loss.item()})["loss"])  # the same on every process
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.max_steps:
            row = {
                "step": step + 1,
                "loss": sum(window) / len(window),
                "lr": sched.get_last_lr()[0],
                "time": time.time() - t0,
            }
            curve.append(row)
            run_log.log(row)
            seconds, t_log = (time.time() - t_log) / len(window), time.time()
            bar.set_postfix({"loss": f"{row['loss']:.3f}", "s/step": f"{seconds:.2f}"})
            window = []
        if (
            checkpointer is not None
            and cfg.save_steps
            and (step + 1) % cfg.save_steps == 0
            and step + 1 < cfg.max_steps
        ):
            meta = {"curve": curve, "window": window, "elapsed": time.time() - t0}
            checkpointer.save(acc, step + 1, meta, {"mask": gen})
    model.eval()
    return curve
