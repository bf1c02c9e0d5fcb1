"""Tolerances between two float computations derived from float32's error, not fitted to one machine's rounding
(issue #38).

A test that checks ddmrl's loss and gradient against a transcription of a released implementation compares two
float32 computations of the same sums, the terms added in other orders (other batch shapes, other kernels, autograd's
or ``.grad``'s accumulation). They differ by rounding, whose size depends on the CPU's kernels: an rtol that one
machine passes another fails. Such a test computes both sides twice, in float32 as it means them and in float64
(:func:`in_float64` copies of the models, the float inputs cast), and :func:`agree` checks, for a value x:

1. **the same mathematics**: the float64 sides agree to ``RTOL64`` S. Each float64 side is within about n eps64 S of
   the exact value (eps64 = 2.2e-16, n < 1e5 here: < 2e-11 S; observed < 2e-15 S), so 1e-10 S passes the same
   formulas on any machine, and a formula that differs moves x by far more: one sample's ELBO weights off by 1e-6
   relative fail every such test, by 1e-9 coupled-GRPO's. This is the check of the code; the next two only bound
   the float32 rounding.
2. **each side's float32 rounding**: its float32 x is within n eps32 S of its float64 x, the standard worst-case bound
   for a sum of n terms x_i in any order, |fl(sum x_i) - sum x_i| <= gamma_(n-1) sum |x_i| <= n eps sum |x_i|
   (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., ch. 4; gamma_k = k u / (1 - k u), u = eps / 2),
   to first order in the terms' own rounding (each counted relative to its size).
3. hence the two float32 sides agree within the sum of their bounds, 2 n eps32 S.

The condition measure S (:func:`condition`, from the float64 values): the loss depends on T token log-probs l_t of
the policy (ddmrl's ``logps``) with coefficients c_t = d loss / d l_t, S = sum_t |c_t l_t| and n = T; a weight's
gradient is sum_t c_t dl_t / d theta_j, S_j = sum_t |c_t dl_t / d theta_j| and n = T (P + L) (each log-prob reaches
a weight through the P + L positions of its view's forward pass); per parameter tensor its max_j S_j (normwise: an
element whose sum cancels to 0 still carries its tensor's rounding). A loss of the old and reference log-probs too
counts them among the l_t (leaves with gradient, for :func:`condition` only).

A positive quantity computed in float32 two ways (a diagnostic's credit and its closed form), each from sums of
positive terms and products and quotients of them, n roundings on the way in all: each is within n eps32 of the
exact value relative to it (no cancellation: the bound of a sum of positive terms is relative to the sum itself), so
the two within :func:`rtol_positive` (first order). Used where the float64 rerun cannot take the same inputs (views
drawn in float32: float64 draws are other numbers).

Values of forward passes (logits, log-probs, ELBOs; two batchings, paddings, caches or codes of one network on the
same inputs): :func:`agree` with S the largest |value| in float64 (normwise, :func:`scale`; for a weighted sum of
log-probs sum_t |w_t| times the largest |log-prob|) and n the longest chain of float32 sums from the weights to a
value, :func:`forward_terms` (each matrix product's inner dimension, each attention's head and positions, the
log-softmax's vocabulary; plus the weighted sum's T). A normwise first-order bound, loose (the float32 sides observed
within 1.1 % of 2 n eps32 S); the float64 check, RTOL64 S, is what tells two formulas apart. The same inequality
with the observed float32 errors, |a - b| <= |a - a64| + |b - b64| + |a64 - b64|, holds for any a, b (the triangle
inequality) and so checks nothing by itself.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from types import SimpleNamespace
from typing import NamedTuple

import torch

EPS32 = torch.finfo(torch.float32).eps

#: float64 agreement of two computations of one quantity, relative to its condition measure S (check 1)
RTOL64 = 1e-10


class KeepsFloat64(torch.Tensor):
    """Logits whose ``.float()`` keeps float64: ``token_logps`` (and the transcriptions) cast the logits to float32
    before their log-softmax; a float64 model's logits of this class pass that cast unchanged, so that ddmrl's own
    code computes in float64."""

    def float(self, *args, **kwargs):
        return self if self.dtype == torch.float64 else super().float(*args, **kwargs)


class InFloat64(torch.nn.Module):
    """A float64 copy of ``model`` whose logits are :class:`KeepsFloat64`."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = copy.deepcopy(model).double()

    def forward(self, input_ids):
        return SimpleNamespace(logits=self.model(input_ids).logits.as_subclass(KeepsFloat64))


def in_float64(*models) -> list[InFloat64]:
    """:class:`InFloat64` copies of ``models``."""
    return [InFloat64(m) for m in models]


class Computed(NamedTuple):
    """One side's loss and its gradient with respect to the policy's parameters."""

    loss: torch.Tensor
    grads: tuple[torch.Tensor, ...]


def computed(loss: torch.Tensor, params) -> Computed:
    """``loss`` and its gradient, the graph kept (for :func:`condition`)."""
    return Computed(loss.detach(), torch.autograd.grad(loss, list(params), retain_graph=True))


