"""Co-GRPO's schedule policy (ddmrl.aux_policies.schedule) in MaskGIT's sampler, the joint trajectory
log-probability over tokens and schedule actions and its gradient (hand-computed on a model with fixed logits), and
the auxiliary policy's clipped GRPO loss (ddmrl.aux_policies.base)."""

from __future__ import annotations

import math

import pytest
import torch

from ddmrl.aux_policies.base import aux_clip_loss, trajectory_logp
from ddmrl.aux_policies.schedule import SchedulePolicy, gaussian_logp, interpolate, remasked_fraction
from ddmrl.likelihood import token_logps
from ddmrl.masking.views import apply_view, build_views
from ddmrl.samplers.maskgit import generate, keep_masked, mask_schedule


def test_gaussian_log_density_and_its_closed_form_score():
    a, mean, log_std = (
        torch.tensor([0.4, -1.0]),
        torch.tensor([0.1, 0.5], requires_grad=True),
        torch.tensor([math.log(0.3), math.log(2.0)], requires_grad=True),
    )
    lp = gaussian_logp(a, mean, log_std)
    ref = torch.distributions.Normal(mean.detach(), log_std.detach().exp()).log_prob(a)
    assert torch.allclose(lp, ref, atol=1e-6)
    lp.sum().backward()
    sigma = log_std.detach().exp()
    z = (a - mean.detach()) / sigma
    assert torch.allclose(mean.grad, z / sigma, atol=1e-5)  # (a - mu) / sigma^2
    assert torch.allclose(log_std.grad, z**2 - 1, atol=1e-5)  # (a - mu)^2 / sigma^2 - 1


def test_table_interpolation_hits_the_knots_and_is_linear_between():
    table = torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, -1.0]])
    assert interpolate(table, torch.tensor([0.0, 0.5, 1.0])).tolist() == table.tolist()
    assert interpolate(table, torch.tensor([0.25, 0.75])).tolist() == [[1.0, 2.0], [3.0, 1.0]]


def test_remasked_fraction_is_the_base_at_zero_shift_and_moves_in_logit_space():
    assert remasked_fraction(0.7, torch.tensor([0.0])).item() == 0.7  # exactly
    got = remasked_fraction(0.7, torch.tensor([1.0, -2.0])).tolist()
    logit = math.log(0.7 / 0.3)
    assert got == pytest.approx([1 / (1 + math.exp(-(logit + 1))), 1 / (1 + math.exp(-(logit - 2)))])
    assert remasked_fraction(0.0, torch.tensor([3.0])).item() == 0.0  # the last step reveals everything


def test_the_ratio_factor_is_left_out_at_the_last_step():
    policy = SchedulePolicy(knots=3, init_std=0.5)
    obs = torch.tensor([[[0.5, 0.5, 0.3, 1.0], [1.0, 0.1, 0.8, 0.0]]])  # a middle step, then the last step
    a = torch.tensor([[[0.2, 0.1, -0.1], [0.9, 0.1, -0.1]]])
    b = a.clone()
    b[0, 1, 0] = -3.0  # only the last step's ratio differs
    assert torch.equal(policy((obs,), a)[0, 1], policy((obs,), b)[0, 1])
    policy((obs,), a).sum().backward()
    assert policy.table.grad[2, 0] == 0  # the last knot's ratio mean gets no gradient


def prompts(n: int = 3) -> torch.Tensor:
    return torch.randint(5, 10, (n, 3), generator=torch.Generator().manual_seed(0))


def test_a_deterministic_schedule_of_zero_actions_is_maskgit_bit_for_bit(tok, make_model):
    model = make_model(max_positions=16)
    kw = dict(mask_id=tok.mask_token_id, steps=5, temperature=1.0, cfg_scale=1.0)
    plain = generate(model, prompts(), 10, generator=torch.Generator().manual_seed(3), **kw)
    with_policy = generate(model, prompts(), 10, generator=torch.Generator().manual_seed(3),
                           aux_policy=SchedulePolicy(knots=5).eval(), **kw)  # fmt: skip
    assert torch.equal(plain.completion_ids, with_policy.completion_ids)
    assert torch.equal(plain.reveal_step, with_policy.reveal_step) and plain.nfe == with_policy.nfe
    assert plain.aux is None and with_policy.aux.actions.abs().sum() == 0


