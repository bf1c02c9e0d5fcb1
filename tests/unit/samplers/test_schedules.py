"""The LLaDA sampler's RCR, ASS and EOSER options and its stored trajectories (ddmrl.samplers.schedules,
ddmrl.samplers.trajectory), against their definitions and transcriptions of the released code:

* RCR: MDPO's ``diffusion_generate(..., rcr=True)`` (autonomousvision/mdpo, ``src/mdlm_generation_utils.py``);
* ASS and EOSER: CJ-GRPO's ``get_block_sizes``, ``get_num_transfer_tokens_ass``, ``sampling``, ``ass_sampling`` and
  ``eoser_ass_generate`` (yjyddq/EOSER-ASS-RL, ``cj-grpo/cj_grpo_trainer_eoser_ass.py``).

The transcriptions keep the released control flow (one row at a time, ``torch.topk``); they exclude the mask token
from the proposals and their softmax, as ddmrl's sampler does (the released code leaves it to the model).
"""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import torch
from float_error import Float64Kept, agree, float64_copy, forward_terms, scale

import ddmrl.samplers.schedules as schedules
import ddmrl.samplers.trajectory as trajectory
from ddmrl.samplers.llada import generate
from ddmrl.samplers.schedules import ass_layout, ass_steps, eos_gamma
from ddmrl.samplers.trajectory import next_states, states_from_reveal

MASK, EOS = 0, 3


def test_doctests():
    assert doctest.testmod(schedules, verbose=False).failed == 0
    assert doctest.testmod(trajectory, verbose=False).failed == 0


def prompts(n: int = 3, p: int = 4, seed: int = 0) -> torch.Tensor:
    x = torch.randint(5, 10, (n, p), generator=torch.Generator().manual_seed(seed))
    x[0, 0] = 1  # a left pad
    return x


class EosLover(torch.nn.Module):
    """A model with ``bias`` added to the EOS logit everywhere (so that EOS is often proposed early)."""

    def __init__(self, model, bias: float = 2.0) -> None:
        super().__init__()
        self.model, self.bias = model, bias

    def forward(self, input_ids):
        out = self.model(input_ids)
        logits = out.logits.clone()
        logits[..., EOS] += self.bias
        return type(out)(logits=logits)


# --------------------------------------------------------------------------- ASS: transcription of the released code


def released_ass(gen_length: int, block_num: int, steps: int) -> tuple[list[int], list[list[int]], list[int]]:
    """``get_block_sizes`` + ``get_num_transfer_tokens_ass`` (batch of one), transcribed: block sizes, the steps of
    each block and the tokens transferred at each step."""
    s = int(torch.log2(torch.tensor(gen_length, dtype=torch.float32)).item())
    assert s == steps
    block_sizes, block_steps = [], []
    reminder, remaining_length = gen_length - 2**s, gen_length
    if block_num == 1:
        block_sizes.insert(0, remaining_length)
        block_steps.insert(0, list(range(s)))
        remaining_length = 0
    else:
        current_power = s - 1
        for block_idx in range(block_num - 1, -1, -1):
            if block_idx == block_num - 1:
                block_size = 2**current_power + 1 + reminder
                block_step = [current_power]
                current_power -= 1
            elif block_idx == 0:
                block_size = remaining_length
                block_step = list(range(current_power + 1))
            else:
                block_size = 2**current_power
                block_step = [current_power]
                current_power -= 1
            remaining_length -= block_size
            block_sizes.insert(0, block_size)
            block_steps.insert(0, block_step)
    assert remaining_length == 0
    num_transfer = [0] * steps
    for i in range(steps):
        if i == steps - 1:
            if len(block_sizes) == 1:
                num_transfer[i] = block_sizes[-1] - (2**i - 1)
            elif block_sizes[-1] > 2**i:
                num_transfer[i] = block_sizes[-1]
        else:
            num_transfer[i] = 2**i
    return block_sizes, block_steps, num_transfer


