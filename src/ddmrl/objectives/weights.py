"""Per-(view, token) loss weights omega and per-sample normalisers Z (RebRL, Zhang et al. 2026: Eq. 11 and 1/F).

  completion_mean  every valid completion token (d1, wd1: the whole completion is masked in every view)
  masked_mean      the valid loss targets of the view (UniGRPO, MaskGRPO, TraceRL, SPG)
  rebrl            omega_ij(k) = delta_ij(k) * lambda(t_ij) / t_ij * g(F_i(k)), Z_i = (1/mu) sum_j sum_k omega_ij(k)
  gdpo_elbo        omega_n(k) = delta_n(k) q_n / t_n (t_n the node): GDPO's Gauss-Legendre ELBO, summed
  mdpo_confidence  the view's targets times the sampler's confidence in them at that step (MDPO; its L/|M| factor
                   is the objective's)
  coupled          omega_v(k) = delta_v(k) / (t_v F_s(k)), t_v the view's nominal ratio and F_s(k) the number of the
                   step's views that mask k: Coupled-GRPO's pooled estimate (its objective, ``coupled_clip``)
  vrpo_elbo        omega_v(k) = delta_v(k) / (n_t t_v), t_v the view's realised ratio and n_t the step's views:
                   VRPO's ELBO estimate, summed over the step's views (its objective, ``vrpo``)
  espo_elbo        omega_v(k) = delta_v(k) / (t_v V_s), t_v = c_v / (T + 1) the view's nominal ratio and V_s the number
                   of the step's views: ESPO's sequence ELBO, the mean of the step's one-view estimates (``espo``)
  ebpo_elbo        omega_v(k) = delta_v(k) / t_v, t_v = c_b / l_b the masked share of the view's block: EBPO's block
                   ELBO terms (their mean over the step's views_per_step timesteps is the objective's, ``ebpo_clip``)
  hint_entropy     d1's completion_mean, then (after the old pass, :func:`hint_entropy_filter`) only the top tau
                   highest-entropy hint positions of each view keep their weight (IGPO)

``legacy_broadcast=True`` reproduces the released MaskGRPO code (its ``compute_loss``): its loss
mask is the stack of all mu masks broadcast onto one view, so every completion position (masked in this view or
not, valid or not) is weighted by how many views mask it. Off by default (the paper's intent: the view's own
targets).

For RebRL, t_ij is the realised masked fraction of view j for sample i (so mode ``none`` is exactly UniGRPO's
mean over masked tokens), lambda(t) is 1, t or t^2, and g(F) = 1/F in the token modes (0 where F = 0), F(k)
being the number of views in which token k is a target. Mode ``token`` (lambda = t, 1/F) gives every token a
total credit sum_j omega_j(k) of exactly 1, whatever the coupling: RebRL's "uniform token-level policy gradient".
"""

from __future__ import annotations

import torch

from ddmrl.masking.views import Views, gauss_legendre, mask_frequency
from ddmrl.objectives import WEIGHTINGS

REBRL_LAMBDA = {"none": 0, "t1": 1, "t2": 2, "token": 1, "token_t2": 2}  # lambda(t) = t ** power
REBRL_TOKEN = {"token", "token_t2"}  # modes with the 1/F token factor


def realised_ratio(views: Views, completion_mask: torch.Tensor) -> torch.Tensor:
    """t_ij = |masked valid tokens| / |valid tokens|, [mu, N]."""
    masked = views.masks & completion_mask[None]
    return masked.sum(-1) / completion_mask.sum(-1).clamp_min(1)[None]


