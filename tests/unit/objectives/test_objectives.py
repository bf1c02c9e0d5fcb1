"""The policy objectives, one module each: token_clip, sequence_clip (GDPO, Rojas et al. 2026), spg (SPG, Wang
et al. 2026) and weighted_likelihood (wd1, Tang et al. 2026), and their registry.

Every test builds ``ObjectiveInputs`` by hand on tiny tensors; gradients are taken with autograd w.r.t. ``logps``.
"""

from __future__ import annotations

import math

import pytest
import torch
from float_error import agree, formulas_agree, in_dtype

from ddmrl.config import GRPOConfig
from ddmrl.likelihood import sequence_elbo
from ddmrl.methods.spg import Params as SPGParams
from ddmrl.objectives import OBJECTIVES
from ddmrl.objectives.base import ObjectiveInputs
from ddmrl.objectives.coupled_clip import coupled_clip
from ddmrl.objectives.dipo import dipo
from ddmrl.objectives.ebpo import ebpo_clip
from ddmrl.objectives.espo import espo_clip
from ddmrl.objectives.gdsd import gdsd
from ddmrl.objectives.mdpo import mdpo
from ddmrl.objectives.policy_loss import aggregate, clipped_token_loss
from ddmrl.objectives.rldf import rldf
from ddmrl.objectives.sequence_clip import sequence_clip
from ddmrl.objectives.spg import spg
from ddmrl.objectives.token_clip import token_clip
from ddmrl.objectives.tree_clip import tree_clip
from ddmrl.objectives.valid_token_clip import valid_token_clip
from ddmrl.objectives.value import value_clip
from ddmrl.objectives.vrpo import vrpo
from ddmrl.objectives.weighted_likelihood import weighted_likelihood


def make(
    logps: torch.Tensor,
    old: torch.Tensor | None = None,
    ref: torch.Tensor | None = None,
    adv: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    t: torch.Tensor | None = None,
    targets: torch.Tensor | None = None,
    cm: torch.Tensor | None = None,
    g: int = 2,
) -> ObjectiveInputs:
    v, n, length = logps.shape
    targets = torch.ones(v, n, length, dtype=torch.bool) if targets is None else targets
    return ObjectiveInputs(
        logps=logps,
        old=logps.detach().clone() if old is None else old,
        ref=ref,
        advantages=torch.ones(n) if adv is None else adv,
        weights=targets.float() if weights is None else weights,
        z=z,
        t=targets.float().mean(-1) if t is None else t,
        targets=targets,
        completion_mask=torch.ones(n, length, dtype=torch.bool) if cm is None else cm,
        num_generations=g,
    )


