"""Per-position entropies beside the token log-probs (ddmrl.likelihood.token_logps_entropy; IGPO's filter), and
``view_logps(..., entropy=True)`` in the GRPO loop."""

from __future__ import annotations

import math

import torch
from float_error import forward_passes_agree

from ddmrl.likelihood import token_logps, token_logps_entropy
from ddmrl.training.grpo import view_logps


class Fixed(torch.nn.Module):
    """Returns the given logits whatever the input."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, input_ids):
        return type("Out", (), {"logits": self.logits})()


def test_entropy_by_hand_with_a_token_of_probability_zero():
    """Position 0: uniform over 4 symbols, H = log 4; position 1: (1/2, 1/2, 0, 0) with two -inf logits, H = log 2
    (0 log 0 = 0, no NaN); the log-probs are token_logps' own."""
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, -torch.inf, -torch.inf]]])
    model, x, ids = Fixed(logits), torch.zeros(1, 3, dtype=torch.long), torch.tensor([[2, 1]])
    lp, h = token_logps_entropy(model, x, ids)
    assert torch.allclose(h[0], torch.tensor([math.log(4), math.log(2)]))
    assert torch.equal(lp, token_logps(model, x, ids))


def test_view_logps_with_entropy_gives_the_same_log_probs(make_model):
    model = make_model(max_positions=7)
    inputs = torch.randint(0, 10, (3, 2, 7), generator=torch.Generator().manual_seed(0))  # [V, N, P + L]
    completion = torch.randint(5, 10, (2, 4), generator=torch.Generator().manual_seed(1))
    lp, h = view_logps(model, inputs, completion, entropy=True)
    assert torch.equal(lp, view_logps(model, inputs, completion))

    def run(m):  # view 1's entropies from the batched pass and from its own pass (its logits last)
        logits = m(inputs[1]).logits[:, 3:].float()
        probs = torch.softmax(logits, -1)
        return view_logps(m, inputs, completion, entropy=True)[1][1], -(probs * probs.log()).sum(-1), logits

    # other batchings: tolerance from float32's error (tests/float_error.py); H moves by sum_v p_v |l_v + H| <= 2 H
    # <= 2 log V times the logits' error, so S adds 2 log 10 times the largest |logit|
    forward_passes_agree("view 1's entropies", run, model, inputs.shape[2], gain=2 * math.log(10))
    assert h.shape == (3, 2, 4) and bool((h >= 0).all()) and bool((h <= math.log(10) + 1e-5).all())