def test_the_temperature_and_cfg_actions_are_the_sampler_at_the_scaled_values(tok, make_model):
    """A constant deterministic schedule T x exp(a_T), w x exp(a_w) gives exactly MaskGIT at those values."""
    model = make_model(max_positions=16)
    policy = SchedulePolicy(actions=("temperature", "cfg"), knots=2).eval()
    with torch.no_grad():
        policy.table[:] = torch.tensor([math.log(0.5), math.log(2.0)])
    t, w = (float(torch.exp(policy.table.detach()[0, i])) for i in range(2))
    kw = dict(mask_id=tok.mask_token_id, steps=4, generator=torch.Generator().manual_seed(5))
    scaled = generate(model, prompts(), 10, temperature=t, cfg_scale=1.5 * w, **kw)
    kw["generator"] = torch.Generator().manual_seed(5)
    learned = generate(model, prompts(), 10, temperature=1.0, cfg_scale=1.5, aux_policy=policy, **kw)
    assert torch.equal(scaled.completion_ids, learned.completion_ids)
    assert torch.equal(scaled.reveal_step, learned.reveal_step)


def test_sampled_actions_set_the_masked_counts_and_their_log_probs_are_recorded(tok, make_model):
    """In train mode: the count left masked after each step is floor(L sigmoid(logit(m(r)) + a_ratio)) clamped as
    MaskGIT clamps it, and the recorded log-probs are the policy's on the recorded observations and actions."""
    model = make_model(max_positions=24)
    policy = SchedulePolicy(knots=6, init_std=1.0).train()
    steps, length = 6, 16
    out = generate(model, prompts(4), length, mask_id=tok.mask_token_id, steps=steps, temperature=1.0,
                   cfg_scale=1.0, aux_policy=policy, generator=torch.Generator().manual_seed(2))  # fmt: skip
    (obs,), actions = out.aux.obs, out.aux.actions
    assert obs.shape == (4, steps, 4) and actions.shape == (4, steps, 3)
    assert torch.allclose(policy(out.aux.obs, actions), out.aux.logp, atol=1e-5)
    masked = torch.full((4,), length)
    for s in range(steps):
        expected = keep_masked(masked, length, s, steps, "cosine", actions[:, s, 0])
        after = (out.reveal_step > s).sum(1) + (out.reveal_step < 0).sum(1)
        assert torch.equal(after, expected), s
        assert torch.allclose(obs[:, s, 1], masked.float() / length)  # the masked fraction it observed
        masked = after
    assert torch.allclose(obs[:, :, 0], torch.linspace(0, 1, steps).expand(4, steps))
    assert obs[:, -1, 3].eq(0).all() and obs[:, :-1, 3].eq(1).all()
    shifted = actions[:, :-1, 0].abs().sum()
    assert shifted > 0 and mask_schedule("cosine", 0.5) > 0  # the actions did move the schedule


