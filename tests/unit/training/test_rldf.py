"""RLDF (He et al. 2026, Reinforcement Learning from Denoising Feedback, arXiv 2605.25638; ant-research/Drift): its
step draws and views, its advantages, and its loss and gradient against a transcription of the release on identical
inputs.

The transcription below restates, in our words, what ant-research/Drift computes (``trainer/masking_strategy.py``,
``trainer/main_rl.py``'s ``DriftTrainer``, ``rollout/llada_rollout.py``; configs/*.yaml for the settings):

* ``remap_step_map_continuous``: each rollout's step map renumbered 0, 1, ... over the distinct steps of its valid
  tokens, every other position 0;
* ``_build_sequential_masking``: per rollout (one ``torch.Generator`` seeded once, the rollouts in order; a rollout
  without valid tokens skipped), the candidate steps are the renumbered steps with a valid token, each weighted by
  -mean log clamp(p, 1e-10) of its tokens' rollout probabilities (a float32 mean, ``.item()``), and
  ``_sample_k_indices`` draws k of them (uniform: T = inf or T >= 1e4, or weights of std < 1e-8, by ``randperm``;
  T = 0: ``topk``, or all then the argmax repeated; else ``multinomial`` of softmax(w / T), without replacement when
  there are at least k candidates, else all then k - C with replacement); a drawn step s gives should_mask =
  step_map >= s and current_pos = step_map == s; rollouts are padded with dummy steps (all-false masks);
* ``compute_loss``: advantages (r - mean) / clamp(std + 1e-8, min 0.01) (Bessel std per group of
  ``num_generations``);
* ``_compute_loss``: per schedule step i, the completion's should_mask positions set to the mask id, log-softmax in
  float32, the completion tokens' log-probs; the effective mask should_mask * completion_mask, then (threshold > 0)
  kept where the filter log-prob (old at num_iterations > 1, else the current, detached) is >= log threshold, or-ed
  with current_pos & completion_mask; per token -logp A (num_iterations 1) or -min(r A, clip(r, 1 -/+ eps) A);
  plus beta times k3 (exp(ref - cur) - 1 - (ref - cur)); reduced by loss_norm (token: the step's sum over the mask's
  sum; sample: the mean over rollouts of each rollout's), divided by the number of steps and summed (one backward
  per step, one optimiser step).

The release's model is not the method: both sides score their views with the same tiny model, so the views, the
filter, the normalisations and the clipping are what is compared.
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple

import pytest
import torch
from float_error import InFloat64, agree, computed, condition, loss_and_gradient_agree

from ddmrl.config import ConfigError, method_config
from ddmrl.likelihood import token_logps
from ddmrl.masking.rldf import committed_probs, rldf_masks, select_steps
from ddmrl.methods import METHODS
from ddmrl.objectives import OBJECTIVES
from ddmrl.objectives.advantages import group_advantages
from ddmrl.rollout import Rollouts
from ddmrl.samplers.trajectory import Trajectory, states_from_reveal
from ddmrl.seeding import derive_seed, generator
from ddmrl.training.grpo import Batch, make_views, objective_inputs, step_views, view_targets

METHOD = METHODS["rldf"]
UNIFORM_TEMP_THRESHOLD = 1e4

# ------------------------------------------------------------------------------------------ the transcription


def released_remap(step_map: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    remapped = torch.zeros_like(step_map)
    for i in range(step_map.shape[0]):
        mask = completion_mask[i].bool()
        if not mask.any():
            continue
        _, inverse = step_map[i][mask].unique(sorted=True, return_inverse=True)
        remapped[i][mask] = inverse
    return remapped


def released_sample_k(num_candidates, k, step_weights, temperature, rng):
    is_uniform = step_weights is None
    if not is_uniform:
        weights = torch.tensor(step_weights, dtype=torch.float32)
        if weights.std() < 1e-8:
            is_uniform = True
    if is_uniform:
        if num_candidates >= k:
            return torch.randperm(num_candidates, generator=rng)[:k].tolist()
        selected = list(range(num_candidates)) * (k // num_candidates)
        if k % num_candidates > 0:
            selected += torch.randperm(num_candidates, generator=rng)[: k % num_candidates].tolist()
        return selected
    if temperature == 0:
        if num_candidates >= k:
            return weights.topk(k)[1].tolist()
        return list(range(num_candidates)) + [int(weights.argmax().item())] * (k - num_candidates)
    sampling_probs = torch.softmax(weights / temperature, dim=0)
    if num_candidates >= k:
        return torch.multinomial(sampling_probs, k, replacement=False, generator=rng).tolist()
    extra = torch.multinomial(sampling_probs, k - num_candidates, replacement=True, generator=rng)
    return list(range(num_candidates)) + extra.tolist()


def released_schedule(step_map, completion_mask, token_probs, k, seed, temperature):
    """``build_masking_schedule(strategy="sequential_masking")`` on one process: [B] lists of (step, should_mask,
    current_pos)."""
    rng = torch.Generator()
    rng.manual_seed(seed)
    is_uniform = math.isinf(temperature) or temperature >= UNIFORM_TEMP_THRESHOLD
    b_size, gen_len = step_map.shape
    inputs = [[] for _ in range(b_size)]
    for b in range(b_size):
        sample_step_map, sample_completion_mask = step_map[b], completion_mask[b]
        max_step = sample_step_map.max().item()
        if max_step <= 0:  # dummy steps (also for a rollout decoded in one step: its renumbered map is all 0)
            continue
        candidates, step_weights = [], []
        for s in range(0, int(max_step) + 1):
            step_mask = (sample_step_map == s) & sample_completion_mask.bool()
            if step_mask.sum().item() == 0:
                continue
            candidates.append(s)
            if not is_uniform:
                probs = token_probs[b][step_mask].float().clamp(min=1e-10)
                step_weights.append(-probs.log().mean().item())
        if not candidates:
            continue
        chosen = released_sample_k(len(candidates), k, None if is_uniform else step_weights, temperature, rng)
        for step in [candidates[i] for i in chosen]:
            inputs[b].append((step, sample_step_map >= step, sample_step_map == step))
    most = max(max((len(m) for m in inputs), default=0), 1)
    for m in inputs:
        while len(m) < most:
            m.append((-1, torch.zeros(gen_len, dtype=torch.bool), torch.zeros(gen_len, dtype=torch.bool)))
    return inputs


def released_advantages(rewards: torch.Tensor, g: int) -> torch.Tensor:
    grouped = rewards.view(-1, g)
    mean_r = grouped.mean(dim=1).repeat_interleave(g)
    std_r = grouped.std(dim=1).repeat_interleave(g)
    return (rewards - mean_r) / (std_r + 1e-8).clamp(min=1e-2)


def released_loss(model, batch, schedule, adv, old, ref, mask_id, c) -> torch.Tensor:
    """``DriftTrainer._compute_loss``'s summed per-step losses (its gradient is the accumulated one); ``old`` and
    ``ref`` [K, B, L] at the schedule's steps, ``c`` the settings."""
    full_seq = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    prompt_len = batch.prompt_ids.shape[1]
    completion_mask = batch.completion_mask
    b_size = full_seq.shape[0]
    total_steps = len(schedule[0])
    total = 0.0
    for i in range(total_steps):
        should_masks = torch.stack([schedule[b][i][1] for b in range(b_size)])
        cur_pos = torch.stack([schedule[b][i][2] for b in range(b_size)])
        step_effective_mask = should_masks.float() * completion_mask.float()
        masked_input = full_seq.clone().detach()
        masked_input[:, prompt_len:][should_masks] = mask_id
        logits = model(masked_input).logits[:, prompt_len:, :]
        log_probs = torch.nn.functional.log_softmax(logits.float(), dim=-1)
        cur = torch.gather(log_probs, dim=-1, index=batch.completion_ids.unsqueeze(-1)).squeeze(-1)
        if c.threshold > 0:
            with torch.no_grad():
                filter_logps = old[i] if c.num_iterations > 1 else cur
                low = filter_logps < math.log(c.threshold)
                prob_valid = step_effective_mask * (~low).float()
                step_effective_mask = (prob_valid.bool() | (cur_pos.bool() & completion_mask.bool())).float()
        if c.num_iterations == 1:
            per_token = -cur * adv.unsqueeze(1)
        else:
            ratio = torch.exp(cur - old[i])
            clamped = torch.clamp(ratio, 1.0 - c.eps, 1.0 + c.eps)
            per_token = -torch.min(ratio * adv.unsqueeze(1), clamped * adv.unsqueeze(1))
        if c.beta > 0:
            log_r = ref[i] - cur
            per_token = per_token + ((torch.exp(log_r) - 1.0) - log_r) * c.beta
        if c.loss_norm == "sample":
            per_sample = (per_token * step_effective_mask).sum(dim=1) / step_effective_mask.sum(dim=1).clamp(min=1)
            total = total + per_sample.mean() / total_steps
        else:
            total = (
                total + (per_token * step_effective_mask).sum() / step_effective_mask.sum().clamp(min=1) / total_steps
            )
    return total