def rand(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def grad_of(fn, x: ObjectiveInputs, cfg: GRPOConfig) -> tuple[torch.Tensor, torch.Tensor]:
    logps = x.logps.detach().clone().requires_grad_(True)
    out = fn(x._replace(logps=logps), cfg)
    (grad,) = torch.autograd.grad(out.loss, logps)
    return out.loss.detach(), grad


# Two float32 computations of one quantity by different formulas (the objective, and its definition restated or a
# closed form of float32 inputs that are not all exactly representable, like 0.7 or |y_i| / sum |y|) differ by
# rounding that depends on the CPU's kernels. Tolerances from float32's error (tests/float_error.py): both also run
# on the inputs cast to float64 (their float32 values, exactly) and agree there to 1e-10 of the condition measure
# S = sum_t |c_t l_t| over the T log-probs l_t (current, old, reference; c_t = d loss / d l_t), the check of the
# formulas; in float32 each is within T eps32 S of its float64 value and the two within 2 T eps32 S. A gradient
# w.r.t. the current log-probs the same way, S = max_t |c_t| (normwise) and n = T (float_error.formulas_agree).


def test_registry_names_the_objectives():
    assert OBJECTIVES == {
        "token_clip": token_clip,
        "sequence_clip": sequence_clip,
        "spg": spg,
        "weighted_likelihood": weighted_likelihood,
        "mdpo": mdpo,
        "coupled_clip": coupled_clip,
        "valid_token_clip": valid_token_clip,
        "vrpo": vrpo,
        "espo_clip": espo_clip,
        "ebpo_clip": ebpo_clip,
        "tree_clip": tree_clip,
        "dipo": dipo,
        "gdsd": gdsd,
        "rldf": rldf,
        "value_clip": value_clip,
    }  # BGPO's is its own module's, named by where it lives (tests/unit/test_methods.py)


# ------------------------------------------------------------------------------------------- token_clip


@pytest.mark.parametrize(("loss_type", "use_z"), [("token_mean", False), ("seq_mean", False), ("token_mean", True)])
def test_token_clip_on_one_view_is_the_aggregated_clipped_token_loss(loss_type, use_z):
    """V = 1: token_clip = aggregate(clipped_token_loss(logps, old, ref, A, eps, beta).loss, omega, loss_type, Z),
    with the KL and clip diagnostics the token_mean aggregates of tl.kl and tl.clipped. Log-ratios of size 0.5
    make some tokens clip at eps = 0.2."""
    n, length = 4, 5
    old = rand(1, n, length, seed=1) - 1
    logps = old + rand(1, n, length, seed=2, scale=0.5)
    ref = old + rand(1, n, length, seed=3, scale=0.3)
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5])
    w = (rand(1, n, length, seed=4) > 0).float()
    w[:, :, 0] = 1.0  # every row has a weighted token
    z = torch.tensor([2.0, 3.0, 1.5, 4.0]) if use_z else None
    cfg = GRPOConfig(epsilon=0.2, beta=0.04, loss_type=loss_type)
    x = make(logps, old, ref, adv, weights=w, z=z)
    out = token_clip(x, cfg)
    tl = clipped_token_loss(logps[0], old[0], ref[0], adv, 0.2, 0.04)

    def want(x):
        tl = clipped_token_loss(x.logps[0], x.old[0], x.ref[0], x.advantages, 0.2, 0.04)
        return aggregate(tl.loss, x.weights[0], loss_type, x.z)

    formulas_agree("the loss", token_clip, x, cfg, want)
    # the diagnostics: token_clip's own code (clipped_token_loss, aggregate) on the same inputs, bit for bit
    assert out.terms["kl"] == aggregate(tl.kl, w[0], "token_mean").item()
    assert out.terms["clip_ratio"] == aggregate(tl.clipped, w[0], "token_mean").item()
    assert 0 < out.terms["clip_ratio"] < 1 and out.terms["kl"] > 0  # both diagnostics are exercised


def test_token_clip_averages_the_views_of_a_step():
    """V = 2 (SPG-like steps): the loss is the mean of the two per-view aggregates."""
    old = rand(2, 3, 4, seed=5)
    logps = old + rand(2, 3, 4, seed=6, scale=0.3)
    adv = torch.tensor([1.0, -1.0, 0.5])
    w = torch.ones(2, 3, 4)
    w[1, :, :2] = 0
    cfg = GRPOConfig(epsilon=0.2, beta=0.0)
    out = token_clip(make(logps, old, None, adv, weights=w), cfg)
    per_view = [aggregate(clipped_token_loss(logps[v], old[v], None, adv, 0.2, 0.0).loss, w[v]) for v in range(2)]
    # the same per-view aggregates; the mean of two, (a + b) / 2 (one rounding, then an exact halving), bit for bit
    assert out.loss.item() == ((per_view[0] + per_view[1]) / 2).item()
    assert out.terms["kl"] == 0.0


# --------------------------------------------------------------------------------------- sequence_clip