class Fixed(torch.nn.Module):
    """Logits that ignore the input (a trainable table [P + L, V]): token log-probs are hand-computable."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(table)

    def forward(self, x: torch.Tensor):
        class Out:
            logits = self.table.expand(x.shape[0], *self.table.shape)

        return Out()


def test_the_joint_trajectory_log_probability_and_its_gradient_by_hand():
    """log p(tau) = sum_s log pi(a_s | o_s) + sum_k log p(x_k | x_s(k)); with state-independent logits the token
    part is sum_k log softmax(table_k)[x_k]. Its gradient: onehot(x_k) - softmax(table_k) per completion position;
    for the schedule table, the Gaussian score (a - mu) / sigma^2 at each step's knot."""
    torch.manual_seed(0)
    p, length, vocab = 2, 3, 5
    model = Fixed(torch.randn(p + length, vocab))
    policy = SchedulePolicy(actions=("ratio", "temperature"), knots=3, init_std=0.4).train()
    prompt = torch.tensor([[1, 2]])
    with torch.no_grad():
        out = generate(model, prompt, length, mask_id=0, steps=3, temperature=1.0, aux_policy=policy,
                       generator=torch.Generator().manual_seed(4))  # fmt: skip
    x, reveal = out.completion_ids, out.reveal_step
    views = build_views("tracerl", mu=1, seed=0, completion_mask=torch.ones_like(x, dtype=torch.bool),
                        prompt_ids=prompt, pad_id=99, reveal_step=reveal, shrink=1)  # fmt: skip
    logps = torch.stack([token_logps(model, apply_view(prompt, x, views, v, 0), x) for v in range(len(views.steps))])
    joint = trajectory_logp(logps, views.target_masks, policy(out.aux.obs, out.aux.actions), out.aux.active)

    table = model.table.detach()[p:]
    tokens = sum(torch.log_softmax(table[k], -1)[x[0, k]].item() for k in range(length))
    (obs,), a = out.aux.obs, out.aux.actions
    sigma = torch.exp(policy.log_std.detach())
    schedule = 0.0
    for s in range(3):
        on = [obs[0, s, 3].item(), 1.0]  # the ratio counts except at the last step
        for d in range(2):
            mu = policy.table.detach()[s, d]
            z = (a[0, s, d] - mu) / sigma[d]
            schedule += on[d] * (-0.5 * z**2 - math.log(sigma[d]) - 0.5 * math.log(2 * math.pi))
    assert joint.item() == pytest.approx(tokens + float(schedule), abs=1e-5)

    joint.sum().backward()
    expected_model = torch.zeros_like(model.table)
    for k in range(length):
        expected_model[p + k] = torch.nn.functional.one_hot(x[0, k], vocab) - torch.softmax(table[k], -1)
    assert torch.allclose(model.table.grad, expected_model, atol=1e-5)
    expected_table = torch.zeros_like(policy.table)
    for s in range(3):  # r = s / 2 hits knot s exactly
        for d in range(2):
            on = obs[0, s, 3].item() if d == 0 else 1.0
            expected_table[s, d] = on * (a[0, s, d] - policy.table.detach()[s, d]) / sigma[d] ** 2
    assert torch.allclose(policy.table.grad, expected_table, atol=1e-5)


def test_the_clipped_loss_gradient_at_ratio_one_is_the_mean_per_row_score():
    """At the rollout policy (logp = old): grad loss = -(1/N) sum_i A_i / S_i sum_{s active} grad logp_is; inactive
    steps give nothing; a step whose ratio is clipped in the advantage's direction gives nothing either."""
    logp = torch.tensor([[0.1, -0.4, 0.3], [0.2, 0.0, -1.0]], requires_grad=True)
    active = torch.tensor([[True, True, False], [True, True, True]])
    adv = torch.tensor([1.5, -0.5])
    out = aux_clip_loss(logp, logp.detach(), active, adv, epsilon=0.2)
    out.loss.backward()
    expected = -torch.tensor([[1.5 / 2, 1.5 / 2, 0.0], [-0.5 / 3, -0.5 / 3, -0.5 / 3]]) / 2
    assert torch.allclose(logp.grad, expected) and out.clip_ratio == 0.0

    old = logp.detach() - torch.tensor([[0.5, 0.0, 0.0], [0.0, 0.0, -0.5]])  # ratios e^0.5 (A > 0), e^-0.5 (A < 0)
    logp.grad = None
    out = aux_clip_loss(logp, old, active, adv, epsilon=0.2)
    out.loss.backward()
    assert logp.grad[0, 0] == 0 and logp.grad[1, 2] == 0  # clipped: no gradient
    assert logp.grad[0, 1] != 0 and out.clip_ratio == pytest.approx(2 / 5)
