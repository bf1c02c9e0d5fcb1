"""BGPO (Lin et al. 2025, arXiv 2510.11683): its stratified views, its bound of the ELBO objective (linear for A > 0,
Jensen for A <= 0), the accumulation of one view's gradient at a time, and its loss and gradient against a
transcription of the released code.

THU-KEG/BGPO could not be fetched here; DARE carries its algorithm. The transcription below restates, in our words,
what yjyddq/DARE (commit 83ae8a305a53a914cce563aedceeac88566891cb) computes in ``verl/trainer/ppo/dllm_core_algos.py``
(``_forward_process_bgpo``, ``compute_policy_loss_bgpo``) and ``verl/workers/actor/llada_dp_actor_bgpo.py``
(``_forward_micro_batch``, ``update_policy``):

* ``_forward_process_bgpo`` (called once per sequence on m = mc_num = n_l copies): T = the valid response tokens
  (attention mask 1 after the prompt); k = randint(1, T + 1); x = round(linspace(k, k + (m - 1) T / m, m)), then
  ((x - 1) % T) + 1; copy j masks x_j positions of the valid response (``randperm(T)[:x_j]``); p_mask = x_j / T.
* ``_forward_micro_batch``: per copy j and row b, l_bj = -(cross_entropy(logits[masked], seq[masked]) / p_mask).sum()
  over the masked positions (the logits of a position are its own: LLaDA), then l_bj / response_length, broadcast
  over the response positions.
* ``compute_policy_loss_bgpo``: d = l - l_old; negative_approx_kl = log(1 + d) where A > 0, else d; ratio = its exp;
  -A ratio and -A clip(ratio, 1 - eps_low, 1 + eps_high), their max; where A < 0 the min of that and -A c (dual
  clip, c = 3); ``agg_loss`` token-mean over the response mask: sum(loss mask) / (sum(mask) + 1e-8).
* ``update_policy``: for each copy j of a micro-batch, a forward pass of that copy alone, its loss divided by the
  gradient accumulation and by mc_num, and ``loss.backward()`` at once: the gradients of the m copies accumulate.
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from fake_rewards import varied_reward
from float_error import (
    EPS32,
    Computed,
    Condition,
    agree,
    computed,
    condition,
    formulas_agree,
    forward_terms,
    gap,
    in_float64,
    loss_and_gradient_agree,
    weighted_scale,
)

import ddmrl.training.grpo as grpo_module
from ddmrl.config import ConfigError, GRPOConfig, method_config
from ddmrl.likelihood import token_logps
from ddmrl.masking.views import Views, apply_view, build_views, stratified_counts
from ddmrl.methods import METHODS
from ddmrl.methods.bgpo.objective import bound_ratio, view_elbo_change
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.objectives import OBJECTIVES
from ddmrl.objectives.base import ObjectiveInputs
from ddmrl.objectives.weights import token_weights
from ddmrl.tasks import make_task
from ddmrl.training.grpo import train_grpo

METHOD = METHODS["bgpo"]
OBJECTIVE = OBJECTIVES[METHOD.objective]

# ------------------------------------------------------------------------------------------ the transcription


def released_counts(valid: int, m: int, k: int) -> torch.Tensor:
    """The m mask counts of ``_forward_process_bgpo`` given its draw k."""
    x = torch.round(torch.linspace(float(k), k + (m - 1) * (valid / m), steps=m)).long()
    return ((x - 1) % valid) + 1


def released_elbos(model, seq, masks, p_mask, response_length):
    """[B, m] ``loss_per_sample / response_length`` of ``_forward_micro_batch``: ``masks`` [B, m, S] bool over the
    whole sequence, ``p_mask`` [B, m]."""
    b, m, _ = masks.shape
    out = torch.zeros(b, m, dtype=p_mask.dtype)
    for j in range(m):
        noisy = torch.where(masks[:, j], 0, seq)  # the mask id of the tests' tokenizer is 0
        logits = model(noisy).logits
        for i in range(b):
            mask = masks[i, j]
            ce = F.cross_entropy(logits[i][mask], seq[i][mask], reduction="none")
            out[i, j] = -(ce / p_mask[i, j]).sum()
    return out / response_length


def released_policy_loss(old_l_theta, l_theta, advantages, response_mask, eps_low, eps_high, clip_ratio_c=3.0):
    """``compute_policy_loss_bgpo`` (token-mean): ``old_l_theta``, ``l_theta``, ``advantages`` [B, R] broadcast
    values."""
    d = l_theta - old_l_theta
    negative_approx_kl = torch.where(advantages > 0, torch.log(1 + d), d)
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    return (pg_losses * response_mask).sum() / (response_mask.sum() + 1e-8)


def released_update(policy, old_elbos, seq, masks, p_mask, advantages, response_mask, eps, gradient_accumulation=1):
    """``update_policy`` on one micro-batch: one forward and backward pass per copy; returns the summed loss (the
    gradients are left accumulated in ``policy``)."""
    b, m, _ = masks.shape
    response_length = response_mask.shape[1]
    a = advantages[:, None].expand(b, response_length)
    total = 0.0
    for j in range(m):
        l_j = released_elbos(policy, seq, masks[:, j : j + 1], p_mask[:, j : j + 1], response_length)[:, 0]
        pg_loss = released_policy_loss(
            old_elbos[:, j, None].expand(b, response_length), l_j[:, None].expand(b, response_length), a,
            response_mask.float(), eps, eps,
        )  # fmt: skip
        loss = pg_loss / gradient_accumulation / m
        loss.backward()
        total += loss.item()
    return total


# ------------------------------------------------------------------------------------------ the views


@pytest.mark.parametrize("m", [1, 2, 3, 5, 16])
def test_the_stratified_counts_are_the_releases_for_every_start(m):
    """For every valid length T <= 12 and every start k in [1, T], the m counts equal the release's, lie in [1, T]
    and are spread over it (one per stratum of width T / m when m <= T)."""
    for valid in range(1, 13):
        for k in range(1, valid + 1):
            ours = stratified_counts(valid, m, k)
            assert torch.equal(ours, released_counts(valid, m, k)), (valid, k)
            assert int(ours.min()) >= 1 and int(ours.max()) <= valid


def test_each_view_masks_its_count_of_the_valid_tokens_only():
    """views_per_step views per step, each masking exactly x_j of the T valid completion tokens (never the prompt,
    never past the first EOS), t = x_j / T, a fresh draw per step, identical from the same seed."""
    n, length, prompt_length, m, mu = 4, 10, 3, 4, 2
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[1, 6:] = False
    completion_mask[3, 2:] = False
    prompt = torch.full((n, prompt_length), 5)
    views = build_views("stratified", mu=mu, seed=7, completion_mask=completion_mask, prompt_ids=prompt,
                        pad_id=1, views_per_step=m)  # fmt: skip
    assert views.masks.shape == (mu * m, n, length) and views.steps == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert not views.prompt_masks.any() and not (views.masks & ~completion_mask[None]).any()
    valid = completion_mask.sum(1)
    assert torch.allclose(views.t * valid[None], views.masks.sum(-1).float())
    for s in range(mu):
        for i in range(n):
            counts = views.masks[s * m : (s + 1) * m, i].sum(-1)
            t = int(valid[i])
            k = int(counts[0])
            assert torch.equal(counts, released_counts(t, m, k))
    assert not torch.equal(views.masks[:m], views.masks[m:])
    again = build_views("stratified", mu=mu, seed=7, completion_mask=completion_mask, prompt_ids=prompt,
                        pad_id=1, views_per_step=m)  # fmt: skip
    assert torch.equal(again.masks, views.masks)


# ------------------------------------------------------------------------------------------ the bound


def random_inputs(seed: int, v: int = 4, n: int = 6, length: int = 7, scale: float = 0.3) -> ObjectiveInputs:
    g = torch.Generator().manual_seed(seed)
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[0, 4:] = False
    targets = (torch.rand(v, n, length, generator=g) < 0.5) & completion_mask[None]
    targets[:, :, 0] = True
    t = targets.sum(-1) / completion_mask.sum(-1)[None]
    views = Views(targets, torch.zeros(v, n, 2, dtype=torch.bool), t.float(), 0)
    weights, _ = token_weights(METHOD.weighting, views, completion_mask)
    old = -torch.rand(v, n, length, generator=g) * 2
    logps = (old + scale * torch.randn(v, n, length, generator=g)).requires_grad_()
    advantages = torch.tensor([1.0, -0.5, 0.8, -1.2, 0.0, 2.0])[:n]
    return ObjectiveInputs(logps, old, None, advantages, weights, None, t.float(), targets, completion_mask, 3)


def elbo_objective(x: ObjectiveInputs) -> torch.Tensor:
    """The objective BGPO bounds, unclipped: -sum_i T_i A_i exp(mean_j Delta_ij) / sum_i T_i (token mean)."""
    ratio = torch.exp(view_elbo_change(x.logps, x.old, x.weights).mean(0))  # [N]
    length = x.completion_mask.sum(1).float()
    return -(x.advantages * ratio * length).sum() / length.sum()


def test_on_policy_the_bound_equals_the_elbo_objective_in_value_and_gradient():
    """At theta = old every Delta is 0: the bound's value and gradient with respect to every view's log-probs are
    the ELBO-based objective's (the paper's equivalence), for advantages of both signs and zero."""
    x = random_inputs(0)
    x = x._replace(logps=x.old.clone().requires_grad_())
    cfg = method_config("bgpo", epsilon=0.2)
    # two formulas: tolerances from float32's error (float_error.formulas_agree: both in float64 to 1e-10 S)
    formulas_agree("the loss", OBJECTIVE, x, cfg, elbo_objective)
    want_grad = lambda x: torch.autograd.grad(elbo_objective(x), x.logps)[0]  # noqa: E731
    formulas_agree("the gradient", OBJECTIVE, x, cfg, want_grad, grad=True)
    assert torch.autograd.grad(OBJECTIVE(x, cfg).loss, x.logps)[0].abs().sum() > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_off_policy_each_rows_bound_is_below_the_elbo_objective(seed):
    """A mean_j r_j <= A exp(mean_j Delta_j) for every row: 1 + D <= e^D (A > 0), e^{mean D} <= mean e^D (A < 0)."""
    x = random_inputs(seed, scale=0.5)
    delta = view_elbo_change(x.logps, x.old, x.weights).detach()  # [V, N]
    a = x.advantages
    bound = a * bound_ratio(delta, a).mean(0)
    exact = a * torch.exp(delta.mean(0))
    assert (bound <= exact + 1e-6).all()
    assert (bound < exact - 1e-6)[a != 0].all()  # strict where the views disagree


def test_the_views_gradients_taken_one_at_a_time_sum_to_the_joint_gradient():
    """The objective is a mean of one term per view: the loss of each view alone, scaled by 1 / m and
    backpropagated on its own, accumulates the joint loss's gradient (what lets the loop free each view's graph)."""
    x = random_inputs(4, scale=0.5)
    cfg = method_config("bgpo", epsilon=0.1)
    joint = OBJECTIVE(x, cfg).loss
    (want,) = torch.autograd.grad(joint, x.logps)
    v = x.logps.shape[0]
    total, acc = 0.0, torch.zeros_like(x.logps)
    for j in range(v):
        one = x._replace(logps=x.logps[j : j + 1], old=x.old[j : j + 1], weights=x.weights[j : j + 1],
                         targets=x.targets[j : j + 1], t=x.t[j : j + 1])  # fmt: skip
        part = OBJECTIVE(one, cfg).loss / v
        (g,) = torch.autograd.grad(part, x.logps)
        acc += g
        total += part.item()
    assert math.isclose(total, joint.item(), rel_tol=1e-6)
    assert torch.allclose(acc, want, atol=1e-8)


@pytest.mark.parametrize("loss_type", ["token_mean", "seq_mean"])
def test_the_loss_equals_the_release_policy_loss_with_its_dual_clip_and_differs_only_where_it_acts(loss_type):
    """On broadcast per-view values, ``dual_clip: 3`` gives the release's token-mean loss (mean over views); the
    default (no dual clip) differs only by rows with A < 0 and ratio > 3. seq_mean: the plain mean over rows."""
    x = random_inputs(2, scale=3.0)  # large changes: clipped ratios, and some exp(Delta) > 3 where A < 0
    delta = view_elbo_change(x.logps, x.old, x.weights).detach()
    a = x.advantages[None]
    assert ((delta.exp() > 3) & (a < 0)).any() and ((delta > -1) | (a <= 0)).all()  # the release is finite
    v, n = delta.shape
    length = x.completion_mask.shape[1]
    rel = 0.0
    for j in range(v):
        lj = delta[j, :, None].expand(n, length)
        a = x.advantages[:, None].expand(n, length)
        mask = x.completion_mask.float() if loss_type == "token_mean" else torch.ones(n, length)
        rel += released_policy_loss(torch.zeros(n, length), lj, a, mask, 0.2, 0.2).item() / v
    dual = OBJECTIVE(x, method_config("bgpo", epsilon=0.2, dual_clip=3.0, loss_type=loss_type)).loss
    assert math.isclose(dual.item(), rel, rel_tol=1e-5)
    plain = OBJECTIVE(x, method_config("bgpo", epsilon=0.2, loss_type=loss_type)).loss
    assert plain.item() > dual.item()  # the dual clip caps the loss of negative advantages at -c A


def test_where_the_release_is_nan_the_linear_bound_is_kept():
    """A > 0 and Delta <= -1: the release's log(1 + Delta) is NaN (its ratio exp(log(1 + Delta))); ddmrl keeps the
    paper's linear bound 1 + Delta, equal to the release's ratio wherever that is finite (docs/reproduction.md)."""
    delta = torch.tensor([[-1.5, -0.5, 0.3, -1.5]])
    advantages = torch.tensor([1.0, 1.0, 1.0, -1.0])
    ours = bound_ratio(delta, advantages)
    release = torch.exp(torch.where(advantages > 0, torch.log(1 + delta), delta))
    assert torch.isnan(release[0, 0]) and torch.allclose(ours[0, 0], torch.tensor(-0.5))
    assert torch.allclose(ours[0, 1:], release[0, 1:])


# ------------------------------------------------------------------------------------------ against the release


def perturbed(model, seed: int, scale: float):
    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return other


class Sides(NamedTuple):
    """In one dtype: ddmrl's loss and gradient with the views together and with one view at a time (accumulated in
    ``.grad``), the release's (its per-copy backward passes), the views' old ELBOs [N, m] of both, and the condition
    measures of the sums (from float64 values only)."""

    together: Computed
    one_at_a_time: Computed
    release: Computed
    elbos: torch.Tensor
    elbos_release: torch.Tensor
    elbo_scale: float  # S of the old ELBOs (float_error.weighted_scale)
    clip_ratio: float
    cond: Condition | None


def both_sides(models, prompt, completion, completion_mask, advantages, views, mask_id, cfg) -> Sides:
    """ddmrl (``bgpo_elbo`` weights, ``token_logps``, the bgpo objective) and the release (``_forward_micro_batch``,
    ``update_policy``) on the same views; ``models``: the old and current policies."""
    old_model, policy = models
    m, n, length = views.masks.shape
    twin = copy.deepcopy(policy)  # ddmrl's; the release accumulates its gradient in policy's .grad
    # the release's inputs: the same masks over the whole sequence, p_mask = x / T
    seq = torch.cat([prompt, completion], 1)
    masks = torch.cat([torch.zeros(m, n, prompt.shape[1], dtype=torch.bool), views.masks], 2).transpose(0, 1)
    p_mask = views.t.T  # [n, m]
    with torch.no_grad():
        old_rel = released_elbos(old_model, seq, masks, p_mask, length)  # [n, m]
    loss_rel = released_update(policy, old_rel, seq, masks, p_mask, advantages, completion_mask, cfg.epsilon)
    release = Computed(torch.tensor(loss_rel, dtype=torch.float64), tuple(p.grad for p in policy.parameters()))

    weights, _ = token_weights(METHOD.weighting, views, completion_mask)
    inputs = [apply_view(prompt, completion, views, v, mask_id) for v in range(m)]
    with torch.no_grad():
        old = torch.stack([token_logps(old_model, x, completion) for x in inputs])
    targets = views.masks & completion_mask[None]

    def loss_of(ids):
        logps = torch.stack([token_logps(twin, inputs[v], completion) for v in ids])
        x = ObjectiveInputs(logps, old[list(ids)], None, advantages, weights[list(ids)], None, views.t[list(ids)],
                            targets[list(ids)], completion_mask, 2)  # fmt: skip
        return OBJECTIVE(x, cfg), logps

    out, logps = loss_of(tuple(range(m)))
    params = list(twin.parameters())
    together = computed(out.loss, params)
    cond = condition(out.loss, logps, params, seq.shape[1]) if logps.dtype == torch.float64 else None
    total = 0.0
    for v in range(m):  # one view at a time, as the loop takes them
        part = loss_of((v,))[0].loss / m
        part.backward()
        total += part.item()
    one_at_a_time = Computed(torch.tensor(total, dtype=torch.float64), tuple(p.grad for p in params))
    elbos, elbo_scale = (weights * old).sum(-1).T, weighted_scale(weights, old, -1)
    return Sides(together, one_at_a_time, release, elbos, old_rel, elbo_scale, out.terms["clip_ratio"], cond)


@pytest.mark.parametrize("seed", [0, 1])
def test_loss_and_gradient_equal_the_release_on_identical_masks(make_model, tok, seed):
    """Old and current policies differ (ratios away from 1, some clipped), EOS padding present, advantages of both
    signs: ddmrl's views, bgpo_elbo weights and bgpo objective on the release's inputs give its per-view ELBOs, its
    loss (summed over its per-copy backward passes) and its accumulated gradient, whether ddmrl takes the views
    together or one at a time.

    Tolerances of the loss and gradient from float32's error (tests/float_error.py): the three computations also run
    in float64 (the models, the views' ratios and the advantages) and agree there to 1e-10 of the condition measure
    S, the check of the formulas; in float32 each is within n eps32 S of its float64 value and ddmrl's within
    2 n eps32 S of the release's (n = T for the loss, T (P + L) for a gradient). The old ELBOs (forward passes,
    weighted sums of their log-probs) the same way, S the largest sum_t |w_t| times the largest |log-prob| and n
    the pass's longest chain of sums (float_error.forward_terms) plus the L tokens."""
    prompt_length, length, n, m, eps = 3, 8, 4, 3, 0.05
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(5, 10, (n, prompt_length), generator=g)
    completion = torch.randint(5, 10, (n, length), generator=g)
    completion[1, 5:] = tok.eos_token_id
    completion_mask = torch.ones(n, length, dtype=torch.bool)
    completion_mask[1, 6:] = False  # up to and including the first EOS
    old_model = make_model(max_positions=prompt_length + length, seed=1)
    models = (old_model, perturbed(old_model, 11 + seed, 0.1))
    advantages = torch.tensor([1.0, -0.5, 0.8, -1.2])
    views = build_views("stratified", mu=1, seed=seed, completion_mask=completion_mask, prompt_ids=prompt,
                        pad_id=tok.pad_token_id, views_per_step=m)  # fmt: skip
    cfg = method_config("bgpo", epsilon=eps, dual_clip=3.0)
    args = prompt, completion, completion_mask
    f32 = both_sides(models, *args, advantages, views, tok.mask_token_id, cfg)
    f64 = both_sides(in_float64(*models), *args, advantages.double(), views._replace(t=views.t.double()),
                     tok.mask_token_id, cfg)  # fmt: skip

    terms = forward_terms(old_model, prompt_length + length) + length
    agree("the old ELBOs", (f32.elbos, f64.elbos), (f32.elbos_release, f64.elbos_release), f64.elbo_scale, terms)
    assert 0 < f32.clip_ratio < 1 and f64.clip_ratio == f32.clip_ratio
    for ours32, ours64 in ((f32.together, f64.together), (f32.one_at_a_time, f64.one_at_a_time)):
        loss_and_gradient_agree(ours32, f32.release, ours64, f64.release, f64.cond)


