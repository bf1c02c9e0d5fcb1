"""One-step token log-probabilities of a view (ddmrl.likelihood.token_logps)."""

from __future__ import annotations

import torch
from float_error import forward_passes_agree, sums_to_one

from ddmrl.likelihood import token_logps


class Half(torch.nn.Module):
    """Returns bf16 logits; token_logps must take the log-softmax in float32 (not MaskGRPO's bf16)."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, input_ids):
        return type("Out", (), {"logits": self.logits.to(torch.bfloat16)})()


def test_log_probs_of_the_clean_completion_at_the_last_l_positions(make_model):
    model = make_model(max_positions=7)
    x = torch.tensor([[2, 6, 7, 0, 0, 0, 0], [1, 2, 8, 0, 9, 0, 0]])
    completion = torch.tensor([[6, 7, 8, 3], [9, 9, 8, 3]])
    lp = token_logps(model, x, completion)
    want = torch.log_softmax(model(x).logits[:, 3:].float(), -1).gather(-1, completion[..., None])[..., 0]
    assert lp.shape == (2, 4) and lp.dtype == torch.float32
    assert torch.equal(lp, want)
    assert bool((lp < 0).all())
    # the probabilities of all symbols at a position sum to 1
    total = sum(token_logps(model, x, torch.full_like(completion, v)).exp() for v in range(10))
    sums_to_one(total, 10)  # within the float32 rounding of a log-softmax over 10 logits (tests/float_error.py)


def test_log_softmax_is_taken_in_float32():
    """Two logits that differ by less than a bf16 quantum after the softmax shift still give float32 log-probs."""
    logits = torch.tensor([[[0.0, 1.0, 2.0]]])
    lp = token_logps(Half(logits), torch.zeros(1, 1, dtype=torch.long), torch.tensor([[1]]))
    assert lp.dtype == torch.float32
    # 0, 1, 2 are exact in bfloat16: the same float32 log-softmax of the same values, bit for bit
    assert torch.equal(lp, torch.log_softmax(logits, -1)[..., 1])


def test_guided_log_probs_are_the_log_softmax_of_the_samplers_guided_logits(make_model):
    """cfg_scale w: log_softmax(u + (w + 1)(c - u)), u from the view with every prompt position masked (mask id 1)."""
    model = make_model(max_positions=7)
    x = torch.tensor([[2, 6, 7, 1, 1, 5, 1], [4, 2, 8, 1, 9, 1, 1]])  # prompt 3, completion 4
    completion = torch.tensor([[6, 7, 8, 3], [9, 9, 8, 3]])
    uncond = x.clone()
    uncond[:, :3] = 1

    def run(m):  # (ddmrl's guided log-probs, the formula's; the conditional and unconditional logits)
        c, u = m(x).logits[:, 3:], m(uncond).logits[:, 3:]
        want = torch.log_softmax(u + 3.5 * (c - u), -1).gather(-1, completion[..., None])[..., 0]
        return token_logps(m, x, completion, cfg_scale=2.5, mask_id=1), want, torch.cat([c, u])

    # two batchings of the passes (both branches in one pass, each alone): tolerance from float32's error
    # (tests/float_error.py), S the largest |log-prob| plus 2 (2 w + 1) = 12 times the largest |logit|
    forward_passes_agree("the guided log-probs", run, model, x.shape[1], gain=12)
    lp = token_logps(model, x, completion, cfg_scale=2.5, mask_id=1)
    assert not torch.allclose(lp, token_logps(model, x, completion), atol=1e-3)  # guidance changes them
    total = sum(token_logps(model, x, torch.full_like(completion, v), 2.5, 1).exp() for v in range(10))
    sums_to_one(total, 10)
    assert torch.equal(token_logps(model, x, completion, 0.0, 1), token_logps(model, x, completion))
