"""GDPO's Gauss-Legendre ELBO estimator against the exact ELBO, by enumeration of every mask pattern
(GDPO, Rojas et al. 2026; ddmrl.masking.views.gdpo_quadrature, weighting ``gdpo_elbo``, likelihood.sequence_elbo).

Setting: vocabulary V = 4 with the mask id 0, a one-token prompt, a completion x of length L, and a stub model
whose conditional log-probabilities depend on which positions are masked through a known formula

    logits(k, v | M) = B[k, v] + sum_{j in M} C[k, j, v]        (M = the masked positions of the input).

Let S(M) = sum_{k in M} log p(x_k | x with M masked). The masked-diffusion ELBO is

    ELBO = int_0^1 (1/t) E_{M ~ Bernoulli(t)^L} [S(M)] dt = int_0^1 (1/t) sum_M t^|M| (1 - t)^(L - |M|) S(M) dt.

S(empty) = 0, so every term has |M| >= 1 and the integrand f(t) = sum_M t^(|M|-1) (1-t)^(L-|M|) S(M) is a
polynomial of degree L - 1. Integrating term by term with the Beta integral
int_0^1 t^(m-1) (1-t)^(L-m) dt = (m-1)! (L-m)! / L! gives the exact value

    ELBO = sum_M S(M) (|M|-1)! (L-|M|)! / L!.

GDPO's estimator with n nodes t_i and weights q_i draws one mask M_i ~ Bernoulli(t_i)^L per node and returns
sum_i (q_i / t_i) S(M_i); its expectation is sum_i q_i f(t_i), the n-point Gauss-Legendre rule applied to f,
which is exact whenever deg f = L - 1 <= 2n - 1. So: L = 3 with n = 2 or 3 and L = 4 with n = 2 are exact,
L = 3 with n = 1 and L = 5 with n = 2 are not (degree too high), which shows the test can fail.
"""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ddmrl.likelihood import sequence_elbo, token_logps
from ddmrl.masking.views import Views, apply_view, build_views, gauss_legendre
from ddmrl.objectives.weights import token_weights

MASK, VOCAB, PROMPT = 0, 4, 2
MAX_T = 6  # prompt + longest completion


class MaskAware(torch.nn.Module):
    """logits[n, k, v] = B[k, v] + sum_j C[k, j, v] * 1[input[n, j] == MASK] (float64)."""

    def __init__(self, seed: int = 2, scale: float = 1.5) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.b = torch.randn(MAX_T, VOCAB, generator=g, dtype=torch.float64)
        self.c = scale * torch.randn(MAX_T, MAX_T, VOCAB, generator=g, dtype=torch.float64)

    def forward(self, input_ids: torch.Tensor) -> SimpleNamespace:
        t = input_ids.shape[1]
        m = (input_ids == MASK).double()  # [N, T]
        return SimpleNamespace(logits=self.b[:t] + torch.einsum("nj,kjv->nkv", m, self.c[:t, :t]))


def completion(length: int) -> torch.Tensor:
    return torch.tensor([[1, 3, 2, 3, 1][:length]])


def score(model, masked: tuple[int, ...], x: torch.Tensor) -> float:
    """S(M) in float64: sum over k in M of log p(x_k | prompt, x with M masked)."""
    ids = torch.cat([torch.tensor([[PROMPT]]), x], 1).clone()
    for k in masked:
        ids[0, 1 + k] = MASK
    logp = torch.log_softmax(model(ids).logits.double()[0, 1:], -1)  # [L, V]
    return sum(logp[k, x[0, k]].item() for k in masked)


def exact_elbo(model, x: torch.Tensor) -> float:
    """sum_M S(M) (|M|-1)! (L-|M|)! / L! (module docstring)."""
    length = x.shape[1]
    total = 0.0
    for m in range(1, length + 1):
        beta = math.factorial(m - 1) * math.factorial(length - m) / math.factorial(length)
        total += beta * sum(score(model, mask, x) for mask in itertools.combinations(range(length), m))
    return total


def integrand(model, x: torch.Tensor, t: float) -> float:
    """f(t) = (1/t) E_M[S(M)] by enumeration (for the numerical cross-check of the Beta-integral formula)."""
    length = x.shape[1]
    return sum(
        t ** (len(m) - 1) * (1 - t) ** (length - len(m)) * score(model, m, x)
        for r in range(1, length + 1)
        for m in itertools.combinations(range(length), r)
    )


