"""JustGRPO's objective (Ni et al. 2026, LeapLabTHU/JustGRPO ``grpo.py``, ``logprob_loss``): ``token_clip`` (the
clipped token ratio at each view, minus beta k3 KL, views of a step averaged) with each view's token mean taken over
the **valid samples** only, those of nonzero advantage.

The release scales its summed per-token losses by 1 / (L (n_valid + 1e-5)), n_valid = (advantages != 0).sum() of
the process's samples (averaged over processes). Samples of zero advantage add 0 to the sum either way; they leave
the denominator here, so that a batch with few informative groups is not damped. On views with one target per row
(JustGRPO's: token j with positions >= j masked), the token mean over a view's valid rows, averaged over the L
views, is exactly sum_{i, j} loss_ij / (L n_valid)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.token_clip import token_clip

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


def valid_token_clip(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    """``token_clip`` with the weights of the rows of zero advantage set to 0 (they leave the token means' counts)."""
    valid = (x.advantages != 0).to(x.weights.dtype)  # [N]
    return token_clip(x._replace(weights=x.weights * valid[None, :, None]), cfg)
