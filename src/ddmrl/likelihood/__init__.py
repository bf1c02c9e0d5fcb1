"""Likelihood estimators: per-token log-likelihoods of a view, for the policy, old and reference models, and the
sequence-level estimates built from them (``ESTIMATORS``)."""

from __future__ import annotations

import torch

from ddmrl.likelihood.block import block_token_logps
from ddmrl.samplers.base import guided_logits


def token_logps(
    model,
    input_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    cfg_scale: float = 0.0,
    mask_id: int | None = None,
    block_length: int | None = None,
) -> torch.Tensor:
    """One-step token log-probabilities log p(o_k | x^t) of the completion under one view.

    ``input_ids`` [N, P + L] is the masked view, ``completion_ids`` [N, L] the clean completion. One forward
    pass; the log-softmax is taken in float32 (MaskGRPO's bf16 log-probs quantise the ratio).
    This is d1's mean-field estimator when the whole completion is masked, and UniGRPO / MaskGRPO's masked-token
    estimator otherwise (callers weight only the masked positions). Returns [N, L].

    ``cfg_scale > 0``: log-probs under classifier-free guidance, the samplers' ``u + (w + 1)(c - u)`` with every
    prompt position set to ``mask_id`` in the unconditional branch (two forward passes; d1's ``get_logits``).

    ``block_length``: ``model`` is a block-diffusion model (``ddmrl.samplers.block.BlockModel``); each masked block is
    read against the clean blocks before it (``ddmrl.likelihood.block.block_token_logps``, blocks aligned at the
    completion; no guidance).
    """
    if block_length is not None:
        if cfg_scale:
            raise ValueError("logp_cfg guided: a block-diffusion model has no classifier-free guidance")
        return block_token_logps(model, input_ids, completion_ids, block_length=block_length)
    logp = _completion_log_softmax(model, input_ids, completion_ids.shape[1], cfg_scale, mask_id)  # [N, L, V]
    return logp.gather(-1, completion_ids[..., None]).squeeze(-1)


def token_logps_entropy(
    model,
    input_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    cfg_scale: float = 0.0,
    mask_id: int | None = None,
    block_length: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`token_logps` and, from the same forward pass, the entropy H = -sum_v p_v log p_v of the model's
    distribution at every completion position (IGPO's entropy filter; Zhao et al. 2026). Both [N, L]. Not for a
    block-diffusion model (``block_length``)."""
    if block_length is not None:
        raise ValueError("the entropy filter (IGPO) is not implemented for a block-diffusion model")
    logp = _completion_log_softmax(model, input_ids, completion_ids.shape[1], cfg_scale, mask_id)  # [N, L, V]
    entropy = -(logp.exp() * logp).nan_to_num().sum(-1)  # 0 log 0 = 0 (tokens of probability 0)
    return logp.gather(-1, completion_ids[..., None]).squeeze(-1), entropy


def _completion_log_softmax(model, input_ids: torch.Tensor, length: int, cfg_scale: float, mask_id: int | None):
    """[N, L, V] float32 log-softmax of the model's logits at the last ``length`` positions (guided with
    ``cfg_scale``)."""
    if cfg_scale:
        logits = guided_logits(model, input_ids, input_ids.shape[1] - length, mask_id, cfg_scale)
    else:
        logits = model(input_ids).logits
    return torch.log_softmax(logits[:, -length:].float(), -1)


def sequence_elbo(logps: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_v sum_k omega_v(k) log p_v(k): GDPO's sequence ELBO when omega = delta q_n / t_n (Gauss-Legendre nodes
    t_n, weights q_n; Rojas et al. 2026). [V, N, L] -> [N]."""
    return (weights * logps).sum((0, 2))


def elbo_proxy(logps: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """SPG's ELBO proxy: per view the mean log-prob over its targets, averaged over views. [V, N, L] -> [N]."""
    t = targets.float()
    return ((t * logps).sum(-1) / t.sum(-1).clamp_min(1)).mean(0)


def eubo_proxy(logps: torch.Tensor, targets: torch.Tensor, ratio: torch.Tensor, valid: torch.Tensor, beta: float):
    """SPG's EUBO proxy (Wang et al. 2026): per token, the log of the view-average of p^beta delta / t; mean over
    the tokens targeted at least once; divided by beta. ``ratio`` [V, N] realised masked fractions. -> [N]."""
    t = targets.float()
    term = (torch.exp(beta * logps) * t / ratio.clamp_min(1e-8)[..., None]).mean(0)  # [N, L]
    seen = targets.any(0) & valid
    return (torch.log(term.clamp_min(1e-30)) * seen).sum(-1) / seen.sum(-1).clamp_min(1) / beta


ESTIMATORS = {
    "token_logps": token_logps,
    "token_logps_entropy": token_logps_entropy,
    "sequence_elbo": sequence_elbo,
    "elbo_proxy": elbo_proxy,
    "eubo_proxy": eubo_proxy,
}
