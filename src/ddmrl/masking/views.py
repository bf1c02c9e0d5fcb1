"""Training views: the masked copies of a rollout batch on which the policy loss is evaluated.

A view masks completion positions (and, for diffu-GRPO and SPG, some prompt positions); its loss targets are
masked completion tokens (all of them, except in TraceRL's trajectory views where only the tokens of one trace
step are targets). ``Views.schedule`` says which views each optimiser step of the rollout batch uses: view j at
step j for most methods, every quadrature view at every step for GDPO, ``views_per_step`` views for SPG. Every
view is drawn
from its own seed, derived from the rollout seed, with a dedicated ``torch.Generator``: rebuilding the views
from the stored seed gives identical masks, so the old, reference and current passes see the same inputs
(d1 and MaskGRPO's "managed randomness", without touching the global RNG; MaskGRPO's ``remask_*``).

Couplings across the mu views (``coupling``):
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

    masks: [V, N, L] bool, completion positions masked in view j.
    prompt_masks: [V, N, P] bool, prompt positions masked in view j (diffu-GRPO, SPG; else all False).
    t: [V, N] nominal mask ratio of view j for rollout i.
    seed: the rollout seed every view was derived from (views regenerate identically from it).
    targets: [V, N, L] bool loss targets (None = the masked positions).
    schedule: view indices used by each optimiser step (None = view j at step j).
    """

    masks: torch.Tensor
    prompt_masks: torch.Tensor
    t: torch.Tensor
    seed: int
    targets: torch.Tensor | None = None
    schedule: tuple[tuple[int, ...], ...] | None = None

    @property
    def target_masks(self) -> torch.Tensor:
        return self.masks if self.targets is None else self.targets

    @property
    def steps(self) -> tuple[tuple[int, ...], ...]:
        return self.schedule if self.schedule is not None else tuple((j,) for j in range(self.masks.shape[0]))


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