@dataclass(frozen=True)
class Condition:
    """The condition measures S of a loss and of its gradient tensors, and the sizes n of their sums."""

    loss: float
    grads: tuple[float, ...]
    terms: int  # T
    positions: int  # P + L

    def __add__(self, other: Condition) -> Condition:
        """The measures of the sum of two losses (of the same parameters): at most the sums of theirs."""
        grads = tuple(a + b for a, b in zip(self.grads, other.grads, strict=True))
        return Condition(self.loss + other.loss, grads, self.terms + other.terms, self.positions)

    def of_loss(self) -> tuple[float, int]:
        return self.loss, self.terms

    def of_grads(self) -> list[tuple[float, int]]:
        return [(s, self.terms * self.positions) for s in self.grads]


def condition(loss: torch.Tensor, logps, params, positions: int) -> Condition:
    """The condition measures of ``loss``, a function of the token log-probs ``logps`` (a tensor or a list of them,
    in its graph), and of its gradient with respect to ``params`` (none: the loss's alone); ``positions``: P + L."""
    logps, params = [logps] if torch.is_tensor(logps) else list(logps), list(params)
    coefs = torch.autograd.grad(loss, logps, retain_graph=True, materialize_grads=True)  # 0 for the unused
    flat = torch.cat([x.flatten() for x in logps])
    coef = torch.cat([c.flatten() for c in coefs])
    terms = coef.nonzero().flatten().tolist()
    s_grads = [torch.zeros_like(p) for p in params]
    for t in terms if params else ():
        for s, g in zip(s_grads, torch.autograd.grad(flat[t], params, retain_graph=True), strict=True):
            s += (coef[t] * g).abs()
    s_loss = float((coef * flat.detach()).abs().sum())
    return Condition(s_loss, tuple(float(s.max()) for s in s_grads), len(terms), positions)


def forward_terms(model, positions: int) -> int:
    """The longest chain of float32 sums in a forward pass of ``model`` over ``positions`` positions: the inner
    dimensions of its weight matrices (every matrix product on the way counted, as if in series), per layer an
    attention's scores (at most the hidden size) and its sum over the positions, and the log-softmax's vocabulary."""
    cfg = getattr(model, "config", None) or model.model.config  # InFloat64 holds the model
    layers = getattr(cfg, "num_layers", None) or cfg.n_layers
    hidden = getattr(cfg, "hidden_size", None) or cfg.d_model
    inner = sum(p.shape[-1] for p in model.parameters() if p.dim() == 2)
    return inner + layers * (hidden + positions) + cfg.vocab_size


def scale(x64: torch.Tensor) -> float:
    """The normwise condition measure S of a forward pass's values: their largest magnitude (in float64)."""
    return float(x64.detach().abs().max())


def weighted_scale(weights: torch.Tensor, logps64: torch.Tensor, dims) -> float:
    """S of weighted sums sum_t w_t l_t (over ``dims``) of forward passes' log-probs: the largest sum_t |w_t| times
    the largest |l_t| (normwise, as :func:`scale`)."""
    return float(weights.detach().abs().sum(dims).max()) * scale(logps64)


def rtol_positive(roundings: int) -> float:
    """The relative tolerance between two float32 computations of one positive quantity, each with at most
    ``roundings`` roundings of positive values (the terms of its sums, its products and quotients): 2 n eps32."""
    return 2 * roundings * EPS32


def gap(x: torch.Tensor, y: torch.Tensor) -> float:
    """The largest difference of two tensors' elements."""
    return float((x.detach().double() - y.detach().double()).abs().max())


def agree(what: str, ours, theirs, s: float, n: int) -> None:
    """Checks 1-3 of the module docstring on one quantity: ``ours`` and ``theirs`` its (float32, float64) values on
    the two sides, ``s`` its condition measure, ``n`` the number of terms of its sum."""
    (a32, a64), (b32, b64) = ours, theirs
    bound = n * EPS32 * s
    assert gap(a64, b64) <= RTOL64 * s, f"{what}: in float64, {gap(a64, b64):.3g} off the reference (S {s:.3g})"
    assert gap(a32, a64) <= bound, f"{what}: ours in float32 {gap(a32, a64):.3g} off float64 (> {bound:.3g})"
    assert gap(b32, b64) <= bound, f"{what}: the reference's float32 {gap(b32, b64):.3g} off float64 (> {bound:.3g})"
    assert gap(a32, b32) <= 2 * bound, f"{what}: float32 {gap(a32, b32):.3g} off the reference (> {2 * bound:.3g})"


def forward_passes_agree(what: str, run, model, positions: int) -> None:
    """:func:`agree` on two forward computations of the same values, ``run(model) -> (ours, theirs)``, run on
    ``model`` and on a float64 copy of it (S: :func:`scale`, n: :func:`forward_terms`)."""
    (a32, b32), (a64, b64) = run(model), run(copy.deepcopy(model).double())
    agree(what, (a32, a64), (b32, b64), scale(a64), forward_terms(model, positions))


def loss_and_gradient_agree(
    ours32: Computed, theirs32: Computed, ours64: Computed, theirs64: Computed, cond: Condition
) -> None:
    """:func:`agree` on the loss and on every gradient tensor of two sides."""
    agree("the loss", (ours32.loss, ours64.loss), (theirs32.loss, theirs64.loss), *cond.of_loss())
    for i, (a32, b32, a64, b64, (s, n)) in enumerate(
        zip(ours32.grads, theirs32.grads, ours64.grads, theirs64.grads, cond.of_grads(), strict=True)
    ):
        agree(f"gradient {i} {tuple(a32.shape)}", (a32, a64), (b32, b64), s, n)