# ------------------------------------------------------------------------------------------ the method and the loop


def test_what_bgpo_fixes_and_refuses():
    cfg = method_config("bgpo")
    assert (cfg.remasking, cfg.views_per_step, cfg.beta, cfg.dual_clip) == ("stratified", 16, 0.0, 0.0)
    assert METHOD.fixed() == {"beta": 0.0} and METHOD.separable_views(cfg)
    assert not METHODS["gdpo"].separable_views(method_config("gdpo"))
    with pytest.raises(ConfigError, match=r"^dual_clip = 0.5: the dual clip's bound c must exceed 1"):
        method_config("bgpo", dual_clip=0.5)
    with pytest.raises(ConfigError, match="beta"):
        method_config("bgpo", beta=0.1)
    assert isinstance(GRPOConfig(), GRPOConfig)


class LoopStep(NamedTuple):
    """One optimiser step of the loop (:func:`one_step`): the policy after it and before, the curve, the token_logps
    calls (rows, with gradient) and the calls made before each backward pass; the condition measures of the losses
    backpropagated (summed over the backward passes), the gradients before clipping, after it, and their norm."""

    policy: torch.nn.Module
    before: dict[str, torch.Tensor]
    curve: list
    calls: list[tuple[int, bool]]
    backward: list[int]
    cond: Condition
    grads: list[torch.Tensor]
    clipped: list[torch.Tensor]
    norm: float


