"""TraceRL's diffusion value model (Wang et al. 2026, arXiv 2509.06949, Sec. 3.2; Gen-Verse/dLLM-RL): its step-level
returns and advantages and its clipped value loss against a transcription of the release and against the paper's
identities, the policy objective with per-token advantages against the release's, and the loop: both models train,
the first step with a zero value head is TraceRL's, and a resumed run ends exactly as the uninterrupted one.

The transcription below restates, in our words, what Gen-Verse/dLLM-RL computes (``train/train_trado_value.py``:
``compute_returns_and_advantages_from_fragments`` and ``forward_process``; ``train/train_trado_policy.py``:
``forward_process``):

* per rollout, over its trainable response positions (not padding), the sorted distinct steps of its step map;
  the verifiable reward on the tokens of the last of them, 0 elsewhere; r*_t and V*_t the means over each step's
  tokens of the token rewards and of the old values; backward recursions R*_t = r*_t + gamma R*_{t+1},
  delta*_t = r*_t - V*_t + gamma V*_{t+1}, A*_t = delta*_t + gamma lam A*_{t+1}; then per token
  R_j = r_j + gamma R*_{t_j+1}, A_j = (r_j - V_j) + gamma V*_{t_j+1} + gamma lam A*_{t_j+1};
* the value loss of a batch of B fragment rows: 0.5 max((V - R)^2, (V_old + clamp(V - V_old, +-eps) - R)^2) at the
  row's targets, summed over the row, divided by the response length L1, summed over rows, divided by B;
* the policy loss: ratio exp(clamp(logp - old (0 off the targets), +-10)), -sum over rows of the target sum of
  min(r A_j, clip(r, 1 -/+ eps) A_j) / L1, divided by B; plus beta times the same normalisation of the k3 estimate
  exp(clamp(old - logp, +-10)) - 1 + logp - old.

The release's values come from its value LLM; both sides here read the same value tensors, so the recursions,
normalisations and clipping are what is compared. The release's shrink (merging k distinct steps per block) is
TraceRL's view question, not the value model's: the step maps compared are ddmrl's trace steps (shrink 1).
"""

from __future__ import annotations

import copy

import pytest
import torch
from fake_rewards import varied_reward

import ddmrl.training.grpo as grpo_module
from ddmrl.config import SamplerConfig, method_config
from ddmrl.masking.views import build_views
from ddmrl.methods import METHODS
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.objectives import OBJECTIVES
from ddmrl.objectives.base import ObjectiveInputs
from ddmrl.objectives.value import ValueModel, clipped_value_loss, token_rewards, trace_gae, value_clip
from ddmrl.tasks import make_task
from ddmrl.training.grpo import train_grpo
from ddmrl.training.resume import Checkpointer
from ddmrl.training.tracking import RunLog

# ------------------------------------------------------------------------------------------ the transcription


def release_returns_and_advantages(step_map, trainable, values, reward, gamma, lam):
    """One rollout of dLLM-RL's ``compute_returns_and_advantages_from_fragments`` (scalar reward): step_map [L1]
    long, trainable [L1] bool, values [L1] (V_resp, the old values gathered from the fragments), reward a float."""
    l1 = step_map.shape[0]
    last_step_id = int(step_map[trainable].max().item())
    r_resp = torch.zeros(l1, dtype=torch.float32)
    r_resp[(step_map == last_step_id) & trainable] = reward
    v_resp = values.float()
    uniq_steps = torch.unique(step_map[trainable], sorted=True)
    s = uniq_steps.numel()
    step_to_rank = {int(uniq_steps[i].item()): i for i in range(s)}
    r_star, v_star = torch.zeros(s), torch.zeros(s)
    for sid in uniq_steps.tolist():
        mask = (step_map == sid) & trainable
        r_star[step_to_rank[sid]] = r_resp[mask].mean() if mask.any() else 0.0
        v_star[step_to_rank[sid]] = v_resp[mask].mean() if mask.any() else 0.0
    big_r = torch.zeros(s)
    for i in range(s - 1, -1, -1):
        big_r[i] = r_star[i] + (gamma * big_r[i + 1] if i + 1 < s else 0.0)
    delta = torch.zeros(s)
    for i in range(s):
        v_next = v_star[i + 1] if i + 1 < s else 0.0
        delta[i] = r_star[i] - v_star[i] + gamma * v_next
    big_a = torch.zeros(s)
    for i in range(s - 1, -1, -1):
        big_a[i] = delta[i] + (gamma * lam * big_a[i + 1] if i + 1 < s else 0.0)
    r_out, a_out = torch.zeros(l1), torch.zeros(l1)
    for pos in torch.nonzero(trainable, as_tuple=False).flatten().tolist():
        i = step_to_rank[int(step_map[pos].item())]
        r_next = big_r[i + 1] if i + 1 < s else 0.0
        v_next = v_star[i + 1] if i + 1 < s else 0.0
        a_next = big_a[i + 1] if i + 1 < s else 0.0
        r_out[pos] = r_resp[pos] + gamma * r_next
        a_out[pos] = (r_resp[pos] - v_resp[pos]) + gamma * v_next + gamma * lam * a_next
    return r_out, a_out


