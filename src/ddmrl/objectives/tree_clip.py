"""d-TreeRPO's objective (Pan et al. 2025, arXiv 2512.09675; THU-BPM/d-TreeRPO ``DTreeRPOTrainer.compute_loss``):
the clipped token ratio of every edge of a tree of rollouts, plus beta times the k3 KL, plus the time-scheduled
self-distillation loss towards the tokens the positively-credited children revealed.

The views are the tree's depths (``ddmrl.masking.views.tree_views``): at depth d the input of row i is its parent
state x_p, its targets the tokens its child x_c revealed, a_k (``view_advantages``) the edge's advantage
(``ddmrl.objectives.advantages.tree_advantages``). Rows under one node repeat its edge, so each edge (node, prompt)
is counted once, with weight 1 / (its rows):

    L_pg = - mean_edges [ (1 / |M_e|) sum_{k in M_e} min(rho_k A_e, clip(rho_k, 1 - eps, 1 + eps) A_e) ],
    rho_k = p_theta(x_c^k | x_p) / p_old(x_c^k | x_p),          M_e: the positions x_c revealed (|M_e| >= 1)
    L_kl = beta mean_edges [ (1 / |M_e|) sum_{k in M_e} k3(theta, ref)_k ]
    L_sd = mean_{(g, k)} KL(q_{g,k} || p_theta(. | x_p)_k),     q_{g,k}(u) = sum_{c in g+: x_c^k = u} w_c / sum w_c,
           w = softmax(A_{g+} / tau(t))

over the groups g (the children of one parent node for one prompt) with more than one child, g+ its children of
positive advantage, and the positions k some child of g+ revealed; the loss is L_pg + L_kl + lambda(t) L_sd with
lambda(t) = lambda_max (e^{gamma t / T} - 1) / (e^gamma - 1) and tau(t) = max(tau_max (1 - t / T)^beta_tau, 1e-6)
(t / T: ``ObjectiveInputs.progress``). p_theta(u | x_p) at a position is read from the log-probabilities of the
siblings' own tokens there (the siblings share the input x_p), so the loss needs no extra forward pass.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.policy_loss import clipped_token_loss

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig

#: the release's epsilon inside log q
Q_EPS = 1e-8


def schedule(progress: float, lambda_max: float, gamma: float, tau_max: float, beta: float) -> tuple[float, float]:
    """(lambda(t), tau(t)) of the self-distillation loss at t / T = ``progress`` (clamped to [0, 1]).

    >>> schedule(0.0, 3e-3, 2.0, 2.0, 0.7), schedule(1.0, 3e-3, 2.0, 2.0, 0.7)
    ((0.0, 2.0), (0.003, 1e-06))
    """
    p = min(1.0, max(0.0, progress))
    lam = lambda_max * (math.exp(gamma * p) - 1.0) / (math.exp(gamma) - 1.0)
    return lam, max(tau_max * max(0.0, 1.0 - p) ** beta, 1e-6)


def self_distillation(
    logps: torch.Tensor, tokens: torch.Tensor, active: torch.Tensor, adv: torch.Tensor, tau: float
) -> tuple[torch.Tensor, int]:
    """Sum over (group, position) of KL(q || p_theta) and the count of its terms, for the groups of one view.

    Args:
        logps: [G, K, L] the log-probability under the current policy of each child's token (children of one parent
            share the input, so these are p_theta(. | x_p) at the children's tokens).
        tokens: [G, K, L] each child's token; active: [G, K, L] bool, the positions it revealed (loss targets).
        adv: [G, K] each child's advantage.
    """
    total, count = logps.new_zeros(()), 0
    for g in range(logps.shape[0]):
        pos = adv[g] > 0  # [K]
        if logps.shape[1] <= 1 or not bool(pos.any()):
            continue
        w = torch.softmax(adv[g][pos] / tau, 0)  # [K+]
        act, tok, lp = active[g][pos], tokens[g][pos], logps[g][pos]  # [K+, L]
        for k in torch.nonzero(act.any(0)).flatten().tolist():
            rows = act[:, k]  # [K+]
            uniq, inv = torch.unique(tok[rows, k], return_inverse=True)  # [u], [r]
            q = torch.zeros(uniq.shape[0], dtype=torch.float32, device=w.device).index_add_(0, inv, w[rows].float())
            if float(q.sum()) <= 0:
                continue
            q = q / (q.sum() + Q_EPS)  # [u]
            at = torch.arange(len(inv), device=inv.device)
            first = torch.full_like(uniq, len(inv)).scatter_reduce_(0, inv, at, "amin")  # [u] a child holding u
            lp_u = lp[rows, k][first]  # [u] log p_theta(u | x_p)
            total = total + (q * (torch.log(q + Q_EPS) - lp_u)).sum()
            count += 1
    return total, count


def tree_clip(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    if "view_advantages" not in x.extras or x.target_ids is None:
        raise ValueError("tree_clip needs per-view advantages (view_advantage: tree) and the views' target tokens")
    v, n, length = x.logps.shape
    branch = cfg.tree_branch_factor
    num, den, kl_num, clip_num, clip_den = (x.logps.new_zeros(()) for _ in range(5))
    sd_total, sd_count = x.logps.new_zeros(()), 0
    lam, tau = schedule(x.progress, cfg.sd_lambda_max, cfg.sd_gamma, cfg.sd_tau_max, cfg.sd_beta)
    for d in range(v):
        mask = x.targets[d].float()  # [n, L] the positions the edge's child revealed
        adv = x.extras["view_advantages"][d]  # [n]
        ref = None if x.ref is None else x.ref[d]
        tl = clipped_token_loss(x.logps[d], x.old[d], ref, adv, cfg.epsilon, cfg.beta, cfg.epsilon_high)
        per_row = (tl.loss * mask).sum(1) / mask.sum(1).clamp_min(1)  # [n] -(psi - beta kl) token mean
        rows = branch ** (v - 1 - d)  # the rows under one node at depth d + 1 (one edge)
        num, den = num + per_row.sum() / rows, den + n / rows
        kl_num = kl_num + ((tl.kl * mask).sum(1) / mask.sum(1).clamp_min(1)).sum() / rows
        clip_num, clip_den = clip_num + (tl.clipped * mask).sum(), clip_den + mask.sum()
        if lam > 0:
            k = x.num_generations // branch ** (v - 1) if d == 0 else branch  # the children of a parent
            pick = slice(None, None, rows)  # one row per child: the first of its node
            shape = (n // rows // k, k, length)  # [groups, K, L]
            sd, c = self_distillation(
                x.logps[d, pick].reshape(shape),
                x.target_ids[d, pick].reshape(shape),
                x.targets[d, pick].reshape(shape),
                adv[pick].reshape(shape[:2]),
                tau,
            )
            sd_total, sd_count = sd_total + sd, sd_count + c
    loss = num / den
    terms = {"kl": float(kl_num / den), "clip_ratio": float(clip_num / clip_den.clamp_min(1))}
    if lam > 0 and sd_count:
        loss = loss + lam * sd_total / sd_count
    if cfg.sd_lambda_max > 0:  # the distillation loss (0 before its weight rises, or with no child to distil from)
        terms["self_distillation"] = float(sd_total / sd_count) if lam > 0 and sd_count else 0.0
    return ObjectiveOutput(loss, terms)
