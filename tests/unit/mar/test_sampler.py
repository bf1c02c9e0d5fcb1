"""MAR's sampler (ddmrl.mar.sampler) and TinyMAR (ddmrl.mar.model): the AR schedule, what a rollout records, and
that the model round-trips through save_pretrained."""

from __future__ import annotations

import pytest
import torch

from ddmrl.config import MarSamplerConfig
from ddmrl.errors import DataError
from ddmrl.io import read_json, write_json
from ddmrl.mar.diffusion import posterior_mean
from ddmrl.mar.model import TinyMAR, load_mar, save_mar
from ddmrl.mar.sampler import ar_schedule, generate, schedule_of


def test_ar_schedule_is_mars_cosine_schedule():
    # floor(64 cos(pi/2 * s/8)) for s = 1..7, then 0
    assert ar_schedule(64, 8) == [62, 59, 53, 45, 35, 24, 12, 0]
    assert ar_schedule(4, 4) == [3, 2, 1, 0]
    assert ar_schedule(64, 1) == [0]
    assert ar_schedule(5, 5) == [4, 3, 2, 1, 0]  # at least one revealed per step, one kept until the last
    with pytest.raises(ValueError, match="ar_steps"):
        ar_schedule(4, 5)


@pytest.mark.parametrize("drafts", [False, True])
def test_a_rollout_records_every_state(tiny, drafts):
    model, sampler = tiny(), MarSamplerConfig(ar_steps=5, diffusion_steps=4)
    sched = schedule_of(model, sampler)
    prompts = model.encode_prompts(["a photo of a bar", "a photo of two pluses"]).repeat_interleave(2, 0)
    roll = generate(model, prompts, 5, sched, torch.Generator().manual_seed(0), drafts=drafts)
    s_steps, b, n = 5, 4, 64
    assert roll.masks.shape == (s_steps + 1, b, n) and roll.trajectories.shape == (s_steps, 5, b, n, 3)
    assert roll.masks[0].all() and not roll.masks[-1].any()
    assert bool((roll.masks[1:] <= roll.masks[:-1]).all())  # nested
    assert torch.equal(roll.committed.sum(0), torch.ones(b, n, dtype=torch.long))  # each token revealed once
    unknown = [64, *ar_schedule(64, 5)]
    assert roll.committed.sum(-1).tolist() == [[unknown[s] - unknown[s + 1]] * b for s in range(s_steps)]
    for s in range(s_steps):
        c = roll.committed[s]
        assert torch.equal(roll.final[c], roll.trajectories[s, 0][c])  # the image holds each step's samples
        assert bool((roll.tokens[s][roll.masks[s]] == 0).all())  # unknown tokens are not seen
        assert torch.equal(roll.tokens[s][~roll.masks[s]], roll.final[~roll.masks[s]])
        sampled = roll.trajectories[s].abs().sum((0, -1)) > 0
        assert torch.equal(sampled, roll.masks[s] if drafts else c)
        z = model.conditions(roll.prompt_ids, roll.tokens[s], roll.masks[s])
        assert torch.allclose(roll.conditions[c], z[c], atol=1e-6)  # the condition each token was revealed under
        traj = roll.trajectories[s][:, c]  # the last head step is the recomputed mean, exactly
        k0 = torch.zeros(traj.shape[1], dtype=torch.long)
        mean = posterior_mean(sched, traj[1], k0, model.head(traj[1], sched.timesteps[k0], z[c]))
        assert torch.allclose(traj[0], mean, atol=1e-6)
    assert roll.codes.shape == (b, n)
    again = generate(model, prompts, 5, sched, torch.Generator().manual_seed(0), drafts=drafts)
    assert torch.equal(again.final, roll.final)  # a generator fixes the images
    assert roll.head_passes == 4 * (sum(unknown[:-1]) if drafts else 64)


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_conditions_ignore_unknown_values_and_see_known_ones(tiny, positions):
    model = tiny(1, position_embedding=positions)
    prompt = model.encode_prompts(["a photo of a red bar"])
    tokens, mask = torch.randn(1, 64, 3), torch.zeros(1, 64, dtype=torch.bool)
    mask[0, :32] = True
    other = tokens.clone()
    other[0, :32] = 5.0  # unknown tokens changed: nothing changes
    assert torch.allclose(model.conditions(prompt, tokens, mask), model.conditions(prompt, other, mask), atol=1e-6)
    other[0, 40] = 5.0  # a known token changed: the conditions of unknown tokens change (bidirectional)
    before, after = model.conditions(prompt, tokens, mask), model.conditions(prompt, other, mask)
    assert not torch.allclose(before[0, :32], after[0, :32])


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_conditions_ignore_the_prompts_padding(tiny, positions):
    model = tiny(3, position_embedding=positions)
    ids = model.encode_prompts(["a photo of a bar"])  # 5 words, 5 padding slots
    tokens, mask = torch.randn(1, 64, 3), torch.rand(1, 64) < 0.5
    before = model.conditions(ids, tokens, mask)
    with torch.no_grad():
        model.word_embed.weight[0].normal_()  # what a padding slot would contribute, were it attended to
    assert torch.allclose(model.conditions(ids, tokens, mask), before, atol=1e-6)