def release_value_loss(values, old_values, returns, p_mask, eps):
    """dLLM-RL ``train_trado_value.py``'s ``forward_process`` after the value model: [B, L1] each."""
    b, l1 = p_mask.shape
    values = torch.where(p_mask, values, torch.zeros_like(values))
    v_clipped = old_values + (values - old_values).clamp(-eps, eps)
    loss = 0.5 * torch.maximum((values - returns) ** 2, (v_clipped - returns) ** 2) * p_mask
    return (loss.sum(dim=1) / l1).sum() / b


def release_policy_loss(logp_new, logp_old, adv, p_mask, eps, beta):
    """dLLM-RL ``train_trado_policy.py``'s ``forward_process`` after the log-probs (k3 KL against the old policy)."""
    b, l1 = p_mask.shape
    ratio = torch.where(p_mask, logp_new - logp_old, torch.zeros_like(logp_new)).clamp(-10.0, 10.0).exp()
    clipped = ratio.clamp(1 - eps, 1 + eps)
    surrogate = (torch.min(ratio * adv, clipped * adv) * p_mask).sum(dim=1) / l1
    policy_loss = -(surrogate.sum() / b)
    kl = torch.where(p_mask, logp_new - logp_old, torch.zeros_like(logp_new))
    kl = (-kl).clamp(-10.0, 10.0).exp() - 1.0 + kl
    return policy_loss + beta * ((kl * p_mask).sum(dim=1) / l1).sum() / b


# ------------------------------------------------------------------------------------------ identical inputs


def trajectories(n=6, length=10, seed=0):
    """Views of ``n`` rollouts of ``length`` tokens (reveal steps with ties, some rows cut by an EOS), their
    trainable targets [V, N, L], trace steps [N, L], completion masks, rewards [N] and old values [V, N, L]."""
    g = torch.Generator().manual_seed(seed)
    reveal = torch.randint(0, 5, (n, length), generator=g)
    ends = torch.randint(3, length + 1, (n,), generator=g)
    completion = torch.arange(length)[None] < ends[:, None]  # [N, L]
    views = build_views("tracerl", mu=2, seed=0, completion_mask=completion, prompt_ids=torch.zeros(n, 3).long(),
                        pad_id=0, reveal_step=reveal, shrink=1)  # fmt: skip
    targets = views.target_masks & completion[None]
    rewards = torch.randn(n, generator=g)
    values = torch.randn(targets.shape, generator=g).masked_fill(~targets, 0.0)
    return targets, reveal, completion, rewards, values


def gathered(x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[V, N, L] (each token a target of at most one view) -> [N, L] the token's value at its own view."""
    return (x * targets).sum(0)


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (1.0, 0.0), (0.9, 0.7), (0.5, 1.0)])
def test_returns_and_advantages_equal_the_release_on_identical_inputs(gamma, lam):
    targets, reveal, completion, rewards, values = trajectories()
    credit = trace_gae(token_rewards(rewards, targets), values, targets, gamma, lam)
    for i in range(rewards.shape[0]):
        v_i, r_i = gathered(values, targets)[i], rewards[i].item()
        r, a = release_returns_and_advantages(reveal[i], completion[i], v_i, r_i, gamma, lam)
        torch.testing.assert_close(gathered(credit.returns, targets)[i], r, rtol=0, atol=1e-6)
        torch.testing.assert_close(gathered(credit.advantages, targets)[i], a, rtol=0, atol=1e-6)
    assert not credit.returns[~targets].any() and not credit.advantages[~targets].any()