def token_weights(
    weighting: str,
    views: Views,
    completion_mask: torch.Tensor,
    rebrl_mode: str = "token",
    legacy_broadcast: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weights omega [V, N, L] of ``WEIGHTINGS[weighting]`` (``ddmrl.objectives``) and, for RebRL, the per-sample
    normaliser Z [N]."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"unknown weighting '{weighting}'; choose one of {', '.join(WEIGHTINGS)}")
    if legacy_broadcast:
        targets = views.target_masks & completion_mask[None]
        return views.masks.float().sum(0, keepdim=True).expand(targets.shape).clone(), None
    return WEIGHTINGS[weighting](views, completion_mask, rebrl_mode)


def _targets(views: Views, completion_mask: torch.Tensor) -> torch.Tensor:
    return (views.target_masks & completion_mask[None]).float()  # [V, N, L]


def completion_mean_weights(views: Views, completion_mask: torch.Tensor, _mode: str):
    return completion_mask[None].float().expand(views.masks.shape).clone(), None


def masked_mean_weights(views: Views, completion_mask: torch.Tensor, _mode: str):
    return _targets(views, completion_mask), None


def gdpo_elbo_weights(views: Views, completion_mask: torch.Tensor, _mode: str):
    targets = _targets(views, completion_mask)
    _, q = gauss_legendre(targets.shape[0])  # nodes t_n are views.t; the integrand is (1/t_n) sum_k delta ell
    return targets * (q[:, None] / views.t.clamp_min(1e-8))[..., None], None


def mdpo_confidence_weights(views: Views, completion_mask: torch.Tensor, _mode: str):
    if views.states is None or views.states.confidence is None:
        raise ValueError("mdpo_confidence weights need views built from the sampler's states, with confidences")
    return _targets(views, completion_mask) * views.states.confidence, None


def rebrl_weights(views: Views, completion_mask: torch.Tensor, rebrl_mode: str):
    if rebrl_mode not in REBRL_LAMBDA:
        raise ValueError(f"unknown rebrl_mode '{rebrl_mode}'; choose one of {', '.join(REBRL_LAMBDA)}")
    t = realised_ratio(views, completion_mask).clamp_min(1e-8)  # [mu, N]
    step_factor = t ** (REBRL_LAMBDA[rebrl_mode] - 1)  # lambda(t) / t
    w = _targets(views, completion_mask) * step_factor[..., None]
    if rebrl_mode in REBRL_TOKEN:
        f = mask_frequency(views, completion_mask).float()  # [N, L]
        w = w * torch.where(f > 0, 1.0 / f.clamp_min(1), 0.0)[None]
    z = w.sum((0, 2)) / w.shape[0]  # [N]
    return w, z


def coupled_weights(views: Views, completion_mask: torch.Tensor, _mode: str):
    """Coupled-GRPO (DiffuCoder; Gong et al. 2025): each view's importance weight 1 / t (its nominal ratio: 1 for the
    fully masked view, t and 1 - t for the pair), divided by how many of the step's views mask the token, so that
    summing omega log p over a step's views gives the release's (log p_full + log p_pair(k) / t_pair(k)) / 2: the
    fully masked view's estimate and the pair's, averaged. A view belongs to one step (``Views.steps``)."""
    targets = _targets(views, completion_mask)  # [V, N, L]
    count = torch.zeros_like(targets)
    for step in views.steps:
        ids = list(step)
        count[ids] = targets[ids].sum(0, keepdim=True).expand(len(ids), -1, -1)
    return targets / (views.t.clamp_min(1e-8)[..., None] * count.clamp_min(1)), None


# ---------------------------------------------------------------------------------------------- VRPO (LLaDA 1.5)


def vrpo_elbo_weights(views: Views, completion_mask: torch.Tensor, _mode: str):
    """VRPO (LLaDA 1.5; Zhu et al. 2025): the doubly Monte Carlo ELBO B(y) = (1/n_t) sum_j (1/t_j) sum_k
    delta_j(k) log p_j(k) with one mask per timestep, as weights: omega_v(k) = delta_v(k) / (n_t t_v), t_v the
    view's realised ratio (masked / valid tokens: the discrete estimator's L / l) and n_t the size of the view's
    step, so that summing omega log p over a step's views is the step's ELBO estimate."""
    targets = _targets(views, completion_mask)  # [V, N, L]
    t = realised_ratio(views, completion_mask).clamp_min(1e-8)  # [V, N]
    per_step = torch.ones_like(t)
    for step in views.steps:
        per_step[list(step)] = len(step)
    return targets / (per_step * t)[..., None], None


def espo_elbo_weights(views: Views, completion_mask: torch.Tensor, _mode: str):
    """ESPO (Ou et al. 2025, arXiv 2512.03759): each view masking c of the T valid tokens is an unbiased estimate
    of the ELBO, sum_k delta(k) log p(k) / t with t = c / (T + 1) and c uniform on {0..T} (the release's ``p_mask``;
    t = 0 masks nothing); the step's V_s views (num_mc complementary pairs) are averaged, so that summing omega log p
    over a step's views gives the release's ``_get_elbo_mc`` (each pair's (sum_M / t + sum_Mc / t') / 2, averaged
    over the num_mc pairs). A view belongs to one step (``Views.steps``)."""
    targets = _targets(views, completion_mask)  # [V, N, L]
    size = torch.ones(targets.shape[0])
    for step in views.steps:
        size[list(step)] = len(step)
    return targets / (views.t.clamp_min(1e-8) * size[:, None])[..., None], None


def ebpo_elbo_weights(views: Views, completion_mask: torch.Tensor, _mode: str):
    """EBPO (LLaDA2.1, arXiv 2602.08676; DARE's block ELBO): each target token of a block view weighted by
    1 / p_mask, p_mask = c_b / l_b its block's masked share; summed over a Monte Carlo sample's block views this is
    sum_b of the block ELBOs (``ebpo_clip`` averages the views_per_step samples)."""
    return _targets(views, completion_mask) / views.t.clamp_min(1e-8)[..., None], None


def hint_entropy_filter(
    weights: torch.Tensor, targets: torch.Tensor, entropy: torch.Tensor, hints: torch.Tensor, keep: float
) -> torch.Tensor:
    """IGPO's entropy filter on inpainted tokens (Zhao et al. 2026, Sec. 3.3; ``entropy_clipping_ratio_inpaint`` of
    its released trainer): in every view and row, of the n hint positions that are loss targets only the
    max(1, floor(keep * n)) of highest entropy (the old policy's, at that view) keep their weight; the other hint
    positions get weight 0, every non-hint position keeps its own. Ties go to the earlier position.

    Args:
        weights, entropy: [V, N, L]; targets: [V, N, L] bool loss targets; hints: [N, L] bool clamped positions.
    Returns:
        [V, N, L] the filtered weights.
    """
    candidates = targets & hints[None]  # [V, N, L]
    n = candidates.sum(-1, keepdim=True)  # [V, N, 1]
    k = torch.where(n > 0, (n.double() * keep).floor().clamp_min(1), 0)  # [V, N, 1] the released code's int(n * keep)
    score = entropy.masked_fill(~candidates, -torch.inf)
    rank = score.argsort(dim=-1, descending=True, stable=True).argsort(dim=-1)  # [V, N, L] 0 = highest entropy
    return weights * (~candidates | (rank < k))
