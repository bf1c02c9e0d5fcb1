"""Training views: the mu masked copies of a rollout batch on which the policy loss is evaluated.

Inner iteration j of a rollout batch takes one optimiser step on view j. A view masks completion positions (and,
for diffu-GRPO, some prompt positions); the loss is taken on masked completion tokens. Every view is drawn
from its own seed, derived from the rollout seed, with a dedicated ``torch.Generator``: rebuilding the views
from the stored seed gives identical masks, so the old, reference and current passes see the same inputs
(d1 and MaskGRPO's "managed randomness", without touching the global RNG; maskgrpo.md section 3.4).

Couplings across the mu views (algorithms.md A.2, ``coupling``):
  independent  a fresh uniform u per view; position k is masked iff u_k < t_j (MaskGRPO / UniGRPO code)
  nested       one u per rollout, shared by all views: masked at t_j implies masked at every larger t
               (the picture behind RebRL's Eq. 10)
  trajectory   the sampler's own order: at ratio t_j the round(t_j L) latest-revealed tokens are masked
               (uses the rollout's ``reveal_step``; TraceRL's view of the trajectory)
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ddmrl.seeding import generator

MAX_RATIO = 0.999  # MaskGRPO caps the last ratio below 1


class Views(NamedTuple):
    """The mu training views of N rollouts with completion length L and prompt length P.

    masks: [mu, N, L] bool, completion positions masked in view j.
    prompt_masks: [mu, N, P] bool, prompt positions masked in view j (diffu-GRPO only; else all False).
    t: [mu, N] nominal mask ratio of view j for rollout i.
    seed: the rollout seed every view was derived from (views regenerate identically from it).
    """

    masks: torch.Tensor
    prompt_masks: torch.Tensor
    t: torch.Tensor
    seed: int


def unigrpo_ratios(mu: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """UniGRPO (MMaDA Alg. 1): a random start r ~ U(0, 1) per rollout, then mu evenly spaced ratios up to 1.

    t_n = r + (1 - r)(n - 1)/(mu - 1), n = 1..mu (the formula, not the paper's inconsistent worked example).
    Returns [mu, N].
    """
    r = torch.rand(n, generator=gen)  # [N]
    frac = torch.linspace(0, 1, mu)[:, None] if mu > 1 else torch.zeros(1, 1)  # [mu, 1]
    return r[None, :] + (1 - r[None, :]) * frac


def linear_ratios(mu: int, n: int, gamma: float = 0.0) -> torch.Tensor:
    """MaskGRPO's truncated ratios t_j = gamma + (1 - gamma) j / mu, j = 1..mu, capped at 0.999; gamma = 0 is
    RebRL's t_j = j / mu. Returns [mu, N]."""
    j = torch.arange(1, mu + 1, dtype=torch.float32)
    return (gamma + (1 - gamma) * j / mu).clamp(max=MAX_RATIO)[:, None].expand(mu, n).clone()


def fading_keep_prob(t: torch.Tensor, length: int) -> torch.Tensor:
    """MaskGRPO's AR-like fading: keep probability min(1, 2 (1 - t) d_k), d = linspace(1, 0, L) over the
    completion only (the released code spans prompt + completion by mistake; maskgrpo.md section 4).
    For t >= 0.5 the expected kept fraction is exactly 1 - t. ``t`` [mu, N] -> [mu, N, L]."""
    d = torch.linspace(1, 0, length)  # [L]
    return (2 * (1 - t)[..., None] * d).clamp(max=1.0)


def _uniforms(shape: tuple[int, ...], seed: int, coupling: str) -> torch.Tensor:
    """[mu, N, L] uniforms: one draw per view (independent) or one per rollout shared by all views (nested)."""
    mu, n, length = shape
    if coupling == "independent":
        return torch.stack([torch.rand(n, length, generator=generator(seed, "view", j)) for j in range(mu)])
    if coupling == "nested":
        return torch.rand(n, length, generator=generator(seed, "nested"))[None].expand(mu, n, length)
    raise ValueError(f"coupling '{coupling}' does not apply here; use independent or nested")


def trajectory_masks(t: torch.Tensor, reveal_step: torch.Tensor) -> torch.Tensor:
    """Mask the round(t L) latest-revealed positions (ties: later position first). [mu, N], [N, L] -> [mu, N, L]."""
    length = reveal_step.shape[1]
    key = reveal_step.double() * (length + 1) + torch.arange(length)  # strict order: step, then position
    rank = key.argsort(1, descending=True).argsort(1)  # [N, L], 0 = revealed last
    count = torch.round(t * length).long()  # [mu, N]
    return rank[None] < count[..., None]


def _ensure_one(masks: torch.Tensor, valid: torch.Tensor, seed: int) -> torch.Tensor:
    """Every (view, rollout) with no masked valid token gets one, at a seeded random valid position."""
    empty = ~(masks & valid).any(-1)  # [mu, N]
    if empty.any():
        scores = torch.rand(masks.shape, generator=generator(seed, "ensure_one")).masked_fill(~valid, -1.0)
        pick = torch.zeros_like(masks).scatter_(-1, scores.argmax(-1, keepdim=True), True)
        masks = masks | (pick & empty[..., None])
    return masks


def build_views(
    remasking: str,
    *,
    mu: int,
    seed: int,
    completion_mask: torch.Tensor,
    prompt_ids: torch.Tensor,
    pad_id: int,
    reveal_step: torch.Tensor | None = None,
    coupling: str = "independent",
    gamma: float = 0.6,
    p_mask_prompt: float = 0.15,
) -> Views:
    """Build the mu views of a rollout batch.

    Args:
        remasking: key of ``VIEWS``: full_completion (d1), unigrpo (MMaDA), maskgrpo_fading (MaskGRPO text),
            rebrl_linear (RebRL, t_j = j / mu).
        mu: number of views (num_iterations).
        seed: rollout seed; view j uses ``derive_seed(seed, "view", j)``.
        completion_mask: [N, L] bool, valid completion tokens (up to and including the first EOS).
        prompt_ids: [N, P] prompt tokens (left-padded with ``pad_id``).
        reveal_step: [N, L] the sampler's reveal step per token (needed by ``coupling="trajectory"``).
    """
    n, length = completion_mask.shape
    no_prompt = torch.zeros(mu, *prompt_ids.shape, dtype=torch.bool)
    if remasking == "full_completion":
        # d1: the whole completion masked; each prompt token masked with probability p_mask_prompt, fresh per view
        real = prompt_ids != pad_id
        pm = torch.stack([torch.rand(prompt_ids.shape, generator=generator(seed, "view", j)) for j in range(mu)])
        masks = torch.ones(mu, n, length, dtype=torch.bool)
        return Views(masks, (pm < p_mask_prompt) & real, torch.ones(mu, n), seed)
    if remasking == "unigrpo":
        t = unigrpo_ratios(mu, n, generator(seed, "start"))
    elif remasking == "rebrl_linear":
        t = linear_ratios(mu, n, 0.0)
    elif remasking == "maskgrpo_fading":
        t = linear_ratios(mu, n, gamma)
        if coupling == "trajectory":
            raise ValueError("maskgrpo_fading has its own position-wise curve; use coupling independent or nested")
        masks = _uniforms((mu, n, length), seed, coupling) > fading_keep_prob(t, length)
        return Views(_ensure_one(masks, completion_mask, seed), no_prompt, t, seed)
    else:
        raise ValueError(f"unknown remasking '{remasking}'; choose one of {', '.join(VIEWS)}")
    if coupling == "trajectory":
        if reveal_step is None:
            raise ValueError("coupling 'trajectory' needs the rollout's reveal_step")
        masks = trajectory_masks(t, reveal_step)
    else:
        masks = _uniforms((mu, n, length), seed, coupling) < t[..., None]
    return Views(_ensure_one(masks, completion_mask, seed), no_prompt, t, seed)


def apply_view(
    prompt_ids: torch.Tensor, completion_ids: torch.Tensor, views: Views, j: int, mask_id: int
) -> torch.Tensor:
    """The model input of view j: [N, P + L] with the view's prompt and completion positions set to ``mask_id``."""
    x = torch.cat([prompt_ids, completion_ids], dim=1)
    masked = torch.cat([views.prompt_masks[j], views.masks[j]], dim=1)
    return x.masked_fill(masked, mask_id)


VIEWS = ("full_completion", "unigrpo", "maskgrpo_fading", "rebrl_linear")


def mask_frequency(views: Views, completion_mask: torch.Tensor) -> torch.Tensor:
    """RebRL's F(k): in how many of the mu views token k is a (valid) target. [N, L]."""
    return (views.masks & completion_mask[None]).sum(0)
