"""Policy objectives: the loss of one optimiser step from its views' log-likelihoods (algorithms.md C.2).

Every objective takes the same :class:`ObjectiveInputs` and returns an :class:`ObjectiveOutput`:

  token_clip           PPO/GRPO token ratio at each view, clipped, minus beta k3 KL, weighted and aggregated
                       (d1, UniGRPO, MaskGRPO, RebRL, TraceRL); several views in a step are averaged
  sequence_clip        GDPO (Rojas et al. 2026): sequence ratio exp(ELBO_theta - ELBO_old) with the ELBO a
                       Gauss-Legendre sum over the step's views, clipped, length-normalised, minus beta k3 KL
  spg                  SPG (Wang et al. 2026): REINFORCE, no ratio, no KL; an ELBO proxy for A > 0 and an
                       EUBO proxy (or a mix) for A <= 0, sandwiching the true log-likelihood; sequences weighted
                       by completion length
  weighted_likelihood  wd1 (Tang et al. 2026): ratio-free, sum_i (-w+_i + w-_i) log pi(o_i), w+- = group softmax
                       of +-A, log pi from d1's one-step estimator summed over the completion
  mdpo                 MDPO (He et al. 2025): ``ddmrl.objectives.mdpo``
"""

from __future__ import annotations

import torch

from ddmrl.config import GRPOConfig
from ddmrl.likelihood import elbo_proxy, eubo_proxy, sequence_elbo
from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.mdpo import mdpo
from ddmrl.objectives.policy_loss import aggregate, clipped_token_loss, k3_kl


def token_clip(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    losses, kls, clips = [], [], []
    for v in range(x.logps.shape[0]):
        ref = None if x.ref is None else x.ref[v]
        tl = clipped_token_loss(x.logps[v], x.old[v], ref, x.advantages, cfg.epsilon, cfg.beta)
        losses.append(aggregate(tl.loss, x.weights[v], cfg.loss_type, x.z))
        kls.append(aggregate(tl.kl, x.weights[v], "token_mean").item())
        clips.append(aggregate(tl.clipped, x.weights[v], "token_mean").item())
    n = len(losses)
    return ObjectiveOutput(torch.stack(losses).mean(), sum(kls) / n, sum(clips) / n)


def sequence_clip(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    elbo, elbo_old = sequence_elbo(x.logps, x.weights), sequence_elbo(x.old, x.weights)  # [N]
    length = x.completion_mask.sum(1).clamp_min(1)  # [N]
    ratio = torch.exp(elbo - elbo_old)
    a = x.advantages
    unclipped, clipped = ratio * a, ratio.clamp(1 - cfg.epsilon, 1 + cfg.epsilon) * a
    psi = torch.minimum(unclipped, clipped)
    kl = k3_kl(elbo, sequence_elbo(x.ref, x.weights)) if x.ref is not None and cfg.beta else torch.zeros_like(elbo)
    loss = (-(psi - cfg.beta * kl) / length).mean()
    return ObjectiveOutput(loss, (kl / length).mean().item(), (clipped < unclipped).float().mean().item())


def spg(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    elbo = elbo_proxy(x.logps, x.targets)  # [N]
    eubo = eubo_proxy(x.logps, x.targets, x.t, x.completion_mask, cfg.eubo_beta)  # [N]
    negative = cfg.eubo_mix * eubo + (1 - cfg.eubo_mix) * elbo
    proxy = torch.where(x.advantages > 0, elbo, negative)
    # weighted by completion length (tokens up to EOS included), as SPG's trainer: sum_i |y_i| (-A_i p_i) / sum |y|
    length = x.completion_mask.sum(1).to(proxy.dtype)  # [N]
    return ObjectiveOutput(-(x.advantages * proxy * length).sum() / length.sum().clamp_min(1), 0.0, 0.0)


def weighted_likelihood(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    logpi = (x.weights * x.logps).sum((0, 2)) / x.logps.shape[0]  # [N], d1's one-step estimate (views averaged)
    a = x.advantages.view(-1, x.num_generations)  # [B, G]
    w_pos, w_neg = torch.softmax(a, 1), torch.softmax(-a, 1)
    loss = ((-w_pos + w_neg) * logpi.view_as(a)).sum(1).mean() / x.num_generations
    return ObjectiveOutput(loss, 0.0, 0.0)


OBJECTIVES = {
    "token_clip": token_clip,
    "sequence_clip": sequence_clip,
    "spg": spg,
    "weighted_likelihood": weighted_likelihood,
    "mdpo": mdpo,
}
