"""Credit diagnostics: how much gradient each token receives, as a function of the step that revealed it.

For one rollout batch and one method, the total credit of token k of rollout i is

    C_i(k) = sum over inner steps s of | d loss_s / d log p_s(k) |  /  |A_i|

measured with autograd through the method's own objective at ratio 1 (policy = old = reference, where the KL
gradient vanishes). Taken relative to the rollout's own mean (so that length normalisations across rollouts do not
enter) and grouped by the sampler step at which k was revealed, this is the empirical form of RebRL's Eq. 10
(Zhang et al. 2026). Under trajectory masks, where the training views follow the sampler's order, tokens revealed
late are masked in more views and collect more gradient, and RebRL's token mode makes the credit flat.
Independent masks (UniGRPO's code) spread it evenly in expectation; MaskGRPO's AR-like fading favours late
positions, which semi-AR decoding reveals late.

For a RebRL section, :func:`credit_variants` adds every weighting mode under every coupling of the section's views,
so the plot shows each coupling's imbalance (mode none) and what each mode leaves of it.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import torch

from ddmrl.config import GRPOConfig
from ddmrl.methods import METHODS
from ddmrl.objectives import OBJECTIVES
from ddmrl.rollout import Rollouts
from ddmrl.training.grpo import Batch, make_views, objective_inputs, view_advantages, view_logps, view_targets


def token_credit(
    model,
    cfg: GRPOConfig,
    rollouts: Rollouts,
    advantages: torch.Tensor,
    seed: int,
    pad_id: int,
    mask_id: int,
    step_advantages: torch.Tensor | None = None,
    per_view_advantages: torch.Tensor | None = None,
) -> torch.Tensor:
    """C [N, L]: per-token gradient magnitude over one rollout batch's inner steps, each view's divided by the
    advantage it was trained with, |A_i| (0 if A_i = 0), or with per-step advantages [N, S] (MDPO) the advantage of
    the view's sampler step, or with per-view advantages [V, N] (d-TreeRPO's per-edge ones) the view's."""
    views, weights, z, inputs = make_views(cfg, rollouts, seed, pad_id, mask_id, step_advantages)
    targets, per_view = view_targets(views, rollouts.completion_ids), view_advantages(views, step_advantages)
    per_view = per_view if per_view_advantages is None else per_view_advantages
    # the objective sees advantages, views and weights; rewards and group flags do not enter the gradient
    none = torch.zeros(0)
    extras = {} if per_view is None else {"view_advantages": per_view}
    b = Batch(rollouts, none, advantages, none, views, weights, z, inputs, targets, extras)
    with torch.no_grad():
        block = {"block_length": cfg.sampler.block_length} if cfg.sampler.name == "block" else {}
        old = view_logps(model, inputs, targets, **block)  # [V, N, L]
    objective = OBJECTIVES[METHODS[cfg.method].objective]
    credit = torch.zeros_like(old[0])
    rows = slice(0, old.shape[1])
    for ids in views.steps:
        logps = old[list(ids)].clone().requires_grad_(True)  # ratio 1, KL gradient 0
        out = objective(objective_inputs(b, old, old, logps, ids, rows, cfg.num_generations), cfg)
        (grad,) = torch.autograd.grad(out.loss, logps)
        a = (advantages[None] if per_view is None else per_view[list(ids)]).abs()[..., None]  # [V', N, 1]
        credit += torch.where(a > 0, grad.abs() / a.clamp_min(1e-12), 0.0).sum(0)
    return credit * rollouts.completion_mask


def credit_by_reveal_step(credit: torch.Tensor, rollouts: Rollouts, advantages: torch.Tensor) -> pd.DataFrame:
    """Mean relative credit (a token's credit over its rollout's mean) per sampler reveal step, over the valid
    tokens of rollouts with A != 0. Columns: reveal_step, relative_credit, count."""
    valid = rollouts.completion_mask
    mean = (credit * valid).sum(1) / valid.sum(1).clamp_min(1)  # [N]
    keep = valid & ((advantages != 0) & (mean > 0))[:, None]
    relative = credit / mean.clamp_min(1e-12)[:, None]
    frame = pd.DataFrame(
        {"reveal_step": rollouts.reveal_step[keep].tolist(), "relative_credit": relative[keep].tolist()}
    )
    return frame.groupby("reveal_step")["relative_credit"].agg(relative_credit="mean", count="count").reset_index()


COUPLINGS = ("independent", "nested", "trajectory")
MODES = ("none", "t1", "t2", "token")


def credit_variants(section: str, cfg: GRPOConfig) -> dict[str, GRPOConfig]:
    """The configurations whose credit is measured for ``section``: the section itself, and for a RebRL section
    each weighting mode under each coupling of its views, named ``<section>[<mode>, <coupling>]``."""
    variants = {section: cfg}
    if cfg.method == "rebrl":
        for coupling in COUPLINGS:
            for mode in MODES:
                variants[f"{section}[{mode}, {coupling}]"] = dataclasses.replace(
                    cfg, rebrl_mode=mode, coupling=coupling
                )
    return variants