@pytest.mark.parametrize("length", [2, 3, 4, 7, 8, 12, 16, 20, 31, 100, 127, 128, 256, 257])
def test_ass_layout_is_the_released_block_and_step_schedule(length):
    s = ass_steps(length)
    assert s == max(1, math.floor(math.log2(length)))
    for blocks in range(1, s + 1):
        sizes, steps, counts = released_ass(length, blocks, s)
        layout = ass_layout(length, blocks)
        assert [hi - lo for lo, hi, _ in layout] == sizes
        assert [c for _, _, cs in layout for c in cs] == counts
        starts = np.cumsum([0] + [len(b) for b in steps])
        assert [list(range(a, a + len(cs))) for a, (_, _, cs) in zip(starts, layout, strict=False)] == steps
        assert layout[0][0] == 0 and layout[-1][1] == length
        assert all(a[1] == b[0] for a, b in zip(layout, layout[1:], strict=False))
        assert all(sum(cs) == hi - lo for lo, hi, cs in layout), "every block is fully revealed by its own steps"
    with pytest.raises(ValueError, match="blocks"):
        ass_layout(length, s + 1)


def test_ass_counts_are_powers_of_two_then_the_rest():
    """L = 256 (the papers' length): 8 steps revealing 1, 2, ..., 64 and then the 129 left (1 + ... + 64 = 127)."""
    assert ass_layout(256) == [(0, 256, [1, 2, 4, 8, 16, 32, 64, 129])]


# --------------------------------------------------------------------------- EOSER: the released factors


def released_eos_factor(step_idx, total_steps, ass, min_fac, max_fac=1.0):
    """The factor of ``sampling`` (linear) and ``ass_sampling`` (power of two), transcribed."""
    if step_idx is not None and total_steps is not None and total_steps > 1:
        if ass:
            t = (2 ** (step_idx + 1) - 1) / 2**total_steps
        else:
            t = min(max(step_idx, 0), total_steps - 1) / (total_steps - 1)
        return min_fac + (max_fac - min_fac) * t
    return max_fac


@pytest.mark.parametrize("steps", [1, 2, 5, 8, 128])
def test_eos_gamma_rises_to_one_as_released(steps):
    for schedule, gmin in (("linear", 0.4), ("ass", 0.01)):
        got = [eos_gamma(s, steps, schedule, gmin) for s in range(steps)]
        want = [released_eos_factor(s, steps, schedule == "ass", gmin) for s in range(steps)]
        assert got == pytest.approx(want, abs=1e-15)
        assert all(a <= b for a, b in zip(got, got[1:], strict=False)), "gamma never decreases"
        assert got[-1] == pytest.approx(1.0 if schedule == "linear" or steps == 1 else 1 - (1 - gmin) / 2**steps)
    assert eos_gamma(0, 8, "ass", 0.5, 0.9) == pytest.approx(0.5 + 0.4 / 256)


def reference_eoser_ass(model, prompt, gen_length, block_num, eos_id, eos_min_gamma=0.01):
    """``eoser_ass_generate`` at temperature 0 without CFG (remasking low_confidence), transcribed."""
    steps = int(torch.log2(torch.tensor(gen_length, dtype=torch.float32)).item())
    block_sizes, block_steps, num_transfer = released_ass(gen_length, block_num, steps)
    x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), MASK, dtype=torch.long)
    x[:, : prompt.shape[1]] = prompt.clone()
    current_pos = prompt.shape[1]
    for block_idx, block_size in enumerate(block_sizes):
        end_idx = current_pos + block_size
        for i in block_steps[block_idx]:
            mask_index = x == MASK
            logits = model(x).logits.float()
            logits[..., MASK] = -torch.inf  # ddmrl's sampler never proposes the mask token
            x0 = torch.argmax(logits, dim=-1)  # add_gumbel_noise is the identity at temperature 0
            p = torch.softmax(logits, dim=-1)
            x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)
            fac = released_eos_factor(i, steps, True, eos_min_gamma)
            x0_p = torch.where(x0 == eos_id, x0_p * fac, x0_p)
            x0_p[:, end_idx:] = -np.inf
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, torch.tensor(-np.inf))
            for j in range(confidence.shape[0]):
                num_tokens = num_transfer[i]
                if num_tokens > 0:
                    _, select_indices = torch.topk(confidence[j], k=num_tokens)
                    x[j, select_indices] = x0[j, select_indices]
        current_pos = end_idx
    return x[:, prompt.shape[1] :]