def test_rope_has_no_position_parameters_and_sees_where_a_token_is(tiny):
    model = tiny(4, position_embedding="rope")
    assert not any("pos" in name for name, _ in model.named_parameters())
    ids = model.encode_prompts(["a photo of a bar"])
    tokens, mask = torch.zeros(1, 64, 3), torch.ones(1, 64, dtype=torch.bool)
    z = model.conditions(ids, tokens, mask)  # every token unknown: only its position tells them apart
    assert not torch.allclose(z[0, 0], z[0, 9], atol=1e-4)
    with pytest.raises(ValueError, match="position_embedding"):
        tiny(0, position_embedding="sincos")


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_prompts_and_save_pretrained_round_trip(tiny, tmp_path, positions):
    model = tiny(2, position_embedding=positions)
    ids = model.encode_prompts(["a photo of a bar", "a photo of an orange plus and a blue tee"])
    assert ids.shape == (2, 10) and (ids[0, 5:] == 0).all() and (ids[1] != 0).sum() == 10
    with pytest.raises(ValueError, match="unknown word"):
        model.encode_prompts(["a photo of a cat"])
    model.save_pretrained(tmp_path)
    loaded = TinyMAR.from_pretrained(tmp_path).eval()
    tokens, mask = torch.randn(2, 64, 3), torch.rand(2, 64) < 0.5
    assert torch.equal(model.conditions(ids, tokens, mask), loaded.conditions(ids, tokens, mask))
    x, t, z = torch.randn(5, 3), torch.tensor([0, 5, 50, 500, 999]), torch.randn(5, 32)
    assert torch.equal(model.head(x, t, z), loaded.head(x, t, z))


def test_load_mar_refuses_weights_of_another_architecture(tiny, tmp_path):
    """transformers would initialise missing weights at random and load on: load_mar names the mismatch instead."""
    save_mar(tiny(0), tmp_path / "m")
    assert torch.equal(load_mar(tmp_path / "m").mask_embed, tiny(0).mask_embed)
    config = read_json(tmp_path / "m" / "config.json")
    write_json(tmp_path / "m" / "config.json", {**config, "position_embedding": "rope"})
    with pytest.raises(DataError, match="weights do not match TinyMAR.*image_pos"):
        load_mar(tmp_path / "m")


def test_a_fresh_head_predicts_zero_noise(tiny):
    """MAR's initialisation: the adaLN modulations and the output layer start at zero."""
    model = tiny(0, random_head=False)
    assert model.head(torch.randn(4, 3), torch.tensor([1, 2, 3, 4]), torch.randn(4, 32)).abs().max() == 0