def gauss_legendre(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """GDPO's semi-deterministic time grid: n-point Gauss-Legendre nodes and weights on [0, 1] (weights sum to 1)."""
    import numpy as np

    x, w = np.polynomial.legendre.leggauss(n)
    return torch.tensor((x + 1) / 2, dtype=torch.float32), torch.tensor(w / 2, dtype=torch.float32)


def fading_keep_prob(t: torch.Tensor, length: int) -> torch.Tensor:
    """MaskGRPO's AR-like fading: keep probability min(1, 2 (1 - t) d_k), d = linspace(1, 0, L) over the
    completion only (the released ``remask_ar`` spans prompt + completion by mistake).
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
    rank = reveal_order(reveal_step).argsort(1, descending=True).argsort(1)  # [N, L], 0 = revealed last
    count = torch.round(t * length).long()  # [mu, N]
    return rank[None] < count[..., None]


def reveal_order(reveal_step: torch.Tensor) -> torch.Tensor:
    """A strict order key [N, L]: larger = revealed later (by step, then by position)."""
    length = reveal_step.shape[1]
    return reveal_step.long() * (length + 1) + torch.arange(length)


def _ensure_one(masks: torch.Tensor, valid: torch.Tensor, priority: torch.Tensor) -> torch.Tensor:
    """Every (view, rollout) with no masked valid token gets one: the valid position of highest ``priority`` [N, L].

    The priority keeps the coupling intact: under ``nested`` it is -u (the token the next larger ratio masks first,
    so masks stay nested); under ``trajectory`` the reveal order (the latest-revealed token); else random.
    """
    empty = ~(masks & valid).any(-1)  # [mu, N]
    if empty.any():
        pick = priority.masked_fill(~valid, -torch.inf).argmax(-1, keepdim=True)  # [N, 1]
        chosen = torch.zeros_like(valid).scatter_(-1, pick, True)  # [N, L]
        masks = masks | (chosen[None] & empty[..., None])
    return masks


class ViewRequest(NamedTuple):
    """What a view sampler gets (see :func:`build_views` for each field)."""

    mu: int
    seed: int
    completion_mask: torch.Tensor
    prompt_ids: torch.Tensor
    pad_id: int
    reveal_step: torch.Tensor | None
    coupling: str
    gamma: float
    p_mask_prompt: float
    shrink: int
    views_per_step: int
    block_length: int


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
    shrink: int = 1,
    views_per_step: int = 1,
    block_length: int = 4,
) -> Views:
    """Build the training views of a rollout batch with the view sampler ``VIEWS[remasking]``.

    Args:
        remasking: key of ``VIEWS``: full_completion (d1, wd1), unigrpo (MMaDA), maskgrpo_fading (MaskGRPO
            text), maskgrpo_random (MaskGRPO image: truncated ratios, uniform masks), rebrl_linear (RebRL,
            t_j = j / mu), tracerl (TraceRL trace steps), gdpo_quadrature (GDPO), block_random (SPG).
        mu: optimiser steps per rollout batch (num_iterations); TraceRL's view count is its number of trace
            steps instead, GDPO's is ``views_per_step`` quadrature nodes shared by the mu steps.
        seed: rollout seed; view j uses ``derive_seed(seed, "view", j)``.
        completion_mask: [N, L] bool, valid completion tokens (up to and including the first EOS).
        prompt_ids: [N, P] prompt tokens (left-padded with ``pad_id``).
        reveal_step: [N, L] the sampler's reveal step per token (``coupling="trajectory"``, ``tracerl``).
        coupling: independent | nested | trajectory, for the ratio-based samplers (module docstring).
        gamma: MaskGRPO's smallest ratio.
        p_mask_prompt: probability of masking a prompt token (d1, SPG).
        shrink: TraceRL merges this many consecutive sampler steps into one trace step.
        views_per_step: views each optimiser step averages (SPG's num_t) or GDPO's quadrature nodes.
        block_length: SPG's block size (the sampler's semi-AR block).
    """
    if remasking not in VIEWS:
        raise ValueError(f"unknown remasking '{remasking}'; choose one of {', '.join(VIEWS)}")
    request = ViewRequest(mu, seed, completion_mask, prompt_ids, pad_id, reveal_step, coupling, gamma,
                          p_mask_prompt, shrink, views_per_step, block_length)  # fmt: skip
    return VIEWS[remasking](request)


def full_completion_views(r: ViewRequest) -> Views:
    """d1: the whole completion masked; each prompt token masked with probability p_mask_prompt, fresh per view."""
    n, length = r.completion_mask.shape
    pm = torch.stack([torch.rand(r.prompt_ids.shape, generator=generator(r.seed, "view", j)) for j in range(r.mu)])
    masks = torch.ones(r.mu, n, length, dtype=torch.bool)
    return Views(masks, (pm < r.p_mask_prompt) & (r.prompt_ids != r.pad_id), torch.ones(r.mu, n), r.seed)


def ratio_views(r: ViewRequest, t: torch.Tensor) -> Views:
    """Mask each completion position at ratio t [mu, N] with the request's coupling."""
    n, length = r.completion_mask.shape
    if r.coupling == "trajectory":
        if r.reveal_step is None:
            raise ValueError("coupling 'trajectory' needs the rollout's reveal_step")
        masks = trajectory_masks(t, r.reveal_step)
        priority = reveal_order(r.reveal_step).double()
    else:
        u = _uniforms((r.mu, n, length), r.seed, r.coupling)
        masks = u < t[..., None]
        priority = -u[0] if r.coupling == "nested" else _random(r.seed, n, length)
    no_prompt = torch.zeros(r.mu, *r.prompt_ids.shape, dtype=torch.bool)
    return Views(_ensure_one(masks, r.completion_mask, priority), no_prompt, t, r.seed)


def unigrpo_views(r: ViewRequest) -> Views:
    return ratio_views(r, unigrpo_ratios(r.mu, r.completion_mask.shape[0], generator(r.seed, "start")))


def rebrl_views(r: ViewRequest) -> Views:
    return ratio_views(r, linear_ratios(r.mu, r.completion_mask.shape[0], 0.0))


def maskgrpo_random_views(r: ViewRequest) -> Views:
    return ratio_views(r, linear_ratios(r.mu, r.completion_mask.shape[0], r.gamma))


def maskgrpo_fading_views(r: ViewRequest) -> Views:
    """MaskGRPO (text): truncated ratios with the AR-like fading curve over completion positions."""
    n, length = r.completion_mask.shape
    t = linear_ratios(r.mu, n, r.gamma)
    if r.coupling == "trajectory":
        raise ValueError("maskgrpo_fading has its own position-wise curve; use coupling independent or nested")
    u = _uniforms((r.mu, n, length), r.seed, r.coupling)
    masks = u > fading_keep_prob(t, length)
    # nested: token k becomes masked once 2 (1 - t) d_k < u_k, so the larger u_k / d_k, the earlier
    priority = (
        u[0] / torch.linspace(1, 0, length).clamp_min(1e-9) if r.coupling == "nested" else _random(r.seed, n, length)
    )
    no_prompt = torch.zeros(r.mu, *r.prompt_ids.shape, dtype=torch.bool)
    return Views(_ensure_one(masks, r.completion_mask, priority), no_prompt, t, r.seed)


def gdpo_views(r: ViewRequest) -> Views:
    """GDPO: one independent mask per Gauss-Legendre node; every optimiser step uses all the nodes."""
    n, length = r.completion_mask.shape
    nodes, _ = gauss_legendre(r.views_per_step)
    t = nodes[:, None].expand(r.views_per_step, n).clone()
    # no forced token here: an empty view contributes 0 to the ELBO, which keeps the estimator unbiased
    masks = _uniforms((r.views_per_step, n, length), r.seed, "independent") < t[..., None]
    no_prompt = torch.zeros(r.views_per_step, *r.prompt_ids.shape, dtype=torch.bool)
    return Views(masks, no_prompt, t, r.seed, schedule=(tuple(range(r.views_per_step)),) * r.mu)


def tracerl_views(r: ViewRequest) -> Views:
    """TraceRL (Wang et al. 2026): trace step tau = sampler step // shrink; view tau masks every token of trace
    step >= tau and trains on the tokens of step tau only, so every token is a target exactly once (F = 1)."""
    if r.reveal_step is None:
        raise ValueError("tracerl views need the rollout's reveal_step")
    trace = r.reveal_step.long() // r.shrink  # [N, L]
    k = int(trace.max()) + 1
    tau = torch.arange(k)[:, None, None]  # [K, 1, 1]
    masks, targets = trace[None] >= tau, trace[None] == tau  # [K, N, L]
    t = masks.float().mean(-1)  # [K, N]
    return Views(masks, torch.zeros(k, *r.prompt_ids.shape, dtype=torch.bool), t, r.seed, targets=targets)


def block_random_views(r: ViewRequest) -> Views:
    """SPG's ``block_random`` views (Wang et al. 2026): a random block b; every block after b fully masked; inside
    b a random count in [1, block_length] of random positions masked; prompt tokens masked with p_mask_prompt.
    Mirrors semi-AR decoding. ``views_per_step`` consecutive views form one optimiser step (mu steps in all)."""
    completion_mask, prompt_ids, block_length, seed = r.completion_mask, r.prompt_ids, r.block_length, r.seed
    v, per_step = r.mu * r.views_per_step, r.views_per_step
    n, length = completion_mask.shape
    num_blocks = -(-length // block_length)
    pos = torch.arange(length)
    masks, prompt_masks = [], []
    for j in range(v):
        g = generator(seed, "view", j)
        b = torch.randint(num_blocks, (n, 1), generator=g)  # [N, 1]
        count = torch.randint(1, block_length + 1, (n, 1), generator=g)
        block = pos[None] // block_length  # [1, L]
        order = torch.rand(n, length, generator=g).masked_fill(block != b, 2.0).argsort(1).argsort(1)
        masks.append((block > b) | ((block == b) & (order < count)))
        prompt_masks.append((torch.rand(prompt_ids.shape, generator=g) < r.p_mask_prompt) & (prompt_ids != r.pad_id))
    masks_t = _ensure_one(torch.stack(masks), completion_mask, _random(seed, n, length))
    t = masks_t.float().mean(-1)
    schedule = tuple(tuple(range(s, s + per_step)) for s in range(0, v, per_step))
    return Views(masks_t, torch.stack(prompt_masks), t, seed, schedule=schedule)


def _random(seed: int, n: int, length: int) -> torch.Tensor:
    return torch.rand(n, length, generator=generator(seed, "ensure_one"))


def apply_view(
    prompt_ids: torch.Tensor, completion_ids: torch.Tensor, views: Views, j: int, mask_id: int
) -> torch.Tensor:
    """The model input of view j: [N, P + L] with the view's prompt and completion positions set to ``mask_id``."""
    x = torch.cat([prompt_ids, completion_ids], dim=1)
    masked = torch.cat([views.prompt_masks[j], views.masks[j]], dim=1)
    return x.masked_fill(masked, mask_id)


VIEWS = {
    "full_completion": full_completion_views,
    "unigrpo": unigrpo_views,
    "maskgrpo_fading": maskgrpo_fading_views,
    "maskgrpo_random": maskgrpo_random_views,
    "rebrl_linear": rebrl_views,
    "tracerl": tracerl_views,
    "gdpo_quadrature": gdpo_views,
    "block_random": block_random_views,
}


def mask_frequency(views: Views, completion_mask: torch.Tensor) -> torch.Tensor:
    """RebRL's F(k): in how many views token k is a (valid) loss target. [N, L]."""
    return (views.target_masks & completion_mask[None]).sum(0)
