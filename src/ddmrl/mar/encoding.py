"""The continuous encoding of geneval-mini's canvas: every cell a 3-vector, its colour's RGB scaled to [-1, 1].

MAR (Li et al. 2024) generates continuous tokens (VAE latents) instead of codebook indices. geneval-mini's canvas is a
grid of colour codes (``ddmrl.tasks.geneval_mini``: 0 = background, 1..6 = the colours); here each cell becomes the
RGB of its code (:data:`ddmrl.tasks.geneval_mini.CODE_RGB`, the colour its PNG shows) scaled to [-1, 1], and a
generated vector is decoded to the code whose vector is nearest (Euclidean), as ``read_png`` decodes a pixel to the
nearest code colour. So the exact GenEval-style judge sees the image a continuous model drew, rounded to the palette.

The closest pair of codes (orange and yellow) is 0.65 apart: a vector decodes to its own code when it lies within
0.32 of it.
"""

from __future__ import annotations

import torch

from ddmrl.tasks.geneval_mini import CODE_RGB, Grid

#: [7, 3] the vector of every code (row k: code k), RGB / 127.5 - 1
CODE_VECTORS = torch.tensor(CODE_RGB, dtype=torch.float32) / 127.5 - 1
TOKEN_DIM = CODE_VECTORS.shape[1]


def encode(codes: torch.Tensor) -> torch.Tensor:
    """[...] integer codes -> [..., 3] vectors."""
    return CODE_VECTORS.to(codes.device)[codes]


def decode(x: torch.Tensor) -> torch.Tensor:
    """[..., 3] vectors -> [...] the code of the nearest code vector (ties: the lower code)."""
    vectors = CODE_VECTORS.to(x.device, x.dtype)
    return torch.cdist(x.reshape(-1, TOKEN_DIM), vectors).argmin(-1).reshape(x.shape[:-1])


def grids_to_codes(grids: list[Grid]) -> torch.Tensor:
    """[B] grids ([H][W] codes) -> [B, H*W] codes, row by row."""
    return torch.tensor([[code for row in grid for code in row] for grid in grids], dtype=torch.long)


def codes_to_grids(codes: torch.Tensor, height: int, width: int) -> list[Grid]:
    """[B, H*W] codes -> [B] grids."""
    return [[row.tolist() for row in image.view(height, width)] for image in codes.cpu()]
