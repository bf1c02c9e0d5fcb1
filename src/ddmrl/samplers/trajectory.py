"""Stored trajectories: the reverse process of a batch of rollouts as the sampler ran it, step by step.

A sampler called with ``record_trajectory=True`` keeps, for each of its S steps, the state the step started from,
the model's full prediction at that step and the model's confidence in it. Trajectory-consistent methods train on
exactly these transitions (CJ-GRPO, Yang et al. 2025, arXiv 2509.23924; TraceRL), and MDPO (He et al. 2025, arXiv
2508.13148) rewards and trains each step's prediction. Recording costs 3 S N L numbers per rollout batch (hence a
flag); it never changes what is sampled.

A sampler that never re-masks a committed token is described by its reveal steps alone: :func:`states_from_reveal`
rebuilds its states exactly. One that does (running-confidence remasking) must record them.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Trajectory(NamedTuple):
    """S steps of N rollouts of completion length L.

    states: [S, N, L] x_s, the completion before step s (the mask id where masked): the input of step s.
    predictions: [S, N, L] x̂_0^(s), the model's full prediction at step s: every masked position of x_s filled with
        the step's proposal, the other positions as in x_s (MDPO's per-step prediction).
    confidence: [S, N, L] float32, the model's probability of x̂_0^(s) at each masked position of x_s (the
        confidence the step ranks by: untempered, or tempered with the sampler's ``tempered_confidence``; 1 where x_s
        is not masked, the token being given).
    """

    states: torch.Tensor
    predictions: torch.Tensor
    confidence: torch.Tensor


class TrajectoryRecorder:
    """Collects a sampler's steps (completion positions only) and stacks them into a :class:`Trajectory`."""

    def __init__(self) -> None:
        self.states: list[torch.Tensor] = []
        self.predictions: list[torch.Tensor] = []
        self.confidence: list[torch.Tensor] = []

    def add(self, state: torch.Tensor, proposal: torch.Tensor, prob: torch.Tensor, mask_id: int) -> None:
        """One step: ``state`` [N, L] before it, the step's ``proposal`` [N, L] and its probability ``prob`` [N, L]."""
        self.states.append(state.clone())
        masked = state == mask_id
        self.predictions.append(torch.where(masked, proposal, state))
        self.confidence.append(torch.where(masked, prob.float(), 1.0))

    def trajectory(self) -> Trajectory:
        return Trajectory(torch.stack(self.states), torch.stack(self.predictions), torch.stack(self.confidence))


def states_from_reveal(completion_ids: torch.Tensor, reveal_step: torch.Tensor, mask_id: int) -> torch.Tensor:
    """[S, N, L] the states of a sampler that never re-masks: x_s masks every token revealed at step >= s.

    S = the last reveal step + 1 over the batch (a row that finished earlier keeps its completion).

    >>> states_from_reveal(torch.tensor([[7, 8, 9]]), torch.tensor([[1, 0, 1]]), 0).tolist()
    [[[0, 0, 0]], [[0, 8, 0]]]
    """
    s = int(reveal_step.max()) + 1 if reveal_step.numel() else 0
    step = torch.arange(s, device=reveal_step.device)[:, None, None]  # [S, 1, 1]
    return completion_ids[None].masked_fill(reveal_step[None] >= step, mask_id)


def next_states(states: torch.Tensor, completion_ids: torch.Tensor) -> torch.Tensor:
    """[S, N, L] the state after each step: x_{s+1}, and the completion after the last step."""
    return torch.cat([states[1:], completion_ids[None]])
