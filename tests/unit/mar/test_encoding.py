"""The continuous encoding of geneval-mini's cells (ddmrl.mar.encoding): code -> RGB / 127.5 - 1, decoded to the
nearest code vector; round trips through vectors, grids and the PNG the judge reads."""

from __future__ import annotations

import random

import torch

from ddmrl.mar.encoding import CODE_VECTORS, codes_to_grids, decode, encode, grids_to_codes
from ddmrl.tasks.geneval_mini import COLORS, GenEvalMini, parse_grid, read_png, render_png


def test_code_vectors_by_hand():
    assert CODE_VECTORS.shape == (len(COLORS) + 1, 3)
    assert torch.allclose(CODE_VECTORS[0], torch.full((3,), 153 / 127.5 - 1))  # background #999 -> 0.2
    assert torch.allclose(CODE_VECTORS[1], torch.tensor([220 / 127.5 - 1, 30 / 127.5 - 1, 30 / 127.5 - 1]))  # red


def test_round_trip_of_every_code_and_within_half_the_closest_distance():
    codes = torch.arange(len(COLORS) + 1)
    assert torch.equal(decode(encode(codes)), codes)
    gaps = torch.cdist(CODE_VECTORS, CODE_VECTORS) + torch.eye(len(codes)) * 9
    radius = gaps.min() / 2  # orange-yellow: 0.65 apart
    assert 0.32 < radius < 0.33
    g = torch.Generator().manual_seed(0)
    direction = torch.nn.functional.normalize(torch.randn(1000, 3, generator=g), dim=-1)
    picked = torch.randint(0, len(codes), (1000,), generator=g)
    noisy = encode(picked) + 0.999 * radius * direction  # inside every code's decoding ball
    assert torch.equal(decode(noisy), picked)


def test_grid_round_trip_and_the_png_the_judge_reads(tmp_path):
    task, rng = GenEvalMini(), random.Random(0)
    grids = [parse_grid(ex.answer) for ex in task.generate(5, seed=3)]
    codes = grids_to_codes(grids)
    assert codes.shape == (5, 64)
    vectors = encode(codes) + 0.05 * torch.randn(5, 64, 3, generator=torch.Generator().manual_seed(rng.randrange(99)))
    back = codes_to_grids(decode(vectors), 8, 8)
    assert back == grids
    render_png(back[0], tmp_path / "0.png")
    assert read_png(tmp_path / "0.png") == grids[0]
