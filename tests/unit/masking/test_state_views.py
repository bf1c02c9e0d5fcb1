"""Views built from the sampler's stored states (ddmrl.masking.views: cj_grpo, mdpo_topk, StepStates)."""

from __future__ import annotations

import pytest
import torch

from ddmrl.masking import VIEWS, ViewSampler, view_sampler
from ddmrl.masking.views import apply_view, build_views, mask_frequency, spread
from ddmrl.samplers.llada import generate
from ddmrl.samplers.trajectory import Trajectory, next_states

MASK, PAD = 0, 1


def prompts(n: int = 4, p: int = 3) -> torch.Tensor:
    return torch.randint(5, 10, (n, p), generator=torch.Generator().manual_seed(0))


def sample(model, **kw):
    kw = {"mask_id": MASK, "block_length": 4, "steps": 6, "temperature": 1.0, "record_trajectory": True, **kw}
    return generate(model, prompts(), 12, generator=torch.Generator().manual_seed(0), **kw)


def views(kind, out, valid=None, **kw):
    n, length = out.completion_ids.shape
    return build_views(
        kind,
        mu=kw.pop("mu", 3),
        seed=0,
        completion_mask=torch.ones(n, length, dtype=torch.bool) if valid is None else valid,
        prompt_ids=prompts(),
        pad_id=PAD,
        reveal_step=out.reveal_step,
        completion_ids=out.completion_ids,
        mask_id=MASK,
        **kw,
    )


def test_the_view_samplers_records_say_which_read_the_samplers_states():
    """Traits are read by name, without importing the samplers; a sampler outside the package has the defaults."""
    assert {v for v in VIEWS if view_sampler(v).states} == {"cj_grpo", "mdpo_topk", "rldf"}
    assert {v for v in VIEWS if view_sampler(v).legacy} == {"maskgrpo_fading", "espo", "rldf"}
    assert {v for v in VIEWS if not view_sampler(v).per_step} == {"tracerl", "gdpo_quadrature", "block_random",
                                                                    "coupled", "tree", "dipo", "rldf"}  # fmt: skip
    assert view_sampler("mylab.views:halves") == ViewSampler("mylab.views:halves")
    assert VIEWS.module("cj_grpo") == "ddmrl.masking.views" and callable(VIEWS["cj_grpo"])


@pytest.mark.parametrize("kw", [{}, {"schedule": "ass", "steps": 0}, {"remasking": "rcr"}])
def test_cj_grpo_views_are_the_rollouts_transitions(make_model, kw):
    """View s is the state x_s; its targets are the tokens step s unmasked, trained towards the state after the step;
    every optimiser step uses every view; each token is a target once per commit: exactly once (F = 1) without
    re-masking; under RCR (MDPO's rule, over the whole completion so far) a committed token can be re-masked in a
    later block and committed again, and is then a target at each of its commits."""
    out = sample(make_model(max_positions=16), **kw)
    v = views("cj_grpo", out, trajectory=out.trajectory)
    traj = out.trajectory
    s = traj.states.shape[0]
    assert v.masks.shape == (s, 4, 12) and v.steps == (tuple(range(s)),) * 3
    assert torch.equal(v.masks, traj.states == MASK)
    after = next_states(traj.states, out.completion_ids)
    assert torch.equal(v.targets, (traj.states == MASK) & (after != MASK))
    assert torch.equal(v.states.target_ids, after) and torch.equal(v.states.inputs, traj.states)
    frequency = mask_frequency(v, torch.ones(4, 12, dtype=torch.bool))  # [N, L]
    commits = ((traj.states == MASK) & (after != MASK)).sum(0)  # [N, L] transitions masked -> filled
    assert torch.equal(frequency, commits) and bool((commits >= 1).all())
    if kw.get("remasking") != "rcr":
        assert bool((frequency == 1).all())
    for j in range(s):  # the model input is the state itself
        assert torch.equal(
            apply_view(prompts(), out.completion_ids, v, j, MASK), torch.cat([prompts(), traj.states[j]], 1)
        )


