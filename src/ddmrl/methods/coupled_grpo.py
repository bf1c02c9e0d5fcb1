"""Coupled-GRPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from typing import Literal

from ddmrl.config._base import Str, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """Coupled-GRPO (DiffuCoder; Gong et al. 2025, arXiv 2506.20639; apple/ml-diffucoder): per optimiser step a
    ratio t ~ U[0.2, 0.8] and a complementary mask pair (every completion token masked in exactly one of the two),
    beside the fully masked completion; each token's log-probability is the mean of the fully masked view's and
    the pair's, the latter divided by the masking view's ratio (t or 1 - t), and the clipped token ratio (+ beta k3
    KL) is taken of that pooled estimate. The prompt is never masked. Three views, so three forward passes, per
    optimiser step; num_iterations optimiser steps per rollout batch as every method. Release recipe
    (config_coupled_code.yaml): DiffuCoder-7B-Instruct, lr 1e-6, beta 0.01 (reference synced every 64 steps),
    epsilon 0.5, G 10, mu 2, leave-one-out advantages without std scaling, 256 tokens, 256 diffusion steps at
    temperature 1.0. ``coupling`` does not apply (the pair is its own coupling)."""

    method: Str = "coupled_grpo"
    remasking: Literal["coupled"] = "coupled"


# t ~ U[0.2, 0.8]: full mask, M and its complement per step; (log p_full + log p_M / t or log p_Mc / (1 - t)) / 2
METHOD = Method(
    name="coupled_grpo",
    params=Params,
    display="Coupled-GRPO",
    weighting="coupled",
    objective="coupled_clip",
    paper="Gong et al. 2025, DiffuCoder: Understanding and Improving Masked Diffusion Models for Code Generation "
    "(Coupled-GRPO; arXiv 2506.20639)",
)
