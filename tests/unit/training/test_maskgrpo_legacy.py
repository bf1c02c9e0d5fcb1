"""``maskgrpo_legacy``: MaskGRPO's released text objective end to end, against a transcription of its math.

The transcription below restates, in our words, what martian422/MaskGRPO ``grpo/mask_grpo_trainer.py`` computes for
``task=t2t, version=uni, remasking=arlike, mean_method=grpo`` (its ``remask_ar`` and ``compute_loss``):

* the ratio of iteration j (0-based): ``min(gamma + (1 - gamma)(j + 1) / mu, 0.999)``;
* ``remask_ar``: after ``set_seed(s_j)``, u = ``torch.rand((B, P + L))``; ``prompt_len = prompt_index[0].sum()`` is 1
  (the prompt index is one-dimensional), so the keep curve d = linspace(1, 0, P + L - 1) is scaled to
  ``d (1 - r)(P + L - 1) / sum d``, clamped at 1, prefixed with one 0, and position p is masked iff it is not a
  prompt position and u > keep[p];
* the loss mask is the stack of the mu masks (positions after the first EOS included), broadcast over the current
  view's per-token loss: loss = sum(l * M) / sum(M) with l = -min(rho A, clip(rho) A) + beta k3;
* advantages (r - mean) / (std + 1e-5), std unbiased; the view of micro-step m is ``_step % mu - 1`` (-1 read as
  mu - 1) with ``_step = m + 1``.
"""

from __future__ import annotations

import copy

import pytest
import torch
from fake_rewards import varied_reward
from float_error import InFloat64, agree, condition, forward_terms, scale

import ddmrl.objectives.token_clip as token_clip_module
import ddmrl.training.grpo as grpo_module
from ddmrl.config import GRPOConfig, SamplerConfig
from ddmrl.likelihood import token_logps
from ddmrl.masking.views import apply_view, legacy_mask_seeds
from ddmrl.methods.maskgrpo import Params as MaskGRPOParams
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.rollout import Rollouts
from ddmrl.tasks import make_task
from ddmrl.training.grpo import make_views, step_views, train_grpo, view_logps

# ------------------------------------------------------------------------------------------ the transcription


def released_ratio(j: int, mu: int, gamma: float) -> float:
    return min(gamma + (1 - gamma) * (j + 1) / mu, 0.999)


def released_remask_ar(batch: torch.Tensor, prompt_length: int, mask_id: int, seed: int, ratio: float):
    """(noisy batch, to_mask) of ``remask_ar`` on [B, P + L] with the global RNG seeded as ``set_seed`` does."""
    torch.manual_seed(seed)
    b, length = batch.shape
    prompt_index = torch.zeros(length, dtype=torch.bool)
    prompt_index[:prompt_length] = True
    prompt_len = prompt_index[0].sum().item()  # the released code's prompt length: 1
    non_prompt_len = length - prompt_len
    ratio = 1 - ratio
    ar_curve = torch.linspace(1, 0, non_prompt_len)
    tail = torch.clamp(ar_curve * (ratio * non_prompt_len) / ar_curve.sum(), max=1.0)
    ar_probs = torch.cat([torch.zeros(prompt_len), tail]).unsqueeze(0).expand(b, -1)
    random_matrix = torch.rand((b, length))
    to_mask = (~prompt_index) & (random_matrix > ar_probs)
    return torch.where(to_mask, mask_id, batch), to_mask


def released_advantages(rewards: torch.Tensor, g: int) -> torch.Tensor:
    grouped = rewards.view(-1, g)
    mean = grouped.mean(1).repeat_interleave(g)
    std = grouped.std(1).repeat_interleave(g)
    return (rewards - mean) / (std + 1e-5)


def released_loss(logps, old, ref, advantages, stacked_masks, epsilon: float, beta: float) -> torch.Tensor:
    """compute_loss, mean_method=grpo: [B, L] log-probs, [mu, B, L] stacked masks."""
    kl = torch.exp(ref - logps) - (ref - logps) - 1
    coef_1 = torch.exp(logps - old)
    coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon)
    per_token_loss = -torch.min(coef_1 * advantages.unsqueeze(1), coef_2 * advantages.unsqueeze(1)) + beta * kl
    mask = stacked_masks.int()
    return (per_token_loss * mask).sum() / mask.sum()


def released_view_index(micro_step: int, mu: int) -> int:
    index = (micro_step + 1) % mu - 1  # _step is incremented before compute_loss
    return mu - 1 if index == -1 else index


# ------------------------------------------------------------------------------------------ views and weights


def legacy_cfg(mu: int = 4, **kw) -> GRPOConfig:
    return MaskGRPOParams(method="maskgrpo", remasking="maskgrpo_fading", gamma=0.6, num_iterations=mu,
                      maskgrpo_legacy=True, **kw)  # fmt: skip