def test_gamma_lambda_one_give_the_reward_as_return_and_reward_minus_value_as_advantage():
    """The release's own assertions: gamma = lam = 1 gives R_j = r and A_j = r - V_j (the learned baseline in place of
    the group mean); gamma = 1, lam = 0 gives A_j = r_j - V_j + V*_{t_j+1}."""
    targets, _, _, rewards, values = trajectories(seed=1)
    credit = trace_gae(token_rewards(rewards, targets), values, targets, 1.0, 1.0)
    r = rewards[None, :, None].expand_as(targets)
    torch.testing.assert_close(credit.returns[targets], r[targets])
    torch.testing.assert_close(credit.advantages[targets], (r - values)[targets])
    one_step = trace_gae(token_rewards(rewards, targets), values, targets, 1.0, 0.0).advantages
    # by hand: V*_{next} of each view for each row (next view with a target)
    v_star = (values * targets).sum(-1) / targets.sum(-1).clamp_min(1)  # [V, N]
    r_tok = token_rewards(rewards, targets)
    for v, i in zip(*torch.nonzero(targets.any(-1), as_tuple=True), strict=True):
        later = [u for u in range(v + 1, targets.shape[0]) if targets[u, i].any()]
        nxt = v_star[later[0], i] if later else 0.0
        want = (r_tok[v, i] - values[v, i] + nxt)[targets[v, i]]
        torch.testing.assert_close(one_step[v, i][targets[v, i]], want)


def test_a_two_step_rollout_by_hand():
    """Steps {0, 1} then {2}: V = (1, 3 | 2), reward 4 on the last step's token, gamma 0.5, lam 0.5:
    r* = (0, 4), V* = (2, 2); R* = (2, 4); delta* = (0 - 2 + 1, 4 - 2) = (-1, 2); A* = (-1 + 0.5, 2) = (-0.5, 2);
    A = (0 - 1 + 1 + 0.5, 0 - 3 + 1 + 0.5 | 4 - 2) = (0.5, -1.5 | 2); R = (2, 2 | 4)."""
    targets = torch.tensor([[[True, True, False]], [[False, False, True]]])  # [2, 1, 3]
    values = torch.tensor([[[1.0, 3.0, 0.0]], [[0.0, 0.0, 2.0]]])
    credit = trace_gae(token_rewards(torch.tensor([4.0]), targets), values, targets, 0.5, 0.5)
    assert gathered(credit.advantages, targets).tolist() == [[0.5, -1.5, 2.0]]
    assert gathered(credit.returns, targets).tolist() == [[2.0, 2.0, 4.0]]


def test_a_trace_step_a_row_does_not_reach_is_skipped():
    """An empty view between two of a row's steps is not its 'next' step (the release's unique steps)."""
    targets = torch.tensor([[[True]], [[False]], [[False]]]).expand(3, 1, 1).clone()
    targets = torch.cat([targets, torch.tensor([[[False]], [[False]], [[True]]])], -1)  # tokens at views 0 and 2
    values = torch.tensor([[[1.0, 0.0]], [[0.0, 0.0]], [[0.0, 2.0]]])
    credit = trace_gae(token_rewards(torch.tensor([1.0]), targets), values, targets, 1.0, 0.0)
    assert gathered(credit.advantages, targets).tolist() == [[0.0 - 1.0 + 2.0, 1.0 - 2.0]]


def test_value_loss_and_gradient_equal_the_release_with_its_normalisation():
    g = torch.Generator().manual_seed(2)
    n, length, eps = 5, 8, 0.2
    p_mask = torch.rand(n, length, generator=g) < 0.5
    p_mask[:, 0] = True  # every release row has a target
    old, ret = torch.randn(n, length, generator=g), torch.randn(n, length, generator=g)
    base = (old + 0.5 * torch.randn(n, length, generator=g)).masked_fill(~p_mask, 0.0)
    ours_v, theirs_v = base.clone().requires_grad_(), base.clone().requires_grad_()
    ours = clipped_value_loss(ours_v, old, ret, p_mask, eps, norm="length").loss
    theirs = release_value_loss(theirs_v, old, ret, p_mask, eps)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)
    ours.backward(), theirs.backward()
    torch.testing.assert_close(ours_v.grad, theirs_v.grad, rtol=1e-6, atol=1e-8)
    assert ours_v.grad[p_mask].abs().sum() > 0  # both terms clip somewhere and not elsewhere
    out = clipped_value_loss(base, old, ret, p_mask, eps)
    assert 0 < out.clip_ratio < 1