def test_cj_grpo_views_without_a_stored_trajectory_are_rebuilt_from_reveal_steps(make_model):
    """Without re-masking the reveal steps describe the trajectory: the same views; they equal TraceRL's trace views
    with shrink 1 (masks and targets), the estimator both papers share."""
    out = sample(make_model(max_positions=16))
    stored, rebuilt = views("cj_grpo", out, trajectory=out.trajectory), views("cj_grpo", out)
    for a, b in ((stored.masks, rebuilt.masks), (stored.targets, rebuilt.targets)):
        assert torch.equal(a, b)
    assert torch.equal(stored.states.target_ids, rebuilt.states.target_ids)
    trace = views("tracerl", out, shrink=1)
    assert torch.equal(trace.masks, stored.masks) and torch.equal(trace.targets, stored.targets)


def test_under_rcr_the_states_differ_from_the_completion(sharp_model):
    """Tokens committed and later revised: the stored state holds what the model saw, not the final token."""
    out = sample(sharp_model, remasking="rcr", block_length=12, steps=12)
    traj = out.trajectory
    shown = traj.states != MASK
    assert not torch.equal(traj.states[shown], out.completion_ids.expand_as(traj.states)[shown])


def toy_trajectory():
    """S = 3 steps of 2 rollouts of L = 4 with hand-made states, predictions and confidences."""
    m = MASK
    states = torch.tensor(
        [[[m, m, m, m], [m, m, m, m]], [[5, m, m, m], [m, m, 7, m]], [[5, 6, m, m], [m, 8, 7, m]]]
    )  # [S, N, L]
    predictions = torch.tensor(
        [[[5, 6, 7, 8], [9, 8, 7, 6]], [[5, 6, 6, 6], [5, 8, 7, 5]], [[5, 6, 7, 7], [6, 8, 7, 5]]]
    )
    confidence = torch.rand(3, 2, 4, generator=torch.Generator().manual_seed(0))
    return Trajectory(states, predictions, confidence), torch.tensor([[5, 6, 7, 7], [6, 8, 7, 5]])


def test_mdpo_views_take_each_rollouts_top_k_states_by_hand():
    """Per-step advantages: rollout 0 (0.1, -2, 0.5), rollout 1 (3, 0.2, -1). K = 2: rollout 0 keeps steps 1, 2,
    rollout 1 steps 0, 2 (largest |A| first). View j of rollout i is x_s of its j-th step, every masked position a
    target, trained towards x̂_0^(s), weighted by the step's confidences; the 2 views spread over mu = 2 steps."""
    traj, final = toy_trajectory()
    adv = torch.tensor([[0.1, -2.0, 0.5], [3.0, 0.2, -1.0]])
    n, length = final.shape
    v = build_views(
        "mdpo_topk", mu=2, seed=0, completion_mask=torch.ones(n, length, dtype=torch.bool), prompt_ids=prompts(2),
        pad_id=PAD, completion_ids=final, mask_id=MASK, trajectory=traj, step_advantages=adv, sample_train_steps=2,
    )  # fmt: skip
    assert v.states.step.tolist() == [[1, 0], [2, 2]]
    for j, steps in enumerate(([1, 0], [2, 2])):
        for i, s in enumerate(steps):
            assert torch.equal(v.states.inputs[j, i], traj.states[s, i])
            assert torch.equal(v.states.target_ids[j, i], traj.predictions[s, i])
            assert torch.equal(v.states.confidence[j, i], traj.confidence[s, i])
            assert torch.equal(v.masks[j, i], traj.states[s, i] == MASK)
    assert v.target_masks is v.masks and v.steps == ((0,), (1,))
    kw = {"completion_mask": torch.ones(n, length, dtype=torch.bool), "prompt_ids": prompts(2), "pad_id": PAD}
    with pytest.raises(ValueError, match="per-step advantages"):
        build_views("mdpo_topk", mu=2, seed=0, **kw, completion_ids=final, mask_id=MASK, trajectory=traj)


def test_spread_uses_every_view_once_in_order():
    assert spread(8, 4) == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert spread(4, 4) == ((0,), (1,), (2,), (3,))
    assert spread(5, 2) == ((0, 1), (2, 3, 4))
    assert spread(2, 4) == ((0,), (1,), (0,), (1,))