# ------------------------------------------------------------------------------------------ inputs


def rollouts(n: int, prompt_length: int, length: int, seed: int, steps: int = 7) -> Rollouts:
    """Random tokens and reveal steps (several tokens per step, gaps, steps revealing only padding), a first EOS at a
    random position (the valid tokens up to it), a stored trajectory whose confidences are the tokens' rollout
    probabilities. Row 1: one step for every valid token; row 2: equal probabilities (the uniform fallback)."""
    g = torch.Generator().manual_seed(seed)
    reveal = torch.randint(0, steps, (n, length), generator=g)
    reveal[1] = torch.where(torch.arange(length) < length // 2, 3, reveal[1])
    ends = torch.randint(length // 2, length, (n,), generator=g)
    ends[1] = length // 2 - 1
    valid = torch.arange(length)[None] <= ends[:, None]
    prompt = torch.randint(5, 10, (n, prompt_length), generator=g)
    completion = torch.randint(5, 10, (n, length), generator=g)
    confidence = torch.rand(steps, n, length, generator=g) * 0.98 + 0.01
    confidence[:, 2] = 0.5
    states = states_from_reveal(completion, reveal, 0)
    traj = Trajectory(states, completion[None].expand_as(states), confidence)
    return Rollouts(prompt, completion, valid, reveal, [""] * n, 0, traj)


def token_probs(batch: Rollouts) -> torch.Tensor:
    """[N, L] each token's probability at the step that revealed it, by index."""
    n, length = batch.completion_ids.shape
    return torch.tensor(
        [[float(batch.trajectory.confidence[batch.reveal_step[i, k], i, k]) for k in range(length)] for i in range(n)]
    )


def config(**kw):
    base = dict(num_prompts=2, num_generations=4, num_iterations=1, sampler={"kv_cache": "none"})
    return method_config("rldf", base, **kw)


# ------------------------------------------------------------------------------------------ the method


def test_what_rldf_fixes_and_its_defaults():
    p = config()
    assert METHOD.fixed() == {"remasking": "rldf"}
    assert (METHOD.objective, METHOD.weighting) == ("rldf", "rldf")
    assert p.views_per_step == 4 and p.rldf_low_prob_threshold == 0.6 and p.scale_rewards == "rldf"
    assert p.epsilon == 0.2 and p.loss_type == "token_mean" and not p.rldf_release_views
    assert METHOD.advantage_eps(p) == 1e-8 and not METHOD.legacy_views(p)
    assert METHOD.legacy_views(config(rldf_release_views=True))


def test_its_views_need_the_plain_sampler_and_a_threshold_below_one():
    with pytest.raises(ConfigError, match="sampler.kv_cache"):
        method_config("rldf", dict(num_prompts=2, num_generations=4, sampler={"kv_cache": "prefix"}))
    with pytest.raises(ConfigError, match="rldf_low_prob_threshold"):
        config(rldf_low_prob_threshold=1.0)


# ------------------------------------------------------------------------------------------ (a) advantages


def test_the_advantages_are_the_releases_with_the_std_floor():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.003, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5])  # std 0.0015 < 0.01
    ours, zero_std = group_advantages(rewards, 4, "rldf", METHOD.advantage_eps(config()))
    want = released_advantages(rewards, 4)
    # one subtraction, one std, one division: a few float32 roundings of values <= 1.5 in magnitude
    assert torch.allclose(ours, want, rtol=0, atol=8 * torch.finfo(torch.float32).eps)
    assert abs(float(ours[4]) - 0.00225 / 0.01) < 1e-4  # the floor, not 1 / (std + eps)
    assert zero_std.tolist() == [False, False, True] and torch.equal(ours[8:], torch.zeros(4))


