"""The masked-diffusion ELBO loss (ddmrl.training.mdm) against exact enumeration on a 2-token, 3-symbol model.

mdm_loss draws p = (1 - eps) t + eps with t ~ U(0, 1), masks each maskable token with probability p, and returns
sum_{masked} CE / p divided by the number of maskable tokens.
"""

from __future__ import annotations

import math

import pytest
import torch

from ddmrl.config import TrainConfig
from ddmrl.tasks.encoding import Encoded
from ddmrl.training.mdm import lr_lambda, mdm_loss, sequences, train_mdm

MASK, EPS = 0, 1e-3


class Out:
    def __init__(self, logits):
        self.logits = logits


class StateTable(torch.nn.Module):
    """A 2-position model over symbols {0 = mask, 1, 2} whose logits at both positions are looked up from the whole
    input state (x_0, x_1): table [9, 2, 3]. Every conditional is known, so every expectation is enumerable."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def forward(self, input_ids):
        return Out(self.table[input_ids[:, 0] * 3 + input_ids[:, 1]])

    def nll(self, state: tuple[int, int], pos: int, symbol: int) -> float:
        """-log q(x_pos = symbol | state)."""
        return -torch.log_softmax(self.table[state[0] * 3 + state[1], pos].double(), -1)[symbol].item()


def random_state_table(seed: int, a: int, b: int) -> tuple[StateTable, tuple[float, float, float, float]]:
    """A random StateTable and the costs -log q of clean x = (a, b): (c0(MM), c1(MM), c0(M b), c1(a M))."""
    table = torch.randn(9, 2, 3, generator=torch.Generator().manual_seed(seed)) * 1.5
    table[..., MASK] = -30.0  # the mask symbol is never predicted
    model = StateTable(table)
    costs = model.nll((0, 0), 0, a), model.nll((0, 0), 1, b), model.nll((0, b), 0, a), model.nll((a, 0), 1, b)
    return model, costs


def mc(model, x: torch.Tensor, batches: int, seed: int = 0) -> tuple[float, float]:
    """Mean and standard error of mdm_loss over ``batches`` independent batches of ``x``."""
    gen = torch.Generator().manual_seed(seed)
    vals = torch.tensor(
        [mdm_loss(model, x, torch.ones_like(x, dtype=torch.bool), MASK, gen).item() for _ in range(batches)],
        dtype=torch.float64,
    )
    return vals.mean().item(), (vals.std() / math.sqrt(batches)).item()


def test_input_independent_model_elbo_equals_exact_nll():
    """If q(. | state) = q_k(.) ignores the input, the model's joint is prod_k q_k, and for any p,
    E[masked_k / p] = 1, so E[loss] = (1/T) sum_k -log q_k(x_k): the exact NLL per token (the bound is tight).

    Variance, per row r = (1/(2p)) sum_k m_k c_k: E[r^2] = (E[1/p] sum_k c_k^2 + 2 c_0 c_1) / 4 with
    E[1/p] = ln(1/eps) / (1 - eps). 20000 rows; tolerance 5 standard errors."""
    logits = torch.tensor([[-30.0, 0.3, -0.4], [-30.0, -1.0, 0.8]])  # position 0, 1; mask symbol ~ impossible
    table = logits[None].expand(9, 2, 3)
    model = StateTable(table)
    x = torch.tensor([[1, 1]]).expand(20000, 2).contiguous()
    c = [model.nll((0, 0), 0, 1), model.nll((0, 0), 1, 1)]
    exact = sum(c) / 2
    e_inv_p = math.log(1 / EPS) / (1 - EPS)
    var = (e_inv_p * (c[0] ** 2 + c[1] ** 2) + 2 * c[0] * c[1]) / 4 - exact**2
    se = math.sqrt(var / 20000)
    loss = mdm_loss(model, x, torch.ones_like(x, dtype=torch.bool), MASK, torch.Generator().manual_seed(0)).item()
    assert abs(loss - exact) < 5 * se, (loss, exact, se)


def test_elbo_of_an_input_dependent_model_matches_enumeration_and_bounds_the_nll():
    """Clean x = (a, b). Given p: both masked w.p. p^2, one w.p. p (1 - p) each, so
      E[loss | p] = (1/2) [p (c0(MM) + c1(MM)) + (1 - p) (c0(M b) + c1(a M))],  linear in p, E[p] = (1 + eps) / 2.
    The sampler's joint (random unmasking order, T = 2) is
      P(a, b) = (1/2) [q0(a | MM) q1(b | a M) + q1(b | MM) q0(a | M b)],
    and at eps = 0, 2 E[loss] = E_order[-log prod q] >= -log P(a, b) (Jensen): the ELBO bounds the NLL per token."""
    a, b = 2, 1
    model, (c0mm, c1mm, c0b, c1a) = random_state_table(3, a, b)
    ep = (1 + EPS) / 2
    analytic = 0.5 * (ep * (c0mm + c1mm) + (1 - ep) * (c0b + c1a))
    elbo0 = 0.5 * 0.5 * ((c0mm + c1a) + (c1mm + c0b))
    nll = -math.log(0.5 * (math.exp(-c0mm - c1a) + math.exp(-c1mm - c0b))) / 2
    assert elbo0 >= nll
    assert abs(analytic - elbo0) < 0.01
    x = torch.tensor([[a, b]]).expand(2000, 2).contiguous()
    mean, se = mc(model, x, 40)
    assert abs(mean - analytic) < 5 * se + 1e-6, (mean, analytic, se)
    assert mean > nll - 5 * se


def test_mdm_loss_is_finite_positive_and_differentiable(make_model):
    model = make_model(max_positions=12).train()
    g = torch.Generator().manual_seed(0)
    x = torch.randint(5, 10, (4, 12), generator=g)
    maskable = torch.ones_like(x, dtype=torch.bool)
    maskable[:, :3] = False
    loss = mdm_loss(model, x, maskable, MASK, torch.Generator().manual_seed(1))
    assert math.isfinite(loss.item()) and loss.item() > 0
    loss.backward()
    assert model.tok.weight.grad is not None and model.tok.weight.grad.abs().sum() > 0
    # a random model is near uniform over 10 symbols: loss ~ E[masked count / p] ln 10 / maskable ~ ln 10
    assert 0.2 * math.log(10) < loss.item() < 20 * math.log(10)


def test_mdm_loss_never_looks_at_unmaskable_positions():
    """Positions with maskable = False are never masked and never scored: with only position 1 maskable, the loss is
    the position-1 term alone."""
    logits = torch.tensor([[-30.0, 5.0, -5.0], [-30.0, 0.0, 0.0]])
    model = StateTable(logits[None].expand(9, 2, 3))
    x = torch.tensor([[2, 1]]).expand(20000, 2).contiguous()  # position 0 would cost ~10 nats if scored
    maskable = torch.tensor([[False, True]]).expand(20000, 2)
    loss = mdm_loss(model, x, maskable, MASK, torch.Generator().manual_seed(0)).item()
    assert loss == pytest.approx(math.log(2), rel=0.1)


def test_sequences_sft_never_masks_the_prompt_and_pretrain_skips_pads():
    batch = Encoded(
        prompt_ids=torch.tensor([[1, 1, 2, 6], [2, 6, 7, 8]]),
        completion_ids=torch.tensor([[7, 3, 3], [8, 9, 3]]),
        completion_mask=torch.tensor([[True, True, False], [True, True, True]]),
    )
    x, maskable = sequences(batch, "sft", pad_id=1)
    assert torch.equal(x, torch.cat([batch.prompt_ids, batch.completion_ids], 1))
    assert not bool(maskable[:, :4].any()) and bool(maskable[:, 4:].all()), "SFT masks the answer + EOS padding only"
    x, maskable = sequences(batch, "pretrain", pad_id=1)
    assert torch.equal(maskable, x != 1)
    with pytest.raises(ValueError, match="objective"):
        sequences(batch, "rl", pad_id=1)


def test_lr_schedule_warms_up_then_decays_to_ten_percent():
    f = lr_lambda(warmup=4, total=14)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4) == pytest.approx(1.0)
    assert f(9) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert f(14) == pytest.approx(0.1) and f(100) == pytest.approx(0.1)
    assert all(f(s) >= f(s + 1) for s in range(4, 20))


def test_train_mdm_reduces_the_loss_on_a_fixed_batch(make_model):
    """40 SFT steps on one batch of 8 sequences: the ELBO loss goes down (last logged window < first)."""
    model = make_model(max_positions=10)
    g = torch.Generator().manual_seed(0)
    comp = torch.randint(6, 10, (8, 6), generator=g)
    batch = Encoded(torch.randint(5, 10, (8, 4), generator=g), comp, torch.ones(8, 6, dtype=torch.bool))
    cfg = TrainConfig(max_steps=40, batch_size=8, learning_rate=1e-2, warmup_steps=2, log_every=10)
    curve = train_mdm(model, lambda step: batch, cfg, "sft", torch.Generator().manual_seed(1))
    assert [r["step"] for r in curve] == [10, 20, 30, 40]
    assert all(math.isfinite(r["loss"]) for r in curve)
    assert curve[-1]["loss"] < 0.8 * curve[0]["loss"], curve
    assert not model.training


def test_maskgit_loss_matches_enumeration():
    """``loss="maskgit"``: mask rate p = cos(pi u / 2), CE averaged over the masked tokens of the batch. For clean
    x = (a, b) the batch mean tends to E[sum_k m_k c_k] / E[sum_k m_k] with
      E[num] = E[p^2] (c0(MM) + c1(MM)) + E[p (1 - p)] (c0(M b) + c1(a M)),  E[den] = 2 E[p],
    E[p] = 2 / pi, E[p^2] = 1 / 2 (the eps clamp changes them by < 1e-6). 20 batches of 20000 rows; 5 standard errors.
    """
    a, b = 1, 2
    model, (c0mm, c1mm, c0b, c1a) = random_state_table(4, a, b)
    analytic = (0.5 * (c0mm + c1mm) + (2 / math.pi - 0.5) * (c0b + c1a)) / (4 / math.pi)
    x = torch.tensor([[a, b]]).expand(20000, 2).contiguous()
    gen, ones = torch.Generator().manual_seed(0), torch.ones_like(x, dtype=torch.bool)
    vals = torch.tensor([mdm_loss(model, x, ones, MASK, gen, loss="maskgit").item() for _ in range(20)])
    mean, se = vals.mean().item(), (vals.std() / math.sqrt(20)).item()
    assert abs(mean - analytic) < 5 * se, (mean, analytic, se)
    with pytest.raises(ValueError, match="unknown loss 'mse'; choose one of elbo, maskgit"):
        mdm_loss(model, x, ones, MASK, gen, loss="mse")


def test_train_config_refuses_an_unknown_loss():
    with pytest.raises(ValueError, match="loss"):
        TrainConfig(loss="l2")