@pytest.mark.parametrize("blocks", [1, 2, 3])
def test_eoser_ass_sampler_is_the_released_decoder(sharp_model, blocks):
    """L = 12 (3 steps: 1, 2 and 9 tokens); a random model that likes EOS. EOSER changes the samples."""
    model = EosLover(sharp_model)
    p = prompts()
    want = reference_eoser_ass(model, p, 12, blocks, EOS)
    kw = {"mask_id": MASK, "block_length": 4, "steps": 0, "schedule": "ass", "ass_blocks": blocks, "eos_id": EOS}
    out = generate(model, p, 12, eoser=True, eos_min_gamma=0.01, **kw)
    assert torch.equal(out.completion_ids, want)
    assert out.nfe == 3
    for s, n in enumerate([1, 2, 9]):
        assert (out.reveal_step == s).sum(1).tolist() == [n] * 3
    plain = generate(model, p, 12, **kw)
    # with 3 blocks every step reveals its whole block: EOSER has no choice to change
    assert torch.equal(plain.completion_ids, out.completion_ids) == (blocks == 3)


def test_eoser_delays_eos_on_known_confidences(fixed_logits_model):
    """Two positions, two steps (one token each), linear EOSER with gamma_min 0.4: position 0 proposes EOS with
    probability 0.9, position 1 another token with 0.5. Without EOSER EOS goes first (0.9 > 0.5); with it, step 0
    scores EOS 0.4 x 0.9 = 0.36 < 0.5, so position 1 goes first."""
    vocab = 6
    table = torch.full((4, vocab), -1e9)
    table[:, MASK] = 100.0

    def put(row, probs):  # logits whose softmax over the non-mask tokens is ``probs``
        table[row, 1:] = torch.log(torch.tensor(probs))

    put(2, [0.025, 0.025, 0.9, 0.025, 0.025])  # EOS = 3 (index 2 of the non-mask tokens)
    put(3, [0.5, 0.2, 0.1, 0.1, 0.1])
    model = fixed_logits_model(table)
    kw = {"mask_id": MASK, "block_length": 2, "steps": 2, "eos_id": EOS}
    plain = generate(model, torch.tensor([[7, 7]]), 2, **kw)
    rejected = generate(model, torch.tensor([[7, 7]]), 2, eoser=True, **kw)
    assert plain.reveal_step.tolist() == [[0, 1]] and plain.completion_ids.tolist() == [[EOS, 1]]
    assert rejected.reveal_step.tolist() == [[1, 0]] and rejected.completion_ids.tolist() == [[EOS, 1]]


# --------------------------------------------------------------------------- RCR: transcription of MDPO's sampler


def reference_rcr(model, prompt, gen_length, steps, num_transfer):
    """MDPO's ``diffusion_generate`` with ``rcr=True``, one block, temperature 0, conf_alg llada, transcribed (the
    per-step transfer counts ``num_transfer`` [steps] given). Returns the completions and the state before each
    step."""
    x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), MASK, dtype=torch.long)
    x[:, : prompt.shape[1]] = prompt.clone()
    end_idx = prompt.shape[1] + gen_length
    overtime_confidence = torch.zeros_like(x, dtype=torch.float32)
    states = []
    for i in range(steps):
        mask_index = x == MASK
        states.append(x.clone()[:, -gen_length:])
        logits = model(x).logits.float()
        logits[..., MASK] = -torch.inf
        p = torch.softmax(logits, dim=-1)
        confidence, x0 = p.max(dim=-1)
        confidence[:, end_idx:] = -np.inf
        x0 = torch.where(mask_index, x0, x)
        confidence = torch.where(mask_index, confidence, torch.tensor(-np.inf))
        for j in range(confidence.shape[0]):
            _, select_indices = torch.topk(confidence[j], k=int(sum(num_transfer[i:])))
            x[j, select_indices] = x0[j, select_indices]
            overtime_confidence[j, select_indices] = confidence[j, select_indices].clone()
            if i != (steps - 1):
                overtime_conf_wo_zeros = torch.where(overtime_confidence == 0.0, 1.0, overtime_confidence)[j]
                num_tokens_to_mask = int(sum(num_transfer[i + 1 :]))
                _, mask_select_indices = torch.topk(overtime_conf_wo_zeros, k=num_tokens_to_mask, largest=False)
                if len(mask_select_indices) == 0:
                    break
                x[j, mask_select_indices] = MASK
    return x[:, -gen_length:], states


