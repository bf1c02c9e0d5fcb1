"""Confidence-aware parallel decoding (Fast-dLLM, Wu et al. 2025, section 3.2): rules that commit, at one step,
more masked tokens than the sampler's schedule asks for, when the model is confident about them.

* ``threshold``: every masked token whose confidence (the untempered probability of the proposed token) is at least
  ``threshold``;
* ``factor``: the n most confident tokens, n the largest count with c_(k) >= 1 - factor / (k + 1) for every k <= n,
  where c_(k) is the k-th largest confidence. With factor 1 this is the condition of Fast-dLLM's Theorem 1 (n tokens
  each with confidence above 1 - eps, (n + 1) eps <= 1: greedy parallel decoding picks what greedy decoding of the
  joint distribution would).

The samplers take the union with their own schedule's commits, so a step never commits fewer tokens than without
the rule, and the number of steps can only shrink. Deviation from Fast-dLLM's released factor code: it also commits
every token when only the last one fails the bound (an off-by-one of its loop); here the rule is applied as stated.
"""

from __future__ import annotations

import torch

PARALLEL_RULES = ("none", "threshold", "factor")


def parallel_commits(conf: torch.Tensor, rule: str, threshold: float, factor: float) -> torch.Tensor:
    """Bool [N, K]: the tokens ``rule`` commits, from confidences ``conf`` [N, K] (-inf at positions that are not
    masked, which are never committed).

    >>> c = torch.tensor([[0.99, 0.5, 0.8, -torch.inf]])
    >>> parallel_commits(c, "threshold", 0.9, 1.0).tolist()
    [[True, False, False, False]]
    >>> parallel_commits(c, "factor", 0.9, 1.0).tolist()  # 0.99 >= 1 - 1/2 and 0.8 >= 1 - 1/3, 0.5 < 1 - 1/4
    [[True, False, True, False]]
    """
    if rule == "none":
        return torch.zeros_like(conf, dtype=torch.bool)
    if rule == "threshold":
        return conf >= threshold
    if rule == "factor":
        ordered, order = conf.sort(dim=1, descending=True, stable=True)  # [N, K]
        k = torch.arange(1, conf.shape[1] + 1, device=conf.device, dtype=conf.dtype)  # [K]
        leading = (ordered >= 1 - factor / (k + 1)).long().cumprod(1)  # [N, K] 1 while every bound holds
        commit = torch.zeros_like(conf, dtype=torch.bool)
        return commit.scatter(1, order, leading.bool())
    raise ValueError(f"unknown parallel rule {rule!r}; choose one of {PARALLEL_RULES}")
