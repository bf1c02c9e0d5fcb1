"""The llada sampler's inpainting option (``clamp``; IGPO's hints, ddmrl.samplers.llada)."""

from __future__ import annotations

import pytest
import torch

from ddmrl.samplers.llada import generate

MASK = 0
L = 12


def canvas() -> torch.Tensor:
    """[3, L]: row 0 no hint, row 1 hints at 2..5, row 2 hints at 0..3 and 8..11 (a whole block clamped)."""
    c = torch.full((3, L), MASK)
    c[1, 2:6] = torch.tensor([6, 7, 8, 9])
    c[2, 0:4] = torch.tensor([9, 8, 7, 6])
    c[2, 8:12] = torch.tensor([6, 6, 7, 7])
    return c


def prompts() -> torch.Tensor:
    return torch.randint(5, 10, (3, 4), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("schedule", ["linear", "ass"])
@pytest.mark.parametrize("remasking", ["low_confidence", "random"])
def test_clamped_positions_keep_their_tokens_at_every_step_and_the_rest_is_filled(make_model, remasking, schedule):
    """Every stored state of the run holds the hint tokens at the clamped positions (the sampler never masks or
    overwrites them), the final completion equals them there, has no mask left elsewhere, and their reveal step is
    -1 while every sampled token has one."""
    c, hinted = canvas(), canvas() != MASK
    out = generate(
        make_model(max_positions=16), prompts(), L, mask_id=MASK, block_length=4, steps=6, temperature=1.0,
        remasking=remasking, schedule=schedule, record_trajectory=True, clamp=c,
        generator=torch.Generator().manual_seed(1),
    )  # fmt: skip
    assert torch.equal(out.completion_ids[hinted], c[hinted])
    assert not bool((out.completion_ids == MASK).any())
    assert bool((out.reveal_step[hinted] == -1).all()) and bool((out.reveal_step[~hinted] >= 0).all())
    for state in out.trajectory.states:  # [N, L] the input of every step
        assert torch.equal(state[hinted], c[hinted])


def test_no_hint_is_the_plain_sampler_bit_for_bit(make_model):
    """An all-mask canvas changes nothing: the same completions and reveal steps as without ``clamp``."""
    model, kw = make_model(max_positions=16), dict(mask_id=MASK, block_length=4, steps=6, temperature=1.0)
    plain = generate(model, prompts(), L, generator=torch.Generator().manual_seed(2), **kw)
    clamped = generate(
        model, prompts(), L, generator=torch.Generator().manual_seed(2), clamp=torch.full((3, L), 0), **kw
    )
    assert torch.equal(plain.completion_ids, clamped.completion_ids)
    assert torch.equal(plain.reveal_step, clamped.reveal_step)


def test_a_clamped_block_takes_no_step_and_the_others_keep_their_schedule(make_model):
    """Blocks of 4, 2 steps each: each block's schedule splits its free positions only. Row 1 (hints at 2..5) has
    2 free positions in blocks 0 and 1 (one per step) and 4 in block 2 (two per step); row 2's first and last
    blocks are all hints and take no token, its middle block two per step."""
    out = generate(
        make_model(max_positions=16), prompts(), L, mask_id=MASK, block_length=4, steps=6, temperature=0.0,
        clamp=canvas(),
    )  # fmt: skip
    per_step = [(out.reveal_step[1] == s).sum().item() for s in range(6)]
    assert per_step == [1, 1, 1, 1, 2, 2]
    assert sorted(out.reveal_step[2].tolist()) == [-1] * 8 + [2, 2, 3, 3]


@pytest.mark.parametrize("option", [{"kv_cache": "prefix"}, {"parallel": "threshold"}, {"remasking": "rcr"}])
def test_clamp_is_refused_outside_the_plain_sampler(make_model, option):
    with pytest.raises(ValueError, match="clamp"):
        generate(
            make_model(max_positions=16), prompts(), L, mask_id=MASK, block_length=4, steps=6, clamp=canvas(), **option
        )
