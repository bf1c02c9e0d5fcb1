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
log-softmax's vocabulary; plus the weighted sum's T). The float64 copy (:func:`float64_copy`) runs under
:class:`Float64Kept`, so that no cast to float32 inside the released classes rounds it. A normwise first-order bound,
loose (the float32 sides observed within 1.1 % of 2 n eps32 S); the float64 check, RTOL64 S, is what tells two
formulas apart. The same inequality with the observed float32 errors, |a - b| <= |a - a64| + |b - b64| + |a64 - b64|,
holds for any a, b (the triangle inequality) and so checks nothing by itself.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import NamedTuple

import torch
from torch.overrides import TorchFunctionMode

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


def in_dtype(x, dtype: torch.dtype):
    """``x``'s (an ``ObjectiveInputs``) float tensors in ``dtype``, the current, old and reference log-probs fresh
    leaves with gradient."""
    x = x._replace(
        **{k: v.detach().to(dtype) for k, v in x._asdict().items() if torch.is_tensor(v) and v.is_floating_point()}
    )
    return x._replace(
        **{k: getattr(x, k).requires_grad_() for k in ("logps", "old", "ref") if getattr(x, k) is not None}
    )


def formulas_agree(what: str, fn, x, cfg, want, grad: bool = False, constant: float = 0.0) -> None:
    """An objective's loss ``fn(x, cfg).loss`` (``grad``: its gradient w.r.t. the current log-probs) against
    ``want(x)``, the same quantity by another formula, in float32 and float64 (:func:`in_dtype`), by :func:`agree`
    with S and n from :func:`condition`. ``constant``: the size of a term of the loss not of the log-probs (added to
    S, with 3 more roundings: its own, a product and a sum)."""
    values = []
    for dtype in (torch.float32, torch.float64):
        xd = in_dtype(x, dtype)
        loss = fn(xd, cfg).loss
        ours = torch.autograd.grad(loss, xd.logps, retain_graph=True)[0] if grad else loss
        values.append((ours.detach(), torch.as_tensor(want(xd)).detach(), loss, xd))
    (ours32, want32, _, _), (ours64, want64, loss64, x64) = values
    if grad:  # S_j = |c_j|: the log-probs' own gradient
        s, n = condition(loss64, x64.logps, [x64.logps], 1).of_grads()[0]
    else:
        s, n = condition(loss64, [v for v in (x64.logps, x64.old, x64.ref) if v is not None], [], 0).of_loss()
    agree(what, (ours32, ours64), (want32, want64), s + constant, n + (3 if constant else 0))


def forward_terms(model, positions: int) -> int:
    """The longest chain of float32 sums in a forward pass of ``model`` over ``positions`` positions: the inner
    dimensions of its weight matrices (every matrix product on the way counted, as if in series: a mixture of experts'
    every expert, its router and shared experts, an upper bound of the k experts a token is routed to and their sum),
    per layer an attention's scores (at most the hidden size) and its sum over the positions, and the log-softmax's
    vocabulary. The configs name these sizes differently (TinyDDM, LLaDA / MMaDA, the Hugging Face classes: Dream,
    SDAR, LLaDA 2.x); ``model`` a network or a wrapper of one (``.model``)."""
    cfg = getattr(model, "config", None) or model.model.config  # InFloat64 and the block models hold the network
    layers = _size(cfg, "num_layers", "n_layers", "num_hidden_layers")
    hidden = _size(cfg, "hidden_size", "d_model")
    inner = sum(p.shape[-1] for p in model.parameters() if p.dim() == 2)
    return inner + layers * (hidden + positions) + _size(cfg, "embedding_size", "vocab_size")


def _size(cfg, *names: str) -> int:
    """The first of ``names`` that ``cfg`` sets."""
    return next(getattr(cfg, n) for n in names if getattr(cfg, n, None) is not None)


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


def sums_to_one(total: torch.Tensor, vocabulary: int) -> None:
    """``total``: float32 sums of the probabilities exp(l_v) of a float32 log-softmax over ``vocabulary`` (V) logits.
    To first order each l_v is off by eps32 (|y_v| + |l_v| + V + sum_u p_u |y_u| + log S) (y = x - max x, S the sum
    of exp y; the exps' and sums' roundings, relative to the sum of positive terms), so the sum of the p_v by
    eps32 (2 V + 2 sum p |y| + sum p |l| + log S) <= eps32 (2 V + 4 H) <= eps32 (2 V + 4 log V), H the entropy."""
    bound, off = (2 * vocabulary + 4 * math.log(vocabulary)) * EPS32, gap(total, torch.ones_like(total))
    assert off <= bound, f"the probabilities sum to 1 within {off:.3g} (> {bound:.3g})"


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