def batch_with_padding_and_eos() -> Rollouts:
    """N = 3 rollouts, P = 5 (row 2 left-padded), L = 12; row 0 ends early (EOS at 4, EOS padding after)."""
    prompt = torch.tensor([[2, 6, 7, 8, 9], [2, 9, 8, 7, 6], [1, 1, 2, 6, 6]])
    completion = torch.randint(5, 10, (3, 12), generator=torch.Generator().manual_seed(0))
    completion[0, 4:] = 3
    valid = torch.ones(3, 12, dtype=torch.bool)
    valid[0, 5:] = False
    return Rollouts(prompt, completion, valid, torch.arange(12).repeat(3, 1), [""] * 3, 0)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_legacy_views_are_the_released_remask_ar_masks(seed):
    """Identical inputs: every view's completion mask and model input equal the released code's for its mask seed,
    whose curve spans prompt + completion; post-EOS positions are masked like others and no token is forced."""
    b, mu, mask_id = batch_with_padding_and_eos(), 4, 0
    views, w, z, inputs = make_views(legacy_cfg(mu), b, seed, pad_id=1, mask_id=mask_id)
    seeds = legacy_mask_seeds(seed, mu)
    full = torch.cat([b.prompt_ids, b.completion_ids], 1)
    stacked = []
    for j in range(mu):
        noisy, to_mask = released_remask_ar(full, b.prompt_ids.shape[1], mask_id, seeds[j], released_ratio(j, mu, 0.6))
        assert torch.equal(views.masks[j], to_mask[:, 5:]) and not to_mask[:, :5].any()
        assert torch.equal(inputs[j], noisy) and torch.equal(apply_view(b.prompt_ids, b.completion_ids, views, j, 0),
                                                             noisy)  # fmt: skip
        stacked.append(to_mask[:, 5:])
    f = torch.stack(stacked).float().sum(0)
    assert z is None and torch.equal(w, f[None].expand(mu, 3, 12))  # the broadcast loss mask, post-EOS included
    assert f[0, 5:].sum() > 0


def test_the_released_curve_masks_more_than_the_ratio_and_ours_does_not():
    """MaskGRPO's ``remask_ar``: with the curve over prompt + completion the masked fraction exceeds r_j (0.633 ->
    about 0.75 at P = 120, L = 256); over the completion only (the default) it is r_j."""
    n, p, length = 2000, 120, 256
    cfg = legacy_cfg(12, num_generations=2)
    b = Rollouts(torch.full((n, p), 7), torch.full((n, length), 6), torch.ones(n, length, dtype=torch.bool),
                 None, [""] * n, 0)  # fmt: skip
    legacy = make_views(cfg, b, 0, 1, 0)[0].masks[0].float().mean().item()
    paper = MaskGRPOParams(**{**cfg.__dict__, "maskgrpo_legacy": False})
    ours = make_views(paper, b, 0, 1, 0)[0].masks[0].float().mean()
    assert legacy == pytest.approx(0.75, abs=0.01)
    assert ours.item() == pytest.approx(released_ratio(0, 12, 0.6), abs=0.01)


@pytest.mark.parametrize("ga", [1, 2, 3])
def test_legacy_view_index_is_m_mod_mu(ga):
    mu, cfg = 4, legacy_cfg(4, num_prompts=6, gradient_accumulation_steps=ga)
    views = make_views(cfg, batch_with_padding_and_eos(), 0, 1, 0)[0]
    got = [step_views(views, s, a, cfg)[0] for s in range(mu) for a in range(ga)]
    assert got == [released_view_index(m, mu) for m in range(mu * ga)] == [m % mu for m in range(mu * ga)]


# ------------------------------------------------------------------------------------------ the loop, end to end