def test_sequence_elbo_is_the_weighted_sum_over_views_and_tokens():
    logps = torch.arange(12, dtype=torch.float32).view(2, 2, 3)
    w = torch.tensor([[[1.0, 0, 0], [0, 2, 0]], [[0, 0, 3], [1, 1, 1]]])
    # row 0: 1*0 + 3*8 = 24; row 1: 2*4 + (9 + 10 + 11) = 38
    assert sequence_elbo(logps, w).tolist() == [24.0, 38.0]


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_sequence_clip_at_ratio_one_is_minus_mean_length_normalised_advantage(beta):
    """logps == old: ELBO_theta = ELBO_old, r = 1, psi = A; ref = old makes k3 KL = 0, so
    loss = -mean_i(A_i / |y_i|). Lengths 3 and 1 (row 1 has two post-EOS positions): -(1.5/3 + (-2)/1)/2 = 0.75.
    Gradient: dL/dlogp_v(i,k) = -A_i omega_v(i,k) / (|y_i| N) (r = 1 unclipped; the KL gradient vanishes at 0)."""
    logps = rand(2, 2, 3, seed=7) - 1
    cm = torch.tensor([[True, True, True], [True, False, False]])
    w = cm[None].float().expand(2, 2, 3) * torch.tensor([0.7, 0.3])[:, None, None]
    adv = torch.tensor([1.5, -2.0])
    x = make(logps, logps.clone(), logps.clone(), adv, weights=w, cm=cm)
    cfg = GRPOConfig(epsilon=0.2, beta=beta)
    out = sequence_clip(x, cfg)
    # exact: old and ref are copies of logps, so the ELBO differences and the k3 KL are 0 and r = e^0 = 1 exactly;
    # -(1.5 / 3 + (-2) / 1) / 2 = 0.75 has exactly representable steps
    assert out.loss.item() == 0.75
    assert out.terms == {"kl": 0.0, "clip_ratio": 0.0}
    ys = cm.sum(1)[None, :, None]
    want = lambda x: -x.advantages[None, :, None] * x.weights / (ys * 2)  # noqa: E731
    formulas_agree("the gradient", sequence_clip, x, cfg, want, grad=True)


def test_sequence_clip_hand_example_engages_the_clip():
    """eps = 0.2, one view, weights 1 on valid tokens. Row 0 (length 2, A = +2): ELBO - ELBO_old = log 1.5, r = 1.5,
    psi = min(3.0, 1.2 * 2) = 2.4, /2 = 1.2. Row 1 (length 1, A = -1): r = 0.5, psi = min(-0.5, 0.8 * -1) = -0.8.
    loss = -(1.2 - 0.8) / 2 = -0.2; both rows clipped (clip_ratio 1); clipped terms carry no gradient."""
    old = torch.tensor([[[-1.0, -2.0], [-0.5, -3.0]]])
    logps = old + torch.tensor([[[math.log(1.5), 0.0], [math.log(0.5), 7.0]]])  # row 1 position 1 is post-EOS
    cm = torch.tensor([[True, True], [True, False]])
    x = make(logps, old, None, torch.tensor([2.0, -1.0]), weights=cm[None].float(), cm=cm)
    cfg = GRPOConfig(epsilon=0.2, beta=0.0)
    out = sequence_clip(x, cfg)
    # every term clipped: the loss is of the constants alone, -((1 + eps) 2 / 2 + (1 - eps)(-1) / 1) / 2, not of the
    # log-probs (formulas_agree's S would be 0). Tolerance from float32's error (tests/float_error.py): in float64 it
    # is -0.2 to 1e-10 S, S = (2.4 / 2 + 0.8 / 1) / 2 = 1 the sum of its terms' sizes, and in float32 within n eps32 S
    # of that, n = 5 roundings (1 +- eps, the products, the quotients, the sum, the mean)
    out64 = sequence_clip(in_dtype(x, torch.float64), cfg)
    agree("the loss", (out.loss, out64.loss), (torch.tensor(-0.2), torch.tensor(-0.2, dtype=torch.float64)), 1.0, 5)
    assert out.terms["clip_ratio"] == 1.0
    _, grad = grad_of(sequence_clip, x, cfg)
    assert torch.equal(grad, torch.zeros_like(grad))


