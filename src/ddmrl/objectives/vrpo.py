"""VRPO's objective (LLaDA 1.5; Zhu et al. 2025, arXiv 2505.19223): DPO on ELBO estimates of the sequence
log-likelihoods, with preference pairs built from each group's scored rollouts.

  L = -mean_pairs log sigma(beta [(B_theta(y_w) - B_ref(y_w)) - (B_theta(y_l) - B_ref(y_l))])

B_pi(y) = sum_v sum_k omega_v(k) log p_v(k) is the step's ELBO estimate (``vrpo_elbo`` weights over the step's
n_t views: (1/n_t) sum_j (1/t_j) sum_k delta_j(k) log p_j(k)), the policy's and the reference's on the same views
(antithetic sampling: the noise cancels in B_theta - B_ref). The pair of a group is its best and its worst rollout
(y_w, y_l); a group whose rollouts all score the same gives no pair.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ddmrl.likelihood import sequence_elbo
from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


def preference_pairs(scores: torch.Tensor, g: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The preference pair of every group of ``g`` consecutive rows: the row of highest score (chosen, y_w) and the
    row of lowest (rejected, y_l), the first such row on ties; ``valid`` is False for a group whose scores are all
    equal. Within a group the advantages order the rollouts as their rewards, so either may be ``scores``.

    Args:
        scores: [N] rewards or advantages, N a multiple of g.
    Returns:
        chosen, rejected: [N / g] row indices; valid: [N / g] bool.
    """
    groups = scores.view(-1, g)  # [B, G]
    base = torch.arange(groups.shape[0], device=scores.device) * g  # [B]
    best, worst = groups.argmax(1), groups.argmin(1)
    valid = groups.max(1).values > groups.min(1).values
    return base + best, base + worst, valid


def dpo_loss(
    elbo: torch.Tensor, elbo_ref: torch.Tensor, chosen: torch.Tensor, rejected: torch.Tensor, beta: float
) -> torch.Tensor:
    """-log sigma(beta [(B(y_w) - B_ref(y_w)) - (B(y_l) - B_ref(y_l))]) of every pair: DPO's loss (Rafailov et al.
    2023) with ELBOs for log-likelihoods (VRPO's Eq. of L_DPO-E). ``elbo``, ``elbo_ref`` [N]; -> [pairs]."""
    log_ratio = elbo - elbo_ref  # [N]
    return -F.logsigmoid(beta * (log_ratio[chosen] - log_ratio[rejected]))


def vrpo(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    """The mean DPO loss over the micro-batch's pairs (0, with a zero gradient, when no group has one); ``kl``: the
    paired rollouts' mean per-token ELBO log-ratio (B_theta - B_ref) / |y| (DPO's implicit reward over beta)."""
    if x.ref is None:
        raise ValueError("vrpo needs the reference log-probs on the same views (beta > 0, kl_target ref)")
    elbo, elbo_ref = sequence_elbo(x.logps, x.weights), sequence_elbo(x.ref, x.weights)  # [N]
    chosen, rejected, valid = preference_pairs(x.advantages, x.num_generations)
    chosen, rejected = chosen[valid], rejected[valid]
    if chosen.numel() == 0:
        return ObjectiveOutput(elbo.sum() * 0.0, {"kl": 0.0})  # no pair: no loss, no log-ratio (the same terms)
    loss = dpo_loss(elbo, elbo_ref, chosen, rejected, cfg.beta).mean()
    rows = torch.cat([chosen, rejected])
    length = x.completion_mask[rows].sum(1).clamp_min(1)
    kl = ((elbo - elbo_ref)[rows].detach() / length).mean().item()
    return ObjectiveOutput(loss, {"kl": kl})