# ------------------------------------------------------------------------------------------ (b) the views


@pytest.mark.parametrize("temperature", [1.0, 0.5, 0.0, math.inf, 2e4])
@pytest.mark.parametrize("k", [2, 4, 9])
def test_the_drawn_steps_and_masks_are_the_releases(temperature, k):
    """With the same generator seed, the steps drawn for every rollout, their masks and their current tokens are the
    release's (``legacy``: its renumbered steps, its masks after the EOS, no view of a rollout decoded in one step),
    in every regime of the draw. By default the masks are the sampler's states x_s (every position revealed at s or
    later), equal to the release's on the valid tokens, and a rollout decoded in one step has k views of it."""
    batch = rollouts(6, 3, 12, seed=k)
    valid = batch.completion_mask.clone()
    valid[5] = False  # a rollout without valid tokens: dummy views
    probs = token_probs(batch)
    assert torch.equal(probs, committed_probs(batch.trajectory, batch.reveal_step))
    step_map = released_remap(batch.reveal_step, valid)
    theirs = released_schedule(step_map, valid, probs, k, 11, temperature)
    chosen = select_steps(batch.reveal_step, valid, probs, k, temperature, torch.Generator().manual_seed(11), False)
    masks, targets = rldf_masks(batch.reveal_step, valid, chosen, k, legacy=True)
    assert len(theirs[0]) == k and chosen[5] == [] and chosen[1] == []
    for i in range(6):
        for j in range(k):
            step, should_mask, current = theirs[i][j]
            assert torch.equal(masks[j, i], should_mask), (i, j)
            assert torch.equal(targets[j, i], current & valid[i]), (i, j)
            if i in (1, 5):
                assert step == -1
                continue
            assert step == int(step_map[i][(batch.reveal_step[i] == chosen[i][j]) & valid[i]][0])
    paper_steps = select_steps(batch.reveal_step, valid, probs, k, temperature, torch.Generator().manual_seed(11))
    paper, paper_targets = rldf_masks(batch.reveal_step, valid, paper_steps, k)
    assert paper_steps[1] == [3] * k and paper_steps[0] == chosen[0]  # the first rollout's draws are the same
    for j in range(k):
        s = paper_steps[0][j]
        assert torch.equal(paper[j, 0], batch.reveal_step[0] >= s)
        assert torch.equal(paper[j, 0] & valid[0], masks[j, 0] & valid[0])  # the modes differ after the EOS only
        assert torch.equal(paper_targets[j, 1], valid[1])  # the one step's tokens
    assert not paper[:, 5].any()