def test_the_paper_normalisation_is_the_mean_over_each_rows_targets():
    g = torch.Generator().manual_seed(3)
    values, old, ret = (torch.randn(4, 6, generator=g) for _ in range(3))
    p_mask = torch.rand(4, 6, generator=g) < 0.5
    p_mask[0], p_mask[1, 2] = False, True  # a row without a target does not count
    per_token = 0.5 * torch.maximum((values - ret) ** 2, (old + (values - old).clamp(-0.1, 0.1) - ret) ** 2)
    rows = [per_token[i][p_mask[i]].mean() for i in range(4) if p_mask[i].any()]
    got = clipped_value_loss(values, old, ret, p_mask, 0.1).loss
    torch.testing.assert_close(got, torch.stack(rows).mean())


def test_value_clip_equals_the_release_policy_loss_and_gradient_with_per_token_advantages():
    """With the release's normalisation (z = L1 per row: the sum over targets / L1) ddmrl's value_clip is the
    release's policy loss on identical log-probs and per-token advantages, values and gradients."""
    targets, _, completion, rewards, values = trajectories(seed=4)
    adv = trace_gae(token_rewards(rewards, targets), values, targets, 1.0, 1.0).advantages
    v, n, length = targets.shape
    g = torch.Generator().manual_seed(5)
    old = -torch.rand(v, n, length, generator=g) * 2
    new = (old + 0.3 * torch.randn(v, n, length, generator=g)).requires_grad_()
    cfg = method_config("tracerl_value", {"beta": 0.01, "epsilon": 0.2})
    k = 0  # one view: the release's fragment rows of it are the rows with a target
    rows = targets[k].any(-1)
    x = ObjectiveInputs(logps=new[[k]][:, rows], old=old[[k]][:, rows], ref=old[[k]][:, rows],
                        advantages=torch.zeros(int(rows.sum())), weights=targets[[k]][:, rows].float(),
                        z=torch.full((int(rows.sum()),), float(length)), t=torch.zeros(1, int(rows.sum())),
                        targets=targets[[k]][:, rows], completion_mask=completion[rows], num_generations=2,
                        extras={"token_advantages": adv[[k]][:, rows]})  # fmt: skip
    ours = value_clip(x, cfg).loss
    mine = new.detach().clone().requires_grad_()
    theirs = release_policy_loss(mine[k][rows], old[k][rows], adv[k][rows], targets[k][rows], 0.2, 0.01)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    ours.backward(), theirs.backward()
    torch.testing.assert_close(new.grad, mine.grad, rtol=1e-5, atol=1e-8)
    assert new.grad.abs().sum() > 0


def test_value_clip_with_constant_advantages_is_token_clip():
    """A_j = A_i on every token (a zero value head, gamma = lam = 1): TraceRL's own objective."""
    targets, _, completion, rewards, _ = trajectories(seed=6)
    v, n, length = targets.shape
    g = torch.Generator().manual_seed(7)
    old = -torch.rand(v, n, length, generator=g)
    new = old + 0.2 * torch.randn(v, n, length, generator=g)
    adv = trace_gae(token_rewards(rewards, targets), torch.zeros_like(old), targets).advantages
    cfg = method_config("tracerl_value", {"beta": 0.04})
    common = dict(logps=new, old=old, ref=old, advantages=rewards, weights=targets.float(), z=None,
                  t=torch.zeros(v, n), targets=targets, completion_mask=completion, num_generations=2)  # fmt: skip
    ours = value_clip(ObjectiveInputs(**common, extras={"token_advantages": adv}), cfg)
    theirs = OBJECTIVES["token_clip"](ObjectiveInputs(**common), cfg)
    torch.testing.assert_close(ours.loss, theirs.loss)
    assert ours.terms.keys() == theirs.terms.keys()
    alone = value_clip(ObjectiveInputs(**common), cfg)  # no value model (the credit stage): the same
    torch.testing.assert_close(alone.loss, theirs.loss)