@pytest.mark.parametrize("ga", [1, 2])
def test_the_loop_computes_the_released_loss(make_model, monkeypatch, ga):
    """One rollout batch of train_grpo with maskgrpo_legacy: at every micro-step the model input is the released
    code's perturbed sequence for view ``m % mu``, and the loss equals the released loss computed from the same
    log-probs (current, old and reference at that view), the released advantages and the stacked masks."""
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    seen = {}
    before = copy.deepcopy(policy)  # the rollout-time policy, which gives the old log-probs
    real_make_views, real_rewards = grpo_module.make_views, grpo_module.rewards
    real_objective = token_clip_module.token_clip

    def spy_views(cfg, batch, seed, pad_id, mask_id, step_advantages=None):
        seen["batch"], seen["seed"] = batch, seed
        seen["views"] = real_make_views(cfg, batch, seed, pad_id, mask_id, step_advantages)
        return seen["views"]

    def spy_rewards(*args):
        seen["rewards"] = real_rewards(*args)
        return seen["rewards"]

    def spy_objective(x, cfg):
        out = real_objective(x, cfg)
        seen.setdefault("steps", []).append((x, out.loss.detach()))
        return out

    monkeypatch.setattr(grpo_module, "make_views", spy_views)
    monkeypatch.setattr(grpo_module, "rewards", spy_rewards)
    monkeypatch.setattr(token_clip_module, "token_clip", spy_objective)  # OBJECTIVES looks it up
    mu, g, prompts = 3, 4, 2
    sampler = SamplerConfig(block_length=4, steps=10, temperature=1.0)
    cfg = legacy_cfg(
        mu, max_steps=mu, num_prompts=prompts, num_generations=g, gradient_accumulation_steps=ga, beta=0.04,
        epsilon=0.2, sampler=sampler,
    )  # fmt: skip
    train_grpo(policy, copy.deepcopy(policy), tok, task, lambda it: task.generate(prompts, seed=it), cfg, 0)

    b = seen["batch"]
    p = b.prompt_ids.shape[1]
    full = torch.cat([b.prompt_ids, b.completion_ids], 1)
    seeds = legacy_mask_seeds(seen["seed"], mu)
    released = [
        released_remask_ar(full, p, tok.mask_token_id, seeds[j], released_ratio(j, mu, 0.6)) for j in range(mu)
    ]
    stacked = torch.stack([m[:, p:] for _, m in released])  # [mu, N, L]
    advantages = released_advantages(seen["rewards"], g)
    rows_per_micro = prompts * g // ga
    assert len(seen["steps"]) == mu * ga
    inputs, before64 = seen["views"][3], InFloat64(before)
    with torch.no_grad():
        old64 = view_logps(before64, inputs, b.completion_ids)  # ddmrl's old pass in float64, every view
    for m, (x, loss) in enumerate(seen["steps"]):
        j, rows = released_view_index(m, mu), slice((m % ga) * rows_per_micro, (m % ga + 1) * rows_per_micro)
        assert torch.equal(x.advantages, advantages[rows])
        want = released_loss(x.logps[0], x.old[0], x.ref[0], advantages[rows], stacked[:, rows], 0.2, 0.04)
        # both losses of the same float32 log-probs, again in float64 (tests/float_error.py): agree there to 1e-10
        # of S = sum_t |c_t l_t| over the T current, old and reference log-probs, each float32 loss within
        # T eps32 S of its float64 value
        x64 = x._replace(**{k: v.detach().double() for k, v in x._asdict().items() if torch.is_tensor(v)})
        x64 = x64._replace(logps=x64.logps.requires_grad_(), old=x64.old.requires_grad_(),
                           ref=x64.ref.requires_grad_())  # fmt: skip
        loss64 = real_objective(x64, cfg).loss
        want64 = released_loss(x64.logps[0], x64.old[0], x64.ref[0], advantages[rows].double(), stacked[:, rows],
                               0.2, 0.04)  # fmt: skip
        cond = condition(loss64, [x64.logps, x64.old, x64.ref], [], 0)
        agree(f"the loss of micro-step {m}", (loss, loss64), (want, want64), *cond.of_loss())
        # the old log-probs are the rollout-time policy's on the released perturbed sequence of view j = m % mu: two
        # forward passes (ddmrl's batched old pass, the released sequence alone), each against float64 (S the
        # largest |log-prob|, n the pass's longest chain of sums)
        old = token_logps(before, released[j][0][rows], b.completion_ids[rows])
        with torch.no_grad():
            want_old64 = token_logps(before64, released[j][0][rows], b.completion_ids[rows])
        ours64 = old64[j][rows]
        agree(
            "the old log-probs",
            (x.old[0], ours64),
            (old, want_old64),
            scale(ours64),
            forward_terms(before, full.shape[1]),
        )
    # every log-prob of view j (old, reference, current) is taken on the released perturbed sequence of view j
    assert all(torch.equal(inputs[j], released[j][0]) for j in range(mu))


def test_maskgrpo_legacy_is_refused_elsewhere(tmp_path):
    from ddmrl.config import ConfigError

    with pytest.raises(ConfigError, match="maskgrpo_legacy"):
        GRPOConfig(method="unigrpo", remasking="unigrpo", maskgrpo_legacy=True)
    with pytest.raises(ConfigError, match="maskgrpo_legacy"):
        MaskGRPOParams(method="maskgrpo", remasking="maskgrpo_random", maskgrpo_legacy=True)
    with pytest.raises(ConfigError, match="legacy_micro_step_views"):
        legacy_cfg(legacy_micro_step_views=True)