def test_sequence_clip_inside_the_trust_region_has_the_ratio_gradient():
    """r = 1.1 < 1 + eps with A = 1: loss = -r/|y| / N, dL/dlogp(k) = -r omega(k) / (|y| N) = -1.1/2/1."""
    old = torch.tensor([[[-1.0, -2.0]]])
    logps = old + torch.tensor([[[math.log(1.1), 0.0]]])
    x = make(logps, old, None, torch.tensor([1.0]), weights=torch.ones(1, 1, 2))
    cfg = GRPOConfig(epsilon=0.2, beta=0.0)
    # r = 1.1 of the float32 log-probs: the closed form of the inputs as they are, r = e^(sum (logps - old))
    ratio = lambda x: (x.logps - x.old).sum().exp()  # noqa: E731
    formulas_agree("the loss", sequence_clip, x, cfg, lambda x: -ratio(x) / 2)
    formulas_agree("the gradient", sequence_clip, x, cfg, lambda x: (-ratio(x) / 2).expand(1, 1, 2), grad=True)


def test_sequence_clip_zero_advantage_and_no_kl_gives_zero_gradient():
    """A = 0, beta = 0: psi = 0 whatever r, so the gradient is exactly 0; with beta > 0 and ref != theta the k3 KL
    alone gives a nonzero gradient (the assertion is not vacuous)."""
    old = rand(2, 3, 4, seed=8) - 1
    logps = old + rand(2, 3, 4, seed=9, scale=0.4)
    ref = old + rand(2, 3, 4, seed=10, scale=0.4)
    x = make(logps, old, ref, torch.zeros(3), weights=torch.full((2, 3, 4), 0.5))
    _, grad = grad_of(sequence_clip, x, GRPOConfig(beta=0.0))
    assert torch.equal(grad, torch.zeros_like(grad))
    _, grad_kl = grad_of(sequence_clip, x, GRPOConfig(beta=0.1))
    assert grad_kl.abs().sum().item() > 1e-4


# ------------------------------------------------------------------------------------------------- spg


def spg_case(adv: torch.Tensor):
    """V = 2 views, N = 3, L = 4, hand targets (row 2 has one post-EOS position, never a target)."""
    targets = torch.tensor(
        [
            [[1, 1, 0, 0], [0, 1, 1, 1], [1, 0, 1, 0]],
            [[1, 1, 1, 1], [0, 0, 0, 1], [0, 1, 1, 0]],
        ],
        dtype=torch.bool,
    )
    cm = torch.tensor([[True] * 4, [True] * 4, [True, True, True, False]])
    logps = rand(2, 3, 4, seed=11, scale=0.5) - 1.5
    t = targets.float().sum(-1) / cm.sum(1).float()  # realised ratios
    return make(logps, None, None, adv, t=t, targets=targets, cm=cm), targets, cm, t


def spg_elbo_gradient(x: ObjectiveInputs) -> torch.Tensor:
    """dL/dlogp_v(i, k) through the ELBO proxy: -A_i |y_i| / (sum |y| V |T_v,i|) on targets, 0 elsewhere."""
    dtype = x.logps.dtype
    lengths = x.completion_mask.sum(1).to(dtype)
    share = (lengths / lengths.sum())[None, :, None]  # |y_i| / sum |y|, in x's dtype
    targets = x.targets.to(dtype)
    return -x.advantages[None, :, None] * share * targets / (x.logps.shape[0] * targets.sum(-1, keepdim=True))