def test_the_heavier_steps_are_drawn_more_often():
    """The draw follows softmax(mean surprisal): over many seeds the step whose tokens were least likely is drawn
    first far more often than the surest one (exact probabilities: 0.9 and 0.1 committed, two steps)."""
    reveal = torch.tensor([[0, 0, 1, 1]])
    valid = torch.ones(1, 4, dtype=torch.bool)
    probs = torch.tensor([[0.9, 0.9, 0.1, 0.1]])
    first = [select_steps(reveal, valid, probs, 1, 1.0, torch.Generator().manual_seed(s))[0][0] for s in range(400)]
    p_hard = math.exp(-math.log(0.1)) / (math.exp(-math.log(0.1)) + math.exp(-math.log(0.9)))  # 10 / 11.11
    share = first.count(1) / 400
    assert abs(share - p_hard) < 4 * math.sqrt(p_hard * (1 - p_hard) / 400)  # 4 binomial standard deviations


def test_make_views_draws_from_the_stored_confidences_and_every_step_uses_every_view(tok):
    """The loop's views: drawn from the trajectory's confidences at the reveal steps with the view seed of the
    rollout batch (``rldf_release_views``: the release's schedule itself), every optimiser step on every view, the
    masked valid tokens weighted, the views' inputs masked where the views are."""
    batch = rollouts(8, 3, 12, seed=3)
    cfg = config(num_iterations=2, views_per_step=3, rldf_release_views=True)
    views, weights, _, inputs = make_views(cfg, batch, 5, tok.pad_token_id, tok.mask_token_id)
    step_map = released_remap(batch.reveal_step, batch.completion_mask)
    theirs = released_schedule(step_map, batch.completion_mask, token_probs(batch), 3, derive_seed(5, "view"), 1.0)
    for i in range(8):
        for j in range(3):
            assert torch.equal(views.masks[j, i], theirs[i][j][1])
            assert torch.equal(views.target_masks[j, i], theirs[i][j][2] & batch.completion_mask[i])
    assert views.steps == ((0, 1, 2), (0, 1, 2)) and not views.prompt_masks.any()
    assert torch.equal(weights, (views.masks & batch.completion_mask[None]).float())
    assert torch.equal(inputs[:, :, 3:] == tok.mask_token_id, views.masks)
    paper, *_ = make_views(config(views_per_step=3), batch, 5, tok.pad_token_id, tok.mask_token_id)
    assert not views.masks[:, 1].any() and torch.equal(
        paper.target_masks[:, 1], batch.completion_mask[1].expand(3, 12)
    )
    with pytest.raises(ValueError, match="stored trajectory"):
        make_views(cfg, batch._replace(trajectory=None), 5, tok.pad_token_id, tok.mask_token_id)


