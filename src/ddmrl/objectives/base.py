"""What every policy objective takes and returns: the loss of one optimiser step from its views' log-likelihoods.

Each objective is its own module (``OBJECTIVES`` in :mod:`ddmrl.objectives` names them; docs/methods.md says which
method uses which), so that a GRPO run depends on its method's objective only.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

import torch


class ObjectiveInputs(NamedTuple):
    """What one (micro-)step sees, over its V views (usually V = 1).

    logps: [V, N, L] current policy log-probs (with gradient), old: [V, N, L] rollout-time policy,
    ref: [V, N, L] | None the KL target (frozen reference, or old for TraceRL), advantages: [N],
    weights: [V, N, L], z: [N] | None (RebRL's normaliser), t: [V, N] realised masked fractions,
    targets: [V, N, L] bool valid loss targets, completion_mask: [N, L], num_generations: G,
    target_ids: [V, N, L] | None the tokens each view is trained towards (d-TreeRPO's self-distillation).
    progress: the share of the run's optimiser steps done before this one (t / T of d-TreeRPO's schedules).
    extras: a method's own per-view data by name, each [V, N, ...] (the loop's ``Batch.extras`` sliced to the step):
    ``view_advantages`` [V, N] (MDPO's per-step advantages of each view's step, d-TreeRPO's per-edge ones),
    ``token_advantages`` [V, N, L] (a value model's: TraceRL's ``value_clip``), ...
    """

    logps: torch.Tensor
    old: torch.Tensor
    ref: torch.Tensor | None
    advantages: torch.Tensor
    weights: torch.Tensor
    z: torch.Tensor | None
    t: torch.Tensor
    targets: torch.Tensor
    completion_mask: torch.Tensor
    num_generations: int
    target_ids: torch.Tensor | None = None
    progress: float = 0.0
    extras: Mapping[str, torch.Tensor] = MappingProxyType({})


class ObjectiveOutput(NamedTuple):
    """loss (with gradient), and the objective's own detached diagnostics by name (the terms it has: ``kl``,
    ``clip_ratio``, d-TreeRPO's ``self_distillation``, ...), which the GRPO loop logs to the curve and the trackers
    as they are: the same names on every call of a run (they are the curve's columns)."""

    loss: torch.Tensor
    terms: dict[str, float]