def one_step(monkeypatch, make_model, separable: bool) -> LoopStep:
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok, seed=3)
    before = {k: p.detach().clone() for k, p in policy.named_parameters()}
    calls, backward, logps, conds, seen = [], [], [], [], {}
    real_logps, real_backward = grpo_module.token_logps, grpo_module.dist.local_accelerator

    def counting(model, inputs, targets, **kw):
        calls.append((inputs.shape[0], torch.is_grad_enabled()))
        out = real_logps(model, inputs, targets, **kw)
        logps.extend([out] if out.requires_grad else [])
        return out

    def accelerator(*args, **kw):
        acc = real_backward(*args, **kw)
        original, clip = acc.backward, acc.clip_grad_norm_

        def counted(loss, **k):
            backward.append(len(calls))
            conds.append(condition(loss, logps, policy.parameters(), task.prompt_length + 1 + task.completion_length))
            logps.clear()
            return original(loss, **k)

        def clipping(params, max_norm):
            params = list(params)
            seen["grads"] = [p.grad.clone() for p in params]
            seen["norm"] = float(clip(params, max_norm))
            seen["clipped"] = [p.grad.clone() for p in params]
            return seen["norm"]

        acc.backward, acc.clip_grad_norm_ = counted, clipping
        return acc

    cfg = method_config("bgpo", dict(max_steps=1, num_prompts=2, num_generations=4, num_iterations=1,
                                     learning_rate=LR, views_per_step=3))  # fmt: skip
    assert cfg.weight_decay == 0
    with monkeypatch.context() as mp:  # undone on return: a second run wraps the real functions, not these
        mp.setattr(grpo_module, "token_logps", counting)
        mp.setattr(grpo_module.dist, "local_accelerator", accelerator)
        mp.setattr(type(METHOD), "separable_views", lambda self, cfg: separable)
        curve, _ = train_grpo(policy, None, tok, task, lambda it: task.generate(2, seed=100 + it), cfg, 0)
    return LoopStep(policy, before, curve, calls, backward, sum(conds[1:], conds[0]), seen["grads"],
                    seen["clipped"], seen["norm"])  # fmt: skip


