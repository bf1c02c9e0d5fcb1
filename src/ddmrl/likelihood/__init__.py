"""Likelihood estimators: per-token log-likelihoods of a view, for the policy, old and reference models."""

from __future__ import annotations

import torch


def token_logps(model, input_ids: torch.Tensor, completion_ids: torch.Tensor) -> torch.Tensor:
    """One-step token log-probabilities log p(o_k | x^t) of the completion under one view.

    ``input_ids`` [N, P + L] is the masked view, ``completion_ids`` [N, L] the clean completion. One forward
    pass; the log-softmax is taken in float32 (MaskGRPO's bf16 log-probs quantise the ratio; maskgrpo.md 3.1).
    This is d1's mean-field estimator when the whole completion is masked, and UniGRPO / MaskGRPO's masked-token
    estimator otherwise (callers weight only the masked positions). Returns [N, L].
    """
    length = completion_ids.shape[1]
    logits = model(input_ids).logits[:, -length:].float()  # [N, L, V]
    return torch.log_softmax(logits, -1).gather(-1, completion_ids[..., None]).squeeze(-1)