class Float64Kept(TorchFunctionMode):
    """Within it every torch function asked for float32 gives float64 (``Tensor.float``, ``dtype=torch.float32`` of
    a cast, a factory or a softmax), and the default dtype is float64, so that a float64 copy of a model computes in
    float64 throughout: the released classes compute their RMSNorms, rotary tables, routers and eager attention's
    softmax in float32, ddmrl's log-softmax and several adapters cast the logits with ``.float()``, transcriptions
    fill ``torch.zeros`` of the default dtype."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        func = torch.Tensor.double if func is torch.Tensor.float else func
        args, kwargs = [_f64(a) for a in args], {k: _f64(v) for k, v in (kwargs or {}).items()}
        return func(*args, **kwargs)

    def __enter__(self):
        self.default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        return super().__enter__()

    def __exit__(self, *exc):
        torch.set_default_dtype(self.default)
        return super().__exit__(*exc)


def _f64(arg):
    return torch.float64 if arg is torch.float32 else arg


def float64_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of ``model``, float32 tensors cached outside its parameters and buffers dropped (LLaDA's rotary
    tables, a ``dict`` on its modules, warmed up in float32 when it is built): recomputed in its first pass, in
    float64 under :class:`Float64Kept`."""
    model = copy.deepcopy(model).double()
    for module in model.modules():
        for cache in vars(module).values():
            if isinstance(cache, dict) and any(
                torch.is_tensor(t) and t.dtype == torch.float32 for t in cache.values()
            ):
                cache.clear()
    return model


def rebatched_agree(what: str, a: torch.Tensor, b: torch.Tensor, model, positions: int) -> None:
    """Two float32 computations of one forward pass's values (log-probs) on the same inputs in other batches: the
    GEMM kernels block a product's rows by its size (OpenBLAS's edge kernels add in another order than its main
    one), so a row's value depends on the batch in its last bits. Within 2 n eps32 S (check 3 of :func:`agree`, S
    the values' largest magnitude, n :func:`forward_terms`): no float64 side, the two are one formula."""
    bound = 2 * forward_terms(model, positions) * EPS32 * scale(a)
    assert gap(a, b) <= bound, f"{what}: {gap(a, b):.3g} apart (> {bound:.3g})"


def forward_passes_agree(what: str, run, model, positions: int, gain: float = 0.0) -> None:
    """:func:`agree` on two forward computations of the same values, ``run(model) -> (ours, theirs[, logits])``, run
    on ``model`` and on a float64 copy of it (:class:`Float64Kept`; S: :func:`scale`, n: :func:`forward_terms`).
    With ``gain``, values computed from ``logits`` whose error they amplify ``gain`` times add ``gain`` times the
    logits' scale to S: classifier-free guidance's log-probs, log_softmax(u + (w + 1)(c - u)), 2 (2 w + 1) (the
    guided logits carry |w + 1| + |w| times the logits' error, a log-softmax twice its inputs')."""
    a32, b32, *_ = run(model)
    with Float64Kept():
        a64, b64, *logits64 = run(float64_copy(model))
    s = scale(a64) + (gain * scale(logits64[0]) if gain else 0.0)
    agree(what, (a32, a64), (b32, b64), s, forward_terms(model, positions))


def loss_and_gradient_agree(
    ours32: Computed, theirs32: Computed, ours64: Computed, theirs64: Computed, cond: Condition
) -> None:
    """:func:`agree` on the loss and on every gradient tensor of two sides."""
    agree("the loss", (ours32.loss, ours64.loss), (theirs32.loss, theirs64.loss), *cond.of_loss())
    for i, (a32, b32, a64, b64, (s, n)) in enumerate(
        zip(ours32.grads, theirs32.grads, ours64.grads, theirs64.grads, cond.of_grads(), strict=True)
    ):
        agree(f"gradient {i} {tuple(a32.shape)}", (a32, a64), (b32, b64), s, n)