def gdpo_expectation(model, x: torch.Tensor, n: int) -> float:
    """E[GDPO estimator] by enumeration: every combination (M_1, ..., M_n) of one mask per node is a row of one
    hand-made ``Views`` (2^(L n) rows) whose ``t`` holds the nodes; the library computes the per-row estimate
    sequence_elbo(token_logps, token_weights('gdpo_elbo')); rows are weighted by prod_i t_i^|M_i| (1-t_i)^(L-|M_i|)."""
    length = x.shape[1]
    nodes, _ = gauss_legendre(n)
    patterns = list(itertools.product([False, True], repeat=length))
    combos = list(itertools.product(patterns, repeat=n))  # one pattern per node
    rows = len(combos)
    masks = torch.tensor(combos, dtype=torch.bool).permute(1, 0, 2)  # [n, rows, L]
    views = Views(masks, torch.zeros(n, rows, 1, dtype=torch.bool), nodes[:, None].expand(n, rows).clone(), 0)
    valid = torch.ones(rows, length, dtype=torch.bool)
    weights, z = token_weights("gdpo_elbo", views, valid)
    assert z is None
    prompt, comp = torch.full((rows, 1), PROMPT), x.expand(rows, length)
    logps = torch.stack([token_logps(model, apply_view(prompt, comp, views, j, MASK), comp) for j in range(n)])
    est = sequence_elbo(logps, weights).double()  # [rows]
    t = nodes.double()[:, None]  # [n, 1]
    k = masks.sum(-1).double()  # [n, rows]
    prob = (t**k * (1 - t) ** (length - k)).prod(0)  # [rows]
    assert prob.sum().item() == pytest.approx(1.0, abs=1e-9)
    return (prob * est).sum().item()


def test_exact_elbo_formula_matches_numerical_integration():
    """The Beta-integral closed form equals a 10-point Gauss-Legendre integral of f (float64; exact for deg 3)."""
    model, x = MaskAware(), completion(4)
    xs, ws = np.polynomial.legendre.leggauss(10)
    numeric = sum(w / 2 * integrand(model, x, (s + 1) / 2) for s, w in zip(xs, ws, strict=True))
    assert exact_elbo(model, x) == pytest.approx(numeric, abs=1e-10)


@pytest.mark.parametrize(("length", "n"), [(3, 2), (3, 3), (4, 2)])
def test_gdpo_estimator_is_unbiased_when_quadrature_is_exact(length, n):
    """deg f = L - 1 <= 2n - 1: E[GDPO] = sum_i q_i f(t_i) = int f = ELBO exactly (float32 log-probs: 1e-6)."""
    model, x = MaskAware(), completion(length)
    assert gdpo_expectation(model, x, n) == pytest.approx(exact_elbo(model, x), abs=1e-6)


@pytest.mark.parametrize(("length", "n"), [(3, 1), (5, 2)])
def test_gdpo_estimator_is_biased_beyond_the_quadrature_degree(length, n):
    """deg f = L - 1 > 2n - 1: the rule is not exact for this mask-dependent model (the test above can fail)."""
    model, x = MaskAware(), completion(length)
    assert abs(gdpo_expectation(model, x, n) - exact_elbo(model, x)) > 1e-3


def test_gdpo_monte_carlo_from_real_views_matches_the_exact_elbo():
    """Real ``build_views('gdpo_quadrature')`` draws (seed 0, 2 nodes) for 50000 copies of the same completion of
    length 3: the mean estimate lies within 4 standard errors of the exact ELBO (about -12.2). The per-row standard
    deviation is about 9 (weights q/t up to 2.4), so SE is about 0.04; SE < 0.1 keeps the check meaningful
    (tolerance < 0.4, i.e. < 3.5% of the ELBO)."""
    model, x = MaskAware(), completion(3)
    n_rows, length = 50000, 3
    cm = torch.ones(n_rows, length, dtype=torch.bool)
    prompt, comp = torch.full((n_rows, 1), PROMPT), x.expand(n_rows, length)
    views = build_views(
        "gdpo_quadrature", mu=2, seed=0, completion_mask=cm, prompt_ids=prompt, pad_id=1, views_per_step=2
    )
    weights, _ = token_weights("gdpo_elbo", views, cm)
    logps = torch.stack([token_logps(model, apply_view(prompt, comp, views, j, MASK), comp) for j in range(2)])
    est = sequence_elbo(logps, weights).double()
    mean, se = est.mean().item(), (est.std() / math.sqrt(n_rows)).item()
    exact = exact_elbo(model, x)
    assert se < 0.1
    assert abs(mean - exact) < 4 * se, (mean, exact, se)


@pytest.mark.parametrize("n", [1, 2])
def test_product_model_elbo_is_the_log_likelihood(fixed_logits_model, n):
    """Input-independent conditionals p_k: S(M) = sum_{k in M} log p_k(x_k), so
    f(t) = (1/t) sum_k P(k in M) log p_k(x_k) = sum_k log p_k(x_k), a constant: the ELBO equals the exact
    log-likelihood, and any n-point rule (even n = 1) is exact."""
    g = torch.Generator().manual_seed(3)
    table = torch.randn(4, VOCAB, generator=g)  # [prompt + L = 4, V]
    model, x = fixed_logits_model(table), completion(3)
    logp = torch.log_softmax(table.double()[1:], -1)
    loglik = sum(logp[k, x[0, k]].item() for k in range(3))
    assert exact_elbo(model, x) == pytest.approx(loglik, abs=1e-6)
    assert gdpo_expectation(model, x, n) == pytest.approx(loglik, abs=1e-5)
