"""A researcher's own view sampler, outside ddmrl: every view masks each completion token with probability 1/2 (with
the request's coupling). A method section names it as ``remasking: mylab.views:halves``."""

from __future__ import annotations

import torch

from ddmrl.masking.views import ViewRequest, Views, ratio_views


def halves(r: ViewRequest) -> Views:
    """Ratio 1/2 in every view: [mu, N]."""
    return ratio_views(r, torch.full((r.mu, r.completion_mask.shape[0]), 0.5))
