"""Confidence-aware parallel decoding (Fast-dLLM, Wu et al. 2025, section 3.2): rules that commit, at one step,
more masked tokens than the sampler's schedule asks for, when the model is confident about them.

* ``threshold``: every masked token whose confidence (the untempered probability of the proposed token) is at least
  ``threshold``;
* ``factor``: the n most confident tokens, n the largest count with c_(k) >= 1 - factor / (k + 1) for every k <= n,
  where c_(k) is the k-th largest confidence. With factor 1 this is the condition of Fast-dLLM's Theorem 1 (n tokens
  each with confidence above 1 - eps, (n + 1) eps <= 1: greedy parallel decoding picks what greedy decoding of the
  joint distribution would).

The samplers take the union with a floor of their own: LLaDA's sampler by default its schedule's commits, so a step
never commits fewer tokens than without the rule and the number of steps can only shrink; with ``parallel_floor:
one``, one token (Fast-dLLM's released ``generate``, where ``steps`` plays no part; ``ddmrl.samplers.llada``).

Fast-dLLM's released factor code (``get_transfer_index_dynamic``) also commits every masked token when only the
last one fails its bound (an off-by-one of its loop). ``factor_rule: as_stated`` (the default) applies the bound as
stated; ``fast_dllm_release`` reproduces the release, off-by-one included, with its first bound -1 (at least one
token).
"""

from __future__ import annotations

import torch

PARALLEL_RULES = ("none", "threshold", "factor")
FACTOR_RULES = ("as_stated", "fast_dllm_release")


def parallel_commits(
    conf: torch.Tensor, rule: str, threshold: float, factor: float, factor_rule: str = "as_stated"
) -> torch.Tensor:
    """Bool [N, K]: the tokens ``rule`` commits, from confidences ``conf`` [N, K] (-inf at positions that are not
    masked, which are never committed). ``factor_rule``: the factor bound as stated or as Fast-dLLM's release.

    >>> c = torch.tensor([[0.99, 0.5, 0.8, -torch.inf]])
    >>> parallel_commits(c, "threshold", 0.9, 1.0).tolist()
    [[True, False, False, False]]
    >>> parallel_commits(c, "factor", 0.9, 1.0).tolist()  # 0.99 >= 1 - 1/2 and 0.8 >= 1 - 1/3, 0.5 < 1 - 1/4
    [[True, False, True, False]]
    >>> c = torch.tensor([[0.99, 0.8, 0.5, -torch.inf]])  # only the last of the three fails: the release takes all
    >>> parallel_commits(c, "factor", 0.9, 1.0, "fast_dllm_release").tolist()
    [[True, True, True, False]]
    """
    if rule == "none":
        return torch.zeros_like(conf, dtype=torch.bool)
    if rule == "threshold":
        return conf >= threshold
    if rule == "factor":
        ordered, order = conf.sort(dim=1, descending=True, stable=True)  # [N, K]
        k = torch.arange(1, conf.shape[1] + 1, device=conf.device, dtype=conf.dtype)  # [K]
        bound = 1 - factor / (k + 1)  # [K]
        if factor_rule == "fast_dllm_release":
            bound[0] = -1  # its ``threshs[0] = -1``: the most confident token always passes
        elif factor_rule != "as_stated":
            raise ValueError(f"unknown factor_rule {factor_rule!r}; choose one of {FACTOR_RULES}")
        leading = (ordered >= bound).long().cumprod(1)  # [N, K] 1 while every bound holds
        if factor_rule == "fast_dllm_release":  # its loop's off-by-one: n = M - 1 passing tokens of M commit all M
            n, masked = leading.sum(1, keepdim=True), conf.isfinite().sum(1, keepdim=True)  # [N, 1]
            leading = torch.arange(conf.shape[1], device=conf.device) < torch.where(n == masked - 1, masked, n)
        commit = torch.zeros_like(conf, dtype=torch.bool)
        return commit.scatter(1, order, leading.bool())
    raise ValueError(f"unknown parallel rule {rule!r}; choose one of {PARALLEL_RULES}")
