"""Deterministic per-unit seeds (ddmrl.seeding)."""

from __future__ import annotations

import torch

from ddmrl.seeding import derive_seed, generator, seed_everything


def test_derive_seed_is_deterministic_and_63_bit():
    assert derive_seed(0, "grpo", 1) == derive_seed(0, "grpo", 1)
    seeds = [derive_seed(s, part, i) for s in range(3) for part in ("view", "rollout") for i in range(10)]
    assert len(set(seeds)) == len(seeds), "different parts must give different seeds"
    assert all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(1, 2) != derive_seed(2, 1) and derive_seed("1") != derive_seed(1)


def test_derive_seed_is_pinned():
    """Not Python's salted hash(): sha256 of the parts' repr, so stored rollout seeds regenerate the same views in
    any process and any version. Pinned values (a change here silently changes every stored view)."""
    assert derive_seed(7, "view", 3) == 7077158566645003176
    assert derive_seed(0) == 3582888934675442504


def test_generator_streams_are_reproducible_and_leave_the_global_rng_alone():
    torch.manual_seed(0)
    want = torch.rand(2)
    torch.manual_seed(0)
    a = torch.rand(5, generator=generator(1, "x"))
    assert torch.equal(a, torch.rand(5, generator=generator(1, "x")))
    assert not torch.equal(a, torch.rand(5, generator=generator(1, "y")))
    assert torch.equal(torch.rand(2), want)


def test_seed_everything_seeds_torch_and_random():
    import random

    seed_everything(4)
    a, r = torch.rand(3), random.random()
    seed_everything(4)
    assert torch.equal(torch.rand(3), a) and random.random() == r