def test_under_remasking_a_view_is_the_stored_state_its_step_started_from(tok):
    """A token revealed at step 1, re-masked at step 3 and revealed for good at step 5 (running-confidence
    remasking) is visible in the views of steps 2 and 3, as in the sampler's states, though its reveal step is 5."""
    batch = rollouts(8, 3, 12, seed=3)
    reveal = batch.reveal_step.clone()
    reveal[0, 0], reveal[0, 1] = 5, 2
    states = states_from_reveal(batch.completion_ids, reveal, tok.mask_token_id)  # [S, N, L]
    states[2:4, 0, 0] = batch.completion_ids[0, 0]
    batch = batch._replace(reveal_step=reveal, trajectory=batch.trajectory._replace(states=states))
    views, *_ = make_views(config(views_per_step=20), batch, 5, tok.pad_token_id, tok.mask_token_id)
    steps = select_steps(reveal, batch.completion_mask, token_probs(batch), 20, 1.0, generator(5, "view"))
    assert 2 in steps[0]
    for j, s in enumerate(steps[0]):
        assert torch.equal(views.masks[j, 0], states[s, 0] == tok.mask_token_id)
        assert views.masks[j, 0, 0] == (s not in (2, 3) and s <= 5)
    legacy, *_ = make_views(config(views_per_step=20, rldf_release_views=True), batch, 5, tok.pad_token_id,
                            tok.mask_token_id)  # fmt: skip
    assert legacy.masks[steps[0].index(2), 0, 0]  # the release's masks know the last reveal step only


# ------------------------------------------------------------------------------------------ (c) loss and gradient


class Settings(NamedTuple):
    num_iterations: int
    loss_norm: str
    beta: float
    threshold: float
    eps: float = 0.2


REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])