def test_the_value_model_is_the_policy_with_a_zero_value_head(make_model):
    policy = make_model(max_positions=12)
    before = {k: p.clone() for k, p in policy.state_dict().items()}
    value = ValueModel(policy)
    ids = torch.randint(0, 5, (3, 12))
    assert torch.equal(value(ids), torch.zeros(3, 12))
    for k, p in policy.state_dict().items():  # the policy is copied, never changed
        assert torch.equal(p, before[k]), k
    head = value.trunk.get_output_embeddings()
    assert head.weight.shape == (1, policy.config.hidden_size) and head.bias is None
    value(ids).sum().backward()
    assert head.weight.grad.abs().sum() > 0  # the head learns first (the trunk's gradients wait for a nonzero head)


def test_a_model_without_a_linear_output_head_is_refused(make_model, monkeypatch):
    """LLaDA with weight tying reads its logits off the embedding (no head to replace): refused, naming the class."""
    policy = make_model(max_positions=12)
    monkeypatch.setattr(type(policy), "get_output_embeddings", lambda self: self.tok)
    with pytest.raises(ValueError, match="TinyDDMForMaskedLM: a value model needs the model's linear output head"):
        ValueModel(policy)


# ------------------------------------------------------------------------------------------------- the loop


@pytest.fixture
def sudoku(monkeypatch, make_model):
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    return task, tok, make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)


def config(method="tracerl_value", **kw):
    shared = dict(max_steps=4, num_prompts=2, num_generations=4, num_iterations=2, learning_rate=1e-2, beta=0.01,
                  sampler=SamplerConfig(block_length=4, steps=4, temperature=1.0))  # fmt: skip
    return method_config(method, shared, **({"value_learning_rate": 1e-2} if method == "tracerl_value" else {}) | kw)


def draw(task):
    return lambda it: task.generate(2, seed=100 + it)


def test_the_policy_and_the_value_model_both_train(sudoku):
    task, tok, model = sudoku
    cfg = config()
    policy = copy.deepcopy(model)
    value = METHODS["tracerl_value"].value_model(cfg, policy)
    start = {k: p.clone() for k, p in value.state_dict().items()}
    curve, _ = train_grpo(policy, None, tok, task, draw(task), cfg, 0, RunLog(None), value_model=value)
    assert {"value_loss", "value_clip_ratio", "kl", "clip_ratio"} <= curve[0].keys()
    assert all(row["value_loss"] > 0 for row in curve)
    moved = [k for k, p in value.state_dict().items() if not torch.equal(p, start[k])]
    assert "trunk.lm_head.weight" in moved and len(moved) > 1  # the head, then the trunk through it
    assert any(not torch.equal(p, q) for p, q in zip(policy.parameters(), model.parameters(), strict=True))


def test_the_first_rollout_batch_trains_the_policy_as_tracerl(sudoku):
    """A zero value head gives every token its rollout's group advantage (gamma = lam = 1): the first rollout batch's
    policy update is TraceRL's."""
    task, tok, model = sudoku
    ours, theirs = copy.deepcopy(model), copy.deepcopy(model)
    curve, _ = train_grpo(ours, None, tok, task, draw(task), config(max_steps=2), 0, RunLog(None))
    ref_curve, _ = train_grpo(theirs, None, tok, task, draw(task), config("tracerl", max_steps=2), 0, RunLog(None))
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)
    assert curve[0]["reward"] == ref_curve[0]["reward"]


