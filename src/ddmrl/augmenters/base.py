"""What a rollout augmenter takes and returns (the ``RolloutAugmenter`` of the GRPO loop: after the task rewards,
before the group advantages)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig
    from ddmrl.rollout import Rollouts
    from ddmrl.tasks.base import Example, Task


class AugmentInputs(NamedTuple):
    """One scored rollout batch and what an augmenter may sample with.

    policy: the model (in eval mode, as for the rollouts), tok its tokenizer, task and examples (one per group),
    batch: the rollouts [N = B * G rows, on the CPU], rewards [N], num_generations G, cfg the run's config,
    gen: the torch generator of the augmenter's sampling (on the model's device), seed: for its own other draws.
    """

    policy: Any
    tok: Any
    task: Task
    examples: list[Example]
    batch: Rollouts
    rewards: torch.Tensor
    num_generations: int
    cfg: GRPOConfig
    gen: torch.Generator
    seed: int


class Augmented(NamedTuple):
    """The edited batch (``hints`` set), its rewards [N], and counts for the curve (the same keys every batch)."""

    batch: Rollouts
    rewards: torch.Tensor
    stats: dict[str, float]


@dataclass(frozen=True)
class Augmenter:
    """A rollout augmenter: ``check(task)`` refuses a task it cannot work on (a one-line ``ConfigError``), ``augment``
    edits a batch (its ``stats`` become curve columns, summed over processes)."""

    check: Callable[[Task], None]
    augment: Callable[[AugmentInputs], Augmented]