def perturbed(shape, seed: int, size: float) -> torch.Tensor:
    return size * (2 * torch.rand(shape, generator=torch.Generator().manual_seed(seed)) - 1)


def both_sides(tok, model, batch, c: Settings, legacy: bool, dtype):
    """ddmrl's first optimiser step of a rollout batch (every view) and the release's, at old log-probs off the
    current ones by up to 0.5 nats at num_iterations > 1 (the clip at work; at 1 the current ones, as the release's
    REINFORCE) and reference ones off by up to 0.5 nats (the KL at work)."""
    loss_type = "seq_mean" if c.loss_norm == "sample" else "token_mean"
    cfg = config(num_iterations=c.num_iterations, beta=c.beta, loss_type=loss_type,
                 rldf_low_prob_threshold=c.threshold, rldf_release_views=legacy)  # fmt: skip
    views, weights, z, inputs = make_views(cfg, batch, 3, tok.pad_token_id, tok.mask_token_id)
    adv = released_advantages(REWARDS, 4).to(dtype)
    b = Batch(batch, REWARDS, adv, torch.zeros(2, dtype=torch.bool), views, weights, z, inputs,
              view_targets(views, batch.completion_ids))  # fmt: skip
    ids = step_views(views, 0, 0, cfg)
    with torch.no_grad():
        current = torch.stack([token_logps(model, inputs[v], b.target_ids[v]) for v in ids])  # [V, N, L]
    old = current if c.num_iterations == 1 else (current + perturbed(current.shape, 1, 0.5).to(dtype))
    ref = (current + perturbed(current.shape, 2, 0.5).to(dtype)).detach()
    logps = torch.stack([token_logps(model, inputs[v], b.target_ids[v]) for v in ids])
    x = objective_inputs(b, old, ref, logps, ids, slice(None), 4)
    out = OBJECTIVES[METHOD.objective](x, cfg)
    params = list(model.parameters())
    cond = condition(out.loss, [logps], params, inputs.shape[-1])
    ours = computed(out.loss, params)
    if legacy:  # the release's own schedule, drawn from the same seed
        step_map = released_remap(batch.reveal_step, batch.completion_mask)
        probs = token_probs(batch)
        schedule = released_schedule(step_map, batch.completion_mask, probs, 4, derive_seed(3, "view"), 1.0)
    else:  # the release's loss on ddmrl's views (the paper's states; the views are checked above)
        schedule = [[(j, views.masks[j, i], views.target_masks[j, i]) for j in ids] for i in range(8)]
    other = copy.deepcopy(model)
    theirs_loss = released_loss(other, batch, schedule, adv, old, ref, tok.mask_token_id, c)
    theirs = computed(theirs_loss, list(other.parameters()))
    return ours, theirs, cond, out.terms


CASES = [
    (Settings(1, "token", 0.01, 0.1), False),
    (Settings(1, "sample", 0.04, 0.1), True),
    (Settings(2, "token", 0.01, 0.1), True),
    (Settings(2, "sample", 0.0, 0.0), False),
    (Settings(3, "sample", 0.04, 0.1), False),
]


@pytest.mark.parametrize(("c", "legacy"), CASES)
def test_loss_and_gradient_equal_the_release_on_identical_inputs(tok, make_model, c, legacy):
    """One optimiser step over RLDF's four views of two groups: at num_iterations > 1 the loss and its gradient are
    the release's PPO-clip ones; at num_iterations 1 the gradient is the release's REINFORCE gradient (ratio 1: the
    clipped ratio's gradient is -A grad log pi; the values differ by construction, -A r against -A log pi per token,
    docs/reproduction.md).
    The filter (threshold 0.1 here, so that the tiny model's tokens are both kept and dropped) and both loss norms.

    Tolerances from float32's error (tests/float_error.py): both sides also run in float64 (the model, the
    advantages and the log-probs) and agree there to 1e-10 of the condition measure S, the check of the formulas; in
    float32 each is within n eps32 S of its float64 value and the two within 2 n eps32 S (n = T for the loss,
    T (P + L) for a gradient)."""
    model = make_model(max_positions=15, seed=2)
    batch = rollouts(8, 3, 12, seed=7)
    o32, t32, _, terms = both_sides(tok, model, batch, c, legacy, torch.float32)
    o64, t64, cond, _ = both_sides(tok, InFloat64(model), batch, c, legacy, torch.float64)
    assert o32.loss != 0
    if c.threshold:
        assert 0 < terms["rldf/kept"] < 1  # the filter drops some masked tokens and keeps others
    if c.num_iterations > 1:
        loss_and_gradient_agree(o32, t32, o64, t64, cond)
        return
    for i, (s, n) in enumerate(cond.of_grads()):
        agree(f"gradient {i}", (o32.grads[i], o64.grads[i]), (t32.grads[i], t64.grads[i]), s, n)