def test_the_loop_trains_the_policy_with_the_value_models_advantages(sudoku, monkeypatch):
    """Each rollout batch's per-token advantages are the GAE of the value model's values on its views (gamma = lambda
    = 1: the group advantage minus the token's value), and after the first batch the values are no longer zero."""
    task, tok, model = sudoku
    seen = []
    real = grpo_module.value_credit

    def spy(run, b):
        out = real(run, b)
        with torch.no_grad():  # the values again, from the value model as it is now
            now = torch.stack([run.value(x)[:, -out.extras["old_values"].shape[-1] :] for x in b.inputs])
        seen.append((out, now))
        return out

    monkeypatch.setattr(grpo_module, "value_credit", spy)
    train_grpo(copy.deepcopy(model), None, tok, task, draw(task), config(max_steps=6), 0, RunLog(None))
    assert len(seen) == 3
    for b, now in seen:
        t = grpo_module.view_targets_mask(b)
        torch.testing.assert_close(b.extras["old_values"][t], now[t])
        r = b.advantages[None, :, None].expand_as(t)
        torch.testing.assert_close(b.extras["returns"][t], r[t])
        torch.testing.assert_close(b.extras["token_advantages"][t], (r - b.extras["old_values"])[t])
        assert not b.extras["token_advantages"][~t].any()
    assert not seen[0][0].extras["old_values"].any() and seen[-1][0].extras["old_values"].abs().sum() > 0


def test_the_value_model_learns_the_returns_of_a_fixed_batch(make_model):
    """AdamW on the clipped value loss of fixed views and returns: the loss falls (a learning check, not a proof)."""
    torch.manual_seed(0)
    value = ValueModel(make_model(max_positions=12))
    ids = torch.randint(0, 5, (8, 12))
    targets = torch.rand(8, 12) < 0.5
    returns = torch.where(targets, torch.randn(8, 1).expand(8, 12), 0.0)  # one return per row, as gamma = 1 gives
    opt = torch.optim.AdamW(value.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        old = value(ids).detach()
        loss = clipped_value_loss(value(ids), old, returns, targets, 0.2).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]


def test_a_resumed_run_restores_the_value_model_and_its_optimiser(sudoku, tmp_path):
    """Killed after a checkpoint (stood for by a finished run whose checkpoint was kept), the rerun resumes there and
    ends with the uninterrupted run's policy, value model and curve, bit for bit."""
    task, tok, model = sudoku
    cfg = config(max_steps=8, save_steps=3)

    def run(ckpt):
        policy = copy.deepcopy(model)
        value = METHODS["tracerl_value"].value_model(cfg, model)
        curve, _ = train_grpo(policy, None, tok, task, draw(task), cfg, 0, RunLog(None), ckpt, value_model=value)
        return curve, policy, value

    ref_curve, ref_policy, ref_value = run(None)
    ckpt = Checkpointer(tmp_path / "ckpt", "value", keep=1)
    run(ckpt)
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["step-00000006"]
    curve, policy, value = run(ckpt)
    for a, b in ((policy, ref_policy), (value, ref_value)):
        for (name, p), q in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            assert torch.equal(p, q), name
    strip = [{k: v for k, v in r.items() if k != "time"} for r in curve]
    assert strip == [{k: v for k, v in r.items() if k != "time"} for r in ref_curve]


def test_a_value_model_is_saved_beside_the_policy(sudoku, tmp_path):
    from safetensors.torch import load_file

    from ddmrl.models.checkpoint import VALUE_DIR, load_checkpoint, save_checkpoint

    task, tok, model = sudoku
    value = ValueModel(model)
    with torch.no_grad():
        value.trunk.get_output_embeddings().weight.fill_(0.5)
    save_checkpoint(model, tok, tmp_path / "m", value_model=value)
    saved = load_file(str(tmp_path / "m" / VALUE_DIR / "model.safetensors"))
    assert saved.keys() == value.state_dict().keys()
    assert torch.equal(saved["trunk.lm_head.weight"], value.trunk.lm_head.weight)
    load_checkpoint(tmp_path / "m")  # the policy loads as before


def test_its_keys_are_checked_and_other_methods_have_no_value_model(make_model):
    from ddmrl.config import ConfigError

    with pytest.raises(ConfigError, match="value_lambda"):
        method_config("tracerl_value", {}, value_lambda=1.5)
    with pytest.raises(ConfigError, match="value_gamma"):
        method_config("tracerl", {}, value_gamma=0.9)  # its own key: only its runs take it
    assert METHODS["tracerl"].value_model(method_config("tracerl"), make_model()) is None


def test_a_value_model_for_a_method_without_one_is_refused(sudoku):
    task, tok, model = sudoku
    with pytest.raises(ValueError, match="method tracerl has none"):
        value = ValueModel(model)
        train_grpo(model, None, tok, task, draw(task), config("tracerl"), 0, RunLog(None), value_model=value)