def test_spg_positive_advantage_flows_only_through_the_elbo_proxy():
    """A_i > 0: proxy_i = ELBO_i = (1/V) sum_v (1/|T_v,i|) sum_{k in T_v,i} logp_v(i, k);
    loss = -sum_i |y_i| A_i proxy_i / sum_i |y_i| (length-weighted, lengths 4, 4, 3), so
    dL/dlogp_v(i, k) = -A_i |y_i| / (sum |y| V |T_v,i|) on targets and 0 elsewhere; eubo_beta and eubo_mix do not
    matter."""
    adv = torch.tensor([1.0, 2.0, 0.5])
    x, targets, cm, _ = spg_case(adv)
    for beta, mix in [(1.0, 0.5), (2.0, 1.0), (1.5, 0.0)]:
        cfg = SPGParams(beta=0.0, eubo_beta=beta, eubo_mix=mix)
        formulas_agree(f"the gradient {beta, mix}", spg, x, cfg, spg_elbo_gradient, grad=True)


def test_spg_negative_advantage_with_mix_one_flows_only_through_the_eubo_proxy():
    """A_i < 0, eubo_mix = 1: proxy_i = EUBO_i = (1/(beta |S_i|)) sum_{k in S_i} log((1/V) sum_v e^{beta l_v(k)}
    delta_v(k) / t_v), S_i the valid tokens that are a target somewhere. Then
    dEUBO_i/dl_v(k) = (1/|S_i|) pi_v(k),  pi_v(k) = e_v(k) / sum_u e_u(k),  e_v(k) = e^{beta l_v(k)} delta_v(k) / t_v,
    and dL/dl_v(i, k) = -A_i (|y_i| / sum |y|) dEUBO_i/dl_v(k). With mix = 0.5 the gradient is half this plus half
    the ELBO one."""
    adv = torch.tensor([-1.0, -2.0, -0.5])
    x, targets, cm, _ = spg_case(adv)
    beta = 1.5

    def want_eubo(x):
        e = torch.exp(beta * x.logps) * x.targets / x.t[..., None]  # [V, N, L]
        pi = torch.where(e.sum(0, keepdim=True) > 0, e / e.sum(0, keepdim=True).clamp_min(1e-30), 0.0)
        seen = (x.targets.any(0) & cm).to(e.dtype)
        d_eubo = pi * seen[None] / seen.sum(-1)[None, :, None]
        lengths = cm.sum(1).to(e.dtype)
        share = (lengths / lengths.sum())[None, :, None]  # |y_i| / sum |y|, in x's dtype
        return -x.advantages[None, :, None] * share * d_eubo

    def cfg(mix):
        return SPGParams(beta=0.0, eubo_beta=beta, eubo_mix=mix)

    formulas_agree("the EUBO gradient", spg, x, cfg(1.0), want_eubo, grad=True)
    mixed = lambda x: 0.5 * want_eubo(x) + 0.5 * spg_elbo_gradient(x)  # noqa: E731
    formulas_agree("the mixed gradient", spg, x, cfg(0.5), mixed, grad=True)
    formulas_agree("the ELBO gradient", spg, x, cfg(0.0), spg_elbo_gradient, grad=True)


def test_spg_loss_weights_sequences_by_completion_length():
    """SPG's trainer (spg_trainer.py compute_loss, Wang et al. 2026: the loss is weighted by completion length):
    loss = sum_i |y_i| (-A_i proxy_i) / sum_i |y_i|, |y_i| the valid completion tokens (up to and including EOS),
    not the plain mean over rollouts. One view masking everything (ELBO = mean log-prob), A = (+1, +1), row 0 of
    length 4 with mean log-prob -1, row 1 of length 1 with log-prob -3: loss = (4 * 1 + 1 * 3) / 5 = 1.4 (the plain
    mean would give 2.0)."""
    logps = torch.tensor([[[-1.0, -1.0, -1.0, -1.0], [-3.0, -0.5, -0.5, -0.5]]])
    cm = torch.tensor([[True] * 4, [True, False, False, False]])
    targets = cm[None].clone()
    x = make(logps, adv=torch.tensor([1.0, 1.0]), t=torch.ones(1, 2), targets=targets, cm=cm)
    # exact inputs, but 7 / 5 is not a float: its float32 rounding (formulas_agree, tests/float_error.py)
    formulas_agree("the loss", spg, x, SPGParams(beta=0.0), lambda x: torch.tensor(1.4, dtype=x.logps.dtype))