def test_the_filter_keeps_the_likely_masked_tokens_and_the_steps_own(tok, make_model):
    """At threshold tau the kept tokens of a view are its masked valid tokens of probability >= tau and its step's
    tokens; at 0 every masked valid token."""
    from ddmrl.objectives.rldf import kept

    model = make_model(max_positions=15, seed=2)
    batch = rollouts(8, 3, 12, seed=7)
    cfg = config()
    views, weights, z, inputs = make_views(cfg, batch, 3, tok.pad_token_id, tok.mask_token_id)
    b = Batch(batch, REWARDS, released_advantages(REWARDS, 4), torch.zeros(2, dtype=torch.bool), views, weights, z,
              inputs, view_targets(views, batch.completion_ids))  # fmt: skip
    with torch.no_grad():
        logps = torch.stack([token_logps(model, inputs[v], b.target_ids[v]) for v in range(4)])
    x = objective_inputs(b, logps, None, logps, (0, 1, 2, 3), slice(None), 4)
    for v in range(4):
        masked = views.masks[v] & batch.completion_mask
        want = (masked & (logps[v].exp() >= 0.1)) | views.target_masks[v] & batch.completion_mask
        assert torch.equal(kept(x, v, 0.1, True), want)
        assert torch.equal(kept(x, v, 0.0, True), masked)


def test_credit_of_a_kept_token_is_its_share_of_each_views_token_mean(tok, make_model):
    """The credit stage (``ddmrl.diagnostics.token_credit``) on RLDF at mu 1: each view's kept tokens share its loss
    equally (token mean), the views are averaged, so a token's credit is sum_v [kept in v] / (V |K_v|): the filter's
    dropped tokens get none from the view that drops them."""
    from ddmrl.diagnostics import token_credit
    from ddmrl.objectives.rldf import kept

    model = make_model(max_positions=15, seed=2)
    batch = rollouts(8, 3, 12, seed=7)
    cfg = config(rldf_low_prob_threshold=0.1)
    adv = released_advantages(REWARDS, 4)
    credit = token_credit(model, cfg, batch, adv, 3, tok.pad_token_id, tok.mask_token_id)
    views, weights, z, inputs = make_views(cfg, batch, 3, tok.pad_token_id, tok.mask_token_id)
    b = Batch(batch, REWARDS, adv, torch.zeros(2, dtype=torch.bool), views, weights, z, inputs,
              view_targets(views, batch.completion_ids))  # fmt: skip
    with torch.no_grad():
        logps = torch.stack([token_logps(model, inputs[v], b.target_ids[v]) for v in range(4)])
    x = objective_inputs(b, logps, None, logps, (0, 1, 2, 3), slice(None), 4)
    k = torch.stack([kept(x, v, 0.1, True) for v in range(4)]).float()  # [V, N, L]
    want = (k / (4 * k.sum((1, 2), keepdim=True))).sum(0) * (adv != 0)[:, None]  # [N, L]
    # a sum of 4 positive quotients per token and a division by |A|: a few float32 roundings relative to each value
    assert torch.allclose(credit, want, rtol=16 * torch.finfo(torch.float32).eps, atol=0)
