"""What every policy objective takes and returns: the loss of one optimiser step from its views' log-likelihoods.

Each objective is its own module (``OBJECTIVES`` in :mod:`ddmrl.objectives` names them), so that a GRPO run
depends on its method's objective only:

  token_clip           PPO/GRPO token ratio at each view, clipped, minus beta k3 KL, weighted and aggregated
                       (d1, UniGRPO, MaskGRPO, RebRL, TraceRL); several views in a step are averaged
  sequence_clip        GDPO (Rojas et al. 2026): sequence ratio of a Gauss-Legendre ELBO, clipped
  spg                  SPG (Wang et al. 2026): REINFORCE on ELBO / EUBO proxies sandwiching the log-likelihood
  weighted_likelihood  wd1 (Tang et al. 2026): ratio-free likelihood weighted by group softmaxes of +-A
  mdpo                 MDPO (He et al. 2025): per-step advantages on stored states, L/|M| and confidence weights
  coupled_clip         Coupled-GRPO (Gong et al. 2025): the step's views pooled into one log-prob per token, then
                       the token ratio, clipped, minus beta k3 KL
  valid_token_clip     JustGRPO (Ni et al. 2026): token_clip with each view's token mean over the samples of nonzero
                       advantage only
  vrpo                 VRPO (Zhu et al. 2025): DPO on ELBO estimates, policy and reference on the same views, of
                       each group's best and worst rollout
  espo_clip            ESPO (Ou et al. 2025): the ELBO's sequence ratio normalised by the length, clipped, plus beta
                       times the k2 KL of the ELBOs over the length
  ebpo_clip            EBPO (LLaDA2.1, as DARE implements it): the composite block ELBO's sequence ratio, clipped in
                       the log domain, plus beta times the k3 KL of the composite ELBOs
  bgpo                 BGPO (Lin et al. 2025): per view the linear (A > 0) or Jensen (A <= 0) bound of the sequence
                       ratio of its one-sample ELBO, clipped; a mean of per-view terms (one backward pass per view)
  tree_clip            d-TreeRPO (Pan et al. 2025): token_clip per edge of a tree of rollouts, with per-edge
                       advantages, plus a time-scheduled self-distillation loss
  dipo                 DiPO (Zhu et al. 2025): the clipped token ratio at each sampler step's own state, summed over
                       the step's tokens, averaged over the batch's sampler steps (Eq. 7)
  value_clip           TraceRL's value model (Wang et al. 2026): token_clip with each token's own advantage, the
                       step-level GAE of the value model's values (``ddmrl.objectives.value``)
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