def proxies(logps: torch.Tensor, targets: torch.Tensor, t: torch.Tensor, beta: float) -> tuple[float, float]:
    """(ELBO proxy, EUBO proxy) of a single rollout, read off the loss: with N = 1 and A = +1 the loss is
    -ELBO; with A = -1 and mix = 1 it is +EUBO."""
    cm = torch.ones(1, logps.shape[-1], dtype=torch.bool)
    pos = spg(make(logps, adv=torch.tensor([1.0]), t=t, targets=targets, cm=cm), SPGParams(beta=0.0, eubo_beta=beta))
    neg = spg(
        make(logps, adv=torch.tensor([-1.0]), t=t, targets=targets, cm=cm),
        SPGParams(beta=0.0, eubo_beta=beta, eubo_mix=1.0),
    )
    return -pos.loss.item(), neg.loss.item()


@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0])
def test_spg_sandwich_single_view_eubo_above_elbo(beta):
    """Single view (V = 1), targets T, realised ratio t = |T| / L <= 1:
    EUBO = (1/(beta |T|)) sum_{k in T} log(e^{beta l(k)} / t) = (1/|T|) sum_{k in T} l(k) - log(t) / beta
         = ELBO - log(t) / beta >= ELBO,
    equality iff t = 1 (every token masked). Hand case: L = 4, T = {0, 2}, t = 1/2."""
    logps = torch.tensor([[[-0.3, -2.0, -1.1, -0.7]]])
    targets = torch.tensor([[[True, False, True, False]]])
    elbo, eubo = proxies(logps, targets, torch.tensor([[0.5]]), beta)
    assert eubo > elbo
    # the closed forms of the float32 log-probs (-0.3, -1.1 are not floats): tolerances from float32's error
    # (formulas_agree, tests/float_error.py); the loss is -ELBO with A = +1, +EUBO with A = -1 and mix 1, and with
    # every token masked (t = 1) the sandwich closes, EUBO = ELBO
    cm = torch.ones(1, 4, dtype=torch.bool)
    for t, tg in ((0.5, targets), (1.0, torch.ones(1, 1, 4, dtype=torch.bool))):
        for adv, mix in ((1.0, 0.0), (-1.0, 1.0)):

            def want(x, tg=tg, sign=-adv, mix=mix):  # -ELBO; EUBO = ELBO - log(t) / beta (ELBO: the targets' mean)
                return sign * x.logps[tg].mean() - (x.t.log()[0, 0] / beta if mix else 0.0)

            x = make(logps, adv=torch.tensor([adv]), t=torch.tensor([[t]]), targets=tg, cm=cm)
            cfg = SPGParams(beta=0.0, eubo_beta=beta, eubo_mix=mix)
            constant = abs(math.log(t) / beta) if mix else 0.0  # not of the log-probs: its size and roundings
            formulas_agree(f"the {'EUBO' if mix else 'ELBO'} at t = {t}", spg, x, cfg, want, constant=constant)


def test_spg_has_no_kl_and_zero_advantage_gives_zero_gradient():
    x, _, _, _ = spg_case(torch.zeros(3))
    out = spg(x, SPGParams(beta=0.0))
    assert out.terms == {}  # no KL and no clipping: no such terms on its curve
    _, grad = grad_of(spg, x, SPGParams(beta=0.0))
    assert torch.equal(grad, torch.zeros_like(grad))


# ---------------------------------------------------------------------------------------- weighted_likelihood