#: the loop's learning rate in :func:`one_step`, and AdamW's default eps (the loop's optimiser)
LR, ADAM_EPS = 1e-2, 1e-8


def adam_step_gap(clipped: torch.Tensor, gap: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Elementwise bound on how far apart two float32 AdamW first steps (no weight decay) put a parameter ``p`` when
    their (clipped) gradients are within ``gap`` of ``clipped``: the step is p - LR u(g), u(g) = g / (|g| + eps)
    (m_hat = g, v_hat = g^2), |u'| = eps / (|g| + eps)^2 is largest where g is nearest 0, and |u| < 1; plus each
    side's rounding of u (a few operations: < 5 eps32 LR) and of the parameter (eps32 / 2 |p|)."""
    near = (clipped.abs() - gap).clamp_min(0)
    spread = torch.minimum(gap * ADAM_EPS / (near + ADAM_EPS) ** 2, torch.full_like(gap, 2.0))
    return LR * spread + 2 * EPS32 * (p.abs() + 5 * LR)


def test_one_grpo_step_takes_each_views_gradient_on_its_own_and_moves_every_parameter(monkeypatch, make_model):
    """One rollout batch, one optimiser step over 3 views: one forward pass with gradient then one backward pass per
    view (each graph freed before the next view's forward pass), every parameter moves, no KL; the same update as
    taking the 3 views through one backward pass.

    The two runs execute the same code (the same rollouts, token_logps and objective) and differ only in how the
    views' gradients are summed (``.grad`` over three backward passes, or autograd in one); the objective's being
    a mean of one term per view is checked against the release above in float64. So the bounds are float32's error
    (tests/float_error.py), with the condition measures S of the joint run's loss (float32 values: S is a size,
    within n eps32 of its float64 value): the losses within 2 T eps32 S, each gradient tensor within 2 n eps32 S
    (n = T (P + L)), and the parameters within the AdamW step's propagation of that gradient bound (through the
    clipping: each clipped gradient moves by at most the bound plus |g| ||bound||_2 / ||g||; :func:`adam_step_gap`)."""
    sep = one_step(monkeypatch, make_model, True)
    policy, curve = sep.policy, sep.curve
    assert len(curve) == 1 and curve[0]["step"] == 1 and math.isfinite(curve[0]["loss"]) and "kl" not in curve[0]
    with_grad = [i for i, (_, grad) in enumerate(sep.calls) if grad]
    assert len(with_grad) == 3 and sep.backward == [i + 1 for i in with_grad]  # forward, backward, forward, ...
    unchanged = [k for k, p in policy.named_parameters() if p.requires_grad and torch.equal(p, sep.before[k])]
    assert unchanged == []
    joint = one_step(monkeypatch, make_model, False)
    assert len(joint.backward) == 1 and joint.backward[0] == len(joint.calls)

    s_loss, terms = joint.cond.of_loss()
    assert abs(curve[0]["loss"] - joint.curve[0]["loss"]) <= 2 * terms * EPS32 * s_loss
    bounds = [2 * n * EPS32 * s for s, n in joint.cond.of_grads()]  # per gradient tensor
    for (k, _), a, b, bound in zip(policy.named_parameters(), sep.grads, joint.grads, bounds, strict=True):
        assert gap(a, b) <= bound, f"{k}: the gradients {gap(a, b):.3g} apart (> {bound:.3g})"
    norm_gap = math.sqrt(sum(bound**2 * g.numel() for bound, g in zip(bounds, joint.grads, strict=True)))
    for (k, p), q, g, c, bound in zip(
        policy.named_parameters(), joint.policy.parameters(), joint.grads, joint.clipped, bounds, strict=True
    ):
        clipped_gap = bound + g.abs() * norm_gap / joint.norm + EPS32 * c.abs()  # and the clipping's rounding
        assert bool(((p - q).abs() <= adam_step_gap(c, clipped_gap, q.detach())).all()), k


class _Saved:
    """A tensor saved for backward, counted while its graph holds it."""

    live = peak = 0

    def __init__(self, t: torch.Tensor) -> None:
        self.t, self.bytes = t, t.numel() * t.element_size()
        _Saved.live += self.bytes
        _Saved.peak = max(_Saved.peak, _Saved.live)

    def __del__(self) -> None:
        _Saved.live -= self.bytes


def peak_saved_bytes(monkeypatch, make_model, views: int, separable: bool) -> int:
    """The most bytes the update's autograd graphs held at once (tensors saved for backward) over one optimiser
    step of ``views`` views."""
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok, seed=3)
    monkeypatch.setattr(type(METHOD), "separable_views", lambda self, cfg: separable)
    cfg = method_config("bgpo", dict(max_steps=1, num_prompts=2, num_generations=4, num_iterations=1,
                                     views_per_step=views))  # fmt: skip
    _Saved.live = _Saved.peak = 0
    with torch.autograd.graph.saved_tensors_hooks(_Saved, lambda s: s.t):
        train_grpo(policy, None, tok, task, lambda it: task.generate(2, seed=100 + it), cfg, 0)
    return _Saved.peak


def test_the_updates_memory_is_one_views_whatever_the_number_of_views(monkeypatch, make_model):
    """The paper's claim, in the loop: taken one at a time, 6 views hold one view's graph at most (the same peak as
    1 view), where all together they hold 6 (the model's graphs; the objective's few scalars per row aside)."""
    one = peak_saved_bytes(monkeypatch, make_model, 1, True)
    assert peak_saved_bytes(monkeypatch, make_model, 6, True) == one
    assert 5.99 * one < peak_saved_bytes(monkeypatch, make_model, 6, False) <= 6 * one