@pytest.mark.parametrize("steps", [3, 6, 12])
def test_rcr_is_mdpo_running_confidence_remasking(sharp_model, steps):
    """One block of 12 at temperature 0: the same completions and the same states as MDPO's RCR."""
    model = sharp_model
    p = prompts()
    out = generate(model, p, 12, mask_id=MASK, block_length=12, steps=steps, remasking="rcr", record_trajectory=True)
    counts = [12 // steps] * steps
    want, states = reference_rcr(model, p, 12, steps, counts)
    assert torch.equal(out.completion_ids, want)
    assert torch.equal(out.trajectory.states, torch.stack(states))
    assert out.nfe == steps
    # the masks left after each step follow the schedule
    after = next_states(out.trajectory.states, out.completion_ids)
    assert [(after[s] == MASK).sum(1).tolist() for s in range(steps)] == [[12 - 12 // steps * (s + 1)] * 3
                                                                          for s in range(steps)]  # fmt: skip
    if steps == 12:  # one token per step: here two committed tokens are revised on the way
        before, now = out.trajectory.states[:-1], out.trajectory.states[1:]
        revised = (before != MASK) & (now == MASK)
        assert bool(revised.any()), "RCR re-masks committed low-confidence tokens"


@pytest.mark.parametrize("rcr_scope", ["sequence", "block"])
def test_rcr_reveal_step_is_the_last_commit_and_only_block_scope_keeps_blocks_in_order(sharp_model, rcr_scope):
    """Blocks of 4, 6 steps over 12 tokens (2 per block, 2 tokens each): a token's reveal step is the last step at
    which it became (and stayed) unmasked. With rcr_scope block every block is finished before the next starts; with
    MDPO's rule (sequence) a token of an earlier block can be re-masked and revised during a later block (here some
    are), and the masks left after each step still follow the schedule."""
    model = sharp_model
    kw = {"mask_id": MASK, "block_length": 4, "steps": 6, "remasking": "rcr", "temperature": 1.0}
    out = generate(
        model, prompts(), 12, **kw, rcr_scope=rcr_scope, record_trajectory=True,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    after = next_states(out.trajectory.states, out.completion_ids)
    for i in range(3):
        for k in range(12):
            unmasked_from = [s for s in range(6) if bool((after[s:, i, k] != MASK).all())]
            assert out.reveal_step[i, k].item() == min(unmasked_from)
    assert [(after[s] == MASK).sum(1).tolist() for s in range(6)] == [[10 - 2 * s] * 3 for s in range(6)]
    blocks = out.reveal_step.view(3, 3, 4)
    in_order = bool((blocks[:, :-1].amax(-1) < blocks[:, 1:].amin(-1)).all())
    assert in_order == (rcr_scope == "block")


# --------------------------------------------------------------------------- stored trajectories


@pytest.mark.parametrize(
    "kw",
    [
        {"steps": 6},
        {"steps": 12, "remasking": "random"},
        {"steps": 4, "cfg_scale": 1.0},
        {"steps": 0, "schedule": "ass", "eoser": True, "eos_id": EOS},
        {"steps": 6, "remasking": "rcr", "eoser": True, "eos_id": EOS},
    ],
)
def test_recording_changes_nothing_and_keeps_every_step(sharp_model, kw):
    """Recording never changes the samples; each step's state, prediction and confidence are what the model saw and
    proposed: x̂_0^(s) fills the masks of x_s with the step's proposals, the confidence is their probability (1 at the
    positions x_s already holds)."""
    model = sharp_model
    base = {"mask_id": MASK, "block_length": 4, "temperature": 1.0}
    plain = generate(model, prompts(), 12, **base, **kw, generator=torch.Generator().manual_seed(3))
    out = generate(
        model, prompts(), 12, **base, **kw, record_trajectory=True, generator=torch.Generator().manual_seed(3)
    )
    assert plain.trajectory is None
    assert torch.equal(out.completion_ids, plain.completion_ids) and torch.equal(out.reveal_step, plain.reveal_step)
    traj = out.trajectory
    steps = traj.states.shape[0]
    assert traj.states.shape == traj.predictions.shape == traj.confidence.shape == (steps, 3, 12)
    assert steps * (2 if kw.get("cfg_scale") else 1) == out.nfe
    assert bool((traj.states[0] == MASK).all())
    unmasked = traj.states != MASK
    assert torch.equal(traj.predictions[unmasked], traj.states[unmasked])
    assert not bool((traj.predictions == MASK).any())
    after = next_states(traj.states, out.completion_ids)
    committed = (traj.states == MASK) & (after != MASK)
    assert torch.equal(after[committed], traj.predictions[committed]), "a step commits its own predictions"

    # the confidence is the model's probability of the prediction, from the state's own forward pass
    def probability(model, x, predictions):  # [N, L] and the logits
        logits = model(x).logits.float()
        if kw.get("cfg_scale"):
            uncond = x.clone()
            uncond[:, :4] = MASK
            logits = model(uncond).logits.float() + (1 + kw["cfg_scale"]) * (logits - model(uncond).logits.float())
        logits[..., MASK] = -torch.inf
        return torch.softmax(logits, -1)[:, 4:].gather(-1, predictions[..., None]).squeeze(-1), logits

    with Float64Kept():
        model64 = float64_copy(model)
    for s in (0, steps - 1):
        x = torch.cat([prompts(), traj.states[s]], 1)
        masked = traj.states[s] == MASK
        prob, _ = probability(model, x, traj.predictions[s])
        with Float64Kept():
            prob64, logits64 = probability(model64, x, traj.predictions[s])
        # tolerance from float32's error (tests/float_error.py): the sampler draws the states in float32, so only
        # the recomputation reruns in float64, and each float32 side is checked against it (checks 2 and 3). p moves
        # by p times its log-prob's error, at most twice the (guided: 2 w + 1 times the) logits' n eps32 S_logits
        w = kw.get("cfg_scale", 0.0)
        s_prob = scale(prob64[masked]) * (1 + 2 * (2 * w + 1) * scale(logits64[logits64.isfinite()]))
        ours, theirs = (traj.confidence[s][masked], prob64[masked]), (prob[masked], prob64[masked])
        agree("the confidences", ours, theirs, s_prob, forward_terms(model, x.shape[1]))
        assert bool((traj.confidence[s][~masked] == 1).all())


def test_states_rebuilt_from_reveal_steps_are_the_stored_ones_without_remasking(sharp_model):
    """A sampler that never re-masks is described by its reveal steps: the rebuilt states equal the recorded ones.
    Under RCR they do not (tokens are revised), which is why its trajectory must be stored."""
    model = sharp_model
    kw = {"mask_id": MASK, "block_length": 4, "steps": 6, "temperature": 1.0, "record_trajectory": True}
    for extra in ({}, {"schedule": "ass", "steps": 0}):
        out = generate(model, prompts(), 12, **{**kw, **extra}, generator=torch.Generator().manual_seed(1))
        rebuilt = states_from_reveal(out.completion_ids, out.reveal_step, MASK)
        assert torch.equal(rebuilt, out.trajectory.states)
    rcr = {**kw, "block_length": 12, "steps": 12, "temperature": 0.0, "remasking": "rcr"}  # revises two tokens
    out = generate(model, prompts(), 12, **rcr)
    assert not torch.equal(states_from_reveal(out.completion_ids, out.reveal_step, MASK), out.trajectory.states)


@pytest.mark.parametrize(
    "kw", [{"remasking": "rcr"}, {"schedule": "ass"}, {"eoser": True, "eos_id": EOS}, {"record_trajectory": True}]
)
def test_new_options_run_in_the_plain_sampler_only_and_are_seeded(make_model, kw):
    model = make_model(max_positions=16)
    base = {"mask_id": MASK, "block_length": 4, "steps": 6, "temperature": 1.0}
    with pytest.raises(ValueError, match="plain sampler"):
        generate(model, prompts(), 12, **base, **kw, kv_cache="prefix")
    with pytest.raises(ValueError, match="plain sampler"):
        generate(model, prompts(), 12, **base, **kw, parallel="threshold")
    torch.manual_seed(5)
    want = torch.rand(2)
    torch.manual_seed(5)
    a = generate(model, prompts(), 12, **base, **kw, generator=torch.Generator().manual_seed(2))
    assert torch.equal(torch.rand(2), want), "the global RNG is left alone"
    b = generate(model, prompts(), 12, **base, **kw, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.reveal_step, b.reveal_step)


def test_bad_options_are_refused(make_model):
    model = make_model(max_positions=16)
    base = {"mask_id": MASK, "block_length": 4, "steps": 6}
    with pytest.raises(ValueError, match="eos_id"):
        generate(model, prompts(), 12, **base, eoser=True)
    with pytest.raises(ValueError, match="schedule"):
        generate(model, prompts(), 12, **base, schedule="cosine")
    with pytest.raises(ValueError, match="blocks"):
        generate(model, prompts(), 12, **base, schedule="ass", ass_blocks=4)
    with pytest.raises(ValueError, match="remasking"):
        generate(model, prompts(), 12, **base, remasking="bogus")