def wd1_case(adv: torch.Tensor, g: int):
    n = adv.shape[0]
    logps = rand(2, n, 3, seed=12) - 1
    cm = torch.ones(n, 3, dtype=torch.bool)
    cm[0, 2] = False
    w = cm[None].float().expand(2, n, 3).clone()  # completion_mean weights, 2 views
    return make(logps, adv=adv, weights=w, cm=cm, g=g), w


def test_wd1_loss_is_exactly_zero_when_a_group_has_equal_advantages():
    """w+ = softmax(A) and w- = softmax(-A) coincide (1/G each) when all A in a group are equal, so
    sum_i (-w+_i + w-_i) log pi_i = 0 exactly and so is the gradient."""
    adv = torch.tensor([0.3, 0.3, 0.3, -1.0, -1.0, -1.0])
    x, _ = wd1_case(adv, 3)
    loss, grad = grad_of(weighted_likelihood, x, GRPOConfig())
    assert loss.item() == 0.0
    assert torch.equal(grad, torch.zeros_like(grad))


def test_wd1_weights_are_group_softmaxes():
    """log pi_i = (1/V) sum_v sum_k omega_v(i, k) logp_v(i, k) (d1's one-step estimate, views averaged) and
    L = (1/B) sum_b (1/G) sum_{i in b} (-w+_i + w-_i) log pi_i, so
    dL/dlogp_v(i, k) = c_i omega_v(i, k) / (V B G) with c_i = -w+_i + w-_i, w+- = exp(+-A_i) / sum_{group} exp(+-A).
    Each of w+ and w- sums to 1 per group, so sum_{i in group} c_i = 0; and the loss is c . log pi / (B G)."""
    adv = torch.tensor([1.0, -0.5, 0.2, 2.0, 0.0, -3.0])
    g, b, v = 3, 2, 2
    x, w = wd1_case(adv, g)

    def c_of(x):  # [N] in x's dtype
        a = x.advantages.view(b, g)
        w_pos = torch.exp(a) / torch.exp(a).sum(1, keepdim=True)
        w_neg = torch.exp(-a) / torch.exp(-a).sum(1, keepdim=True)
        return (-w_pos + w_neg).flatten()

    # c sums to 0 per group: in float64 each w+- is within (g + 2) eps64 of its exact value (exp, the sum of g
    # terms, the division), and c's sum over the group adds g roundings, all relative to sum |w+| + |w-| = 2
    c64 = c_of(x._replace(advantages=adv.double()))
    assert c64.view(b, g).sum(1).abs().max() <= (2 * g + 3) * 2 * torch.finfo(torch.float64).eps
    cfg = GRPOConfig()
    want = lambda x: c_of(x)[None, :, None] * x.weights / (v * b * g)  # noqa: E731
    formulas_agree("the gradient", weighted_likelihood, x, cfg, want, grad=True)
    logpi = lambda x: (x.weights * x.logps).sum((0, 2)) / v  # noqa: E731
    formulas_agree("the loss", weighted_likelihood, x, cfg, lambda x: (c_of(x) * logpi(x)).sum() / (b * g))


def test_wd1_gradient_raises_the_best_sample_and_lowers_the_worst():
    """Gradient descent moves logp by -grad: for the best sample of each group (largest A) c < 0, so -grad > 0 on
    its tokens (log pi rises); for the worst c > 0 (log pi falls). Post-EOS tokens get no gradient."""
    adv = torch.tensor([1.0, -0.5, 0.2, 2.0, 0.0, -3.0])
    x, w = wd1_case(adv, 3)
    _, grad = grad_of(weighted_likelihood, x, GRPOConfig())
    for best, worst in [(0, 1), (3, 5)]:
        assert bool((-grad[:, best][w[:, best] > 0] > 0).all())
        assert bool((-grad[:, worst][w[:, worst] > 0] < 0).all())
    assert bool((grad[:, 0, 2] == 0).all())
