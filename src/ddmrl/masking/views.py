"""Training views: the masked copies of a rollout batch on which the policy loss is evaluated.

A view masks completion positions (and, for diffu-GRPO and SPG, some prompt positions); its loss targets are
masked completion tokens (all of them, except in TraceRL's trajectory views where only the tokens of one trace
step are targets). ``Views.schedule`` says which views each optimiser step of the rollout batch uses: view j at
step j for most methods, every quadrature view at every step for GDPO, ``views_per_step`` views for SPG and VRPO.
Every view is drawn from its own seed, derived from the rollout seed, with a dedicated ``torch.Generator``:
rebuilding the views from the stored seed gives identical masks, so the old, reference and current passes see the
same inputs (d1 and MaskGRPO's "managed randomness", without touching the global RNG; MaskGRPO's ``remask_*``).

Couplings across the mu views (``coupling``):
  independent  a fresh uniform u per view; position k is masked iff u_k < t_j (MaskGRPO / UniGRPO code)
  nested       one u per rollout, shared by all views: masked at t_j implies masked at every larger t
               (the picture behind RebRL's Eq. 10)
  trajectory   the sampler's own order: at ratio t_j the round(t_j L) latest-revealed tokens are masked
               (uses the rollout's ``reveal_step``; TraceRL's view of the trajectory)
"""

from __future__ import annotations

import types
from typing import Any, NamedTuple

import torch

from ddmrl.masking import VIEWS, view_sampler
from ddmrl.samplers.trajectory import Trajectory, next_states, states_from_reveal
from ddmrl.seeding import generator

MAX_RATIO = 0.999  # MaskGRPO caps the last ratio below 1


class StepStates(NamedTuple):
    """Views built from the sampler's states (CJ-GRPO, MDPO): view j of rollout i is the state x_s the sampler
    started step s = ``step[j, i]`` from.

    inputs: [V, N, L] that state's completion (the mask id where masked): the view's input.
    target_ids: [V, N, L] the tokens the view is trained towards: the state after the step (CJ-GRPO) or the step's
        full prediction x̂_0^(s) (MDPO).
    step: [V, N] the sampler step s.
    confidence: [V, N, L] the model's confidence in the targets at that step (MDPO's weight), or None.
    """

    inputs: torch.Tensor
    target_ids: torch.Tensor
    step: torch.Tensor
    confidence: torch.Tensor | None = None


class Views(NamedTuple):
    """The mu training views of N rollouts with completion length L and prompt length P.

    masks: [V, N, L] bool, completion positions masked in view j.
    prompt_masks: [V, N, P] bool, prompt positions masked in view j (diffu-GRPO, SPG; else all False).
    t: [V, N] nominal mask ratio of view j for rollout i.
    seed: the rollout seed every view was derived from (views regenerate identically from it).
    targets: [V, N, L] bool loss targets (None = the masked positions).
    schedule: view indices used by each optimiser step (None = view j at step j).
    states: views built from the sampler's states (:class:`StepStates`), whose inputs and target tokens are their
        own; None = every view masks the rollout's completion and is trained towards it.
    """

    masks: torch.Tensor
    prompt_masks: torch.Tensor
    t: torch.Tensor
    seed: int
    targets: torch.Tensor | None = None
    schedule: tuple[tuple[int, ...], ...] | None = None
    states: StepStates | None = None

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
    """What a view sampler gets: the rollout batch (see :func:`build_views` for each field) and the run's config, from
    which it reads its own keys (:meth:`key`: MaskGRPO's views ``gamma``, TraceRL's ``shrink``; the keys a view
    sampler's record names, ``ddmrl.masking.ViewSampler.keys``, are declared by the ``Params`` of the methods that
    use it)."""

    mu: int
    seed: int
    completion_mask: torch.Tensor
    prompt_ids: torch.Tensor
    pad_id: int
    config: Any  # the run's section (``ddmrl.config.GRPOConfig``), or a namespace of build_views' keywords
    block_length: int = 4
    reveal_step: torch.Tensor | None = None
    completion_ids: torch.Tensor | None = None
    mask_id: int | None = None
    trajectory: Trajectory | None = None
    step_advantages: torch.Tensor | None = None
    legacy: bool = False
    branch_steps: tuple[int, ...] = ()

    def key(self, name: str, default: Any) -> Any:
        """The run's key ``name``, or ``default`` where the config has none (a direct call without it)."""
        return getattr(self.config, name, default)


def build_views(
    remasking: str,
    *,
    mu: int,
    seed: int,
    completion_mask: torch.Tensor,
    prompt_ids: torch.Tensor,
    pad_id: int,
    block_length: int = 4,
    reveal_step: torch.Tensor | None = None,
    completion_ids: torch.Tensor | None = None,
    mask_id: int | None = None,
    trajectory: Trajectory | None = None,
    step_advantages: torch.Tensor | None = None,
    legacy: bool = False,
    branch_steps: tuple[int, ...] = (),
    config: Any = None,
    **keys: Any,
) -> Views:
    """Build the training views of a rollout batch with the view sampler ``VIEWS[remasking]``.

    Args:
        remasking: a name of ``ddmrl.masking.VIEWS`` (or a view sampler outside the package, ``module:attribute``:
            a function of a :class:`ViewRequest`): full_completion (d1, wd1), unigrpo (MMaDA), maskgrpo_fading
            (MaskGRPO text), maskgrpo_random (MaskGRPO image: truncated ratios, uniform masks), rebrl_linear (RebRL,
            t_j = j / mu), tracerl (TraceRL trace steps), gdpo_quadrature (GDPO), block_random (SPG), coupled
            (Coupled-GRPO's complementary pairs), stratified (VRPO's and BGPO's stratified timesteps, one mask
            each), espo (ESPO's stratified counts and complementary pairs), ebpo_blocks (EBPO's block views).
        mu: optimiser steps per rollout batch (num_iterations); TraceRL's view count is its number of trace
            steps instead, GDPO's is ``views_per_step`` quadrature nodes shared by the mu steps.
        seed: rollout seed; view j uses ``derive_seed(seed, "view", j)``.
        completion_mask: [N, L] bool, valid completion tokens (up to and including the first EOS).
        prompt_ids: [N, P] prompt tokens (left-padded with ``pad_id``).
        block_length: the rollout sampler's semi-AR block (SPG's, EBPO's and DiPO's blocks).
        reveal_step: [N, L] the sampler's reveal step per token (``coupling="trajectory"``, ``tracerl``).
        completion_ids, mask_id: [N, L] the rollouts' tokens and the mask id (views built from states: cj_grpo,
            mdpo_topk).
        trajectory: the rollouts' stored trajectory (``ddmrl.samplers.trajectory``); without one, the states are
            rebuilt from ``reveal_step``, which is exact for a sampler that never re-masks (cj_grpo).
        step_advantages: [N, S] per-step advantages (mdpo_topk ranks the steps by their magnitude).
        legacy: maskgrpo_fading, MaskGRPO's released masks (:func:`legacy_fading_masks`); espo, ESPO's released
            draws (:func:`espo_views`).
        branch_steps: the sampler steps at which a tree of rollouts' depths end (``ddmrl.rollout.Tree.steps``; tree).
        config: the run's section, from which the view sampler reads its own keys (the GRPO loop passes it).
        **keys: instead of ``config``, the keys a direct call sets (the others take the view sampler's defaults):
            coupling (independent | nested | trajectory, the ratio-based samplers: module docstring), gamma
            (MaskGRPO's smallest ratio), p_mask_prompt (d1's and SPG's prompt masking), shrink (TraceRL's steps
            per trace step), views_per_step (SPG's num_t, VRPO's n_t, GDPO's nodes, ESPO's num_mc, EBPO's mc_num),
            sample_train_steps (the steps mdpo_topk keeps per rollout).
    """
    if remasking not in VIEWS:
        raise ValueError(f"unknown remasking '{remasking}'; choose one of {', '.join(VIEWS)}")
    if legacy and not view_sampler(remasking).legacy:
        legacies = " or ".join(v for v in VIEWS if view_sampler(v).legacy)
        raise ValueError(f"legacy views reproduce {legacies}, not {remasking}")
    if config is not None and keys:
        raise ValueError(f"give the run's config or its keys, not both ({', '.join(keys)})")
    config = types.SimpleNamespace(**keys) if config is None else config
    request = ViewRequest(
        mu, seed, completion_mask, prompt_ids, pad_id, config, block_length, reveal_step, completion_ids, mask_id,
        trajectory, step_advantages, legacy, tuple(branch_steps),
    )  # fmt: skip
    return VIEWS[remasking](request)


def full_completion_views(r: ViewRequest) -> Views:
    """d1: the whole completion masked; each prompt token masked with probability p_mask_prompt, fresh per view."""
    n, length = r.completion_mask.shape
    pm = torch.stack([torch.rand(r.prompt_ids.shape, generator=generator(r.seed, "view", j)) for j in range(r.mu)])
    masks = torch.ones(r.mu, n, length, dtype=torch.bool)
    prompt_masks = (pm < r.key("p_mask_prompt", 0.15)) & (r.prompt_ids != r.pad_id)
    return Views(masks, prompt_masks, torch.ones(r.mu, n), r.seed)


def ratio_views(r: ViewRequest, t: torch.Tensor) -> Views:
    """Mask each completion position at ratio t [mu, N] with the request's coupling."""
    n, length = r.completion_mask.shape
    coupling = r.key("coupling", "independent")
    if coupling == "trajectory":
        if r.reveal_step is None:
            raise ValueError("coupling 'trajectory' needs the rollout's reveal_step")
        masks = trajectory_masks(t, r.reveal_step)
        priority = reveal_order(r.reveal_step).double()
    else:
        u = _uniforms((r.mu, n, length), r.seed, coupling)
        masks = u < t[..., None]
        priority = -u[0] if coupling == "nested" else _random(r.seed, n, length)
    no_prompt = torch.zeros(r.mu, *r.prompt_ids.shape, dtype=torch.bool)
    return Views(_ensure_one(masks, r.completion_mask, priority), no_prompt, t, r.seed)


def unigrpo_views(r: ViewRequest) -> Views:
    return ratio_views(r, unigrpo_ratios(r.mu, r.completion_mask.shape[0], generator(r.seed, "start")))


def rebrl_views(r: ViewRequest) -> Views:
    return ratio_views(r, linear_ratios(r.mu, r.completion_mask.shape[0], 0.0))


def maskgrpo_random_views(r: ViewRequest) -> Views:
    return ratio_views(r, linear_ratios(r.mu, r.completion_mask.shape[0], r.key("gamma", 0.6)))


def maskgrpo_fading_views(r: ViewRequest) -> Views:
    """MaskGRPO (text): truncated ratios with the AR-like fading curve over completion positions (``legacy``: the
    released code's masks, :func:`legacy_fading_masks`)."""
    n, length = r.completion_mask.shape
    gamma, coupling = r.key("gamma", 0.6), r.key("coupling", "independent")
    t = linear_ratios(r.mu, n, gamma)
    if r.legacy:  # the ratios in Python floats, as the released code computes them
        ratios = [min(gamma + (1 - gamma) * (j + 1) / r.mu, MAX_RATIO) for j in range(r.mu)]
        masks = legacy_fading_masks(ratios, legacy_mask_seeds(r.seed, r.mu), r.prompt_ids.shape[1], length, n)
        return Views(masks, torch.zeros(r.mu, *r.prompt_ids.shape, dtype=torch.bool), t, r.seed)
    if coupling == "trajectory":
        raise ValueError("maskgrpo_fading has its own position-wise curve; use coupling independent or nested")
    u = _uniforms((r.mu, n, length), r.seed, coupling)
    masks = u > fading_keep_prob(t, length)
    # nested: token k becomes masked once 2 (1 - t) d_k < u_k, so the larger u_k / d_k, the earlier
    priority = (
        u[0] / torch.linspace(1, 0, length).clamp_min(1e-9) if coupling == "nested" else _random(r.seed, n, length)
    )
    no_prompt = torch.zeros(r.mu, *r.prompt_ids.shape, dtype=torch.bool)
    return Views(_ensure_one(masks, r.completion_mask, priority), no_prompt, t, r.seed)


MASKGRPO_SEEDS = 2**12  # MaskGRPO draws its mask seeds from [0, 4096)


def legacy_mask_seeds(seed: int, mu: int) -> list[int]:
    """MaskGRPO's mu mask seeds of a rollout batch, drawn from [0, 4096) (here from the rollout seed's generator)."""
    return torch.randint(0, MASKGRPO_SEEDS, (mu,), generator=generator(seed, "maskgrpo_seeds")).tolist()


def legacy_fading_masks(
    ratios: list[float], seeds: list[int], prompt_length: int, length: int, n: int
) -> torch.Tensor:
    """MaskGRPO's released ``remask_ar`` masks of the completion, [mu, N, L], its bugs kept.

    View j draws u ~ U[0, 1) over the whole sequence [N, P + L] right after seeding with ``seeds[j]`` (as
    ``set_seed`` then ``torch.rand`` on the CPU). ``prompt_len`` evaluates to 1 there, so the fading curve
    d = linspace(1, 0, P + L - 1) spans prompt and completion: position p >= 1 keeps with probability
    min(1, d[p - 1] (1 - r_j)(P + L - 1) / sum d), and a completion position is masked iff u > that. No view is
    forced to mask a token, and positions after the first EOS are masked like any other.
    """
    total = prompt_length + length
    d = torch.linspace(1, 0, total - 1)  # [P + L - 1]
    masks = []
    for r, s in zip(ratios, seeds, strict=True):
        keep = torch.cat([torch.zeros(1), (d * ((1 - r) * (total - 1)) / d.sum()).clamp(max=1.0)])  # [P + L]
        u = torch.rand(n, total, generator=torch.Generator().manual_seed(s))  # [N, P + L]
        masks.append((u > keep)[:, prompt_length:])
    return torch.stack(masks)


def gdpo_views(r: ViewRequest) -> Views:
    """GDPO: one independent mask per Gauss-Legendre node; every optimiser step uses all the nodes."""
    n, length = r.completion_mask.shape
    nodes_count = r.key("views_per_step", 1)
    nodes, _ = gauss_legendre(nodes_count)
    t = nodes[:, None].expand(nodes_count, n).clone()
    # no forced token here: an empty view contributes 0 to the ELBO, which keeps the estimator unbiased
    masks = _uniforms((nodes_count, n, length), r.seed, "independent") < t[..., None]
    no_prompt = torch.zeros(nodes_count, *r.prompt_ids.shape, dtype=torch.bool)
    return Views(masks, no_prompt, t, r.seed, schedule=(tuple(range(nodes_count)),) * r.mu)


def tracerl_views(r: ViewRequest) -> Views:
    """TraceRL (Wang et al. 2026): trace step tau = sampler step // shrink; view tau masks every token of trace
    step >= tau and trains on the tokens of step tau only, so every token is a target exactly once (F = 1).

    The K trace steps are spread over the mu optimiser steps (:func:`spread`), so that TraceRL takes as many
    optimiser steps per rollout batch as every other method (equal budgets)."""
    if r.reveal_step is None:
        raise ValueError("tracerl views need the rollout's reveal_step")
    trace = r.reveal_step.long() // r.key("shrink", 1)  # [N, L]
    k = int(trace.max()) + 1
    tau = torch.arange(k)[:, None, None]  # [K, 1, 1]
    masks, targets = trace[None] >= tau, trace[None] == tau  # [K, N, L]
    t = masks.float().mean(-1)  # [K, N]
    no_prompt = torch.zeros(k, *r.prompt_ids.shape, dtype=torch.bool)
    return Views(masks, no_prompt, t, r.seed, targets=targets, schedule=spread(k, r.mu))


def dipo_rounds(reveal_step: torch.Tensor, block_length: int) -> torch.Tensor:
    """DiPO's round of every completion position: the rank of its reveal step among the distinct reveal steps of its
    block (0: the block's first step), blocks of ``block_length`` from the completion's first position.
    [N, L] -> [N, L] long."""
    n, length = reveal_step.shape
    nb = -(-length // block_length)
    real = torch.arange(nb * block_length) < length  # [nb bl]
    s = torch.nn.functional.pad(reveal_step.long(), (0, nb * block_length - length)).view(n, nb, block_length)
    real = real.view(nb, block_length)[None]  # [1, nb, bl]
    same = s[..., :, None] == s[..., None, :]  # [N, nb, bl (j), bl (k)]
    earlier = torch.ones(block_length, block_length, dtype=torch.bool).tril(-1)  # [j, k]: k < j
    first = real & ~(same & earlier & real[..., None, :]).any(-1)  # [N, nb, bl]: j is its step's first position
    below = (s[..., :, None] < s[..., None, :]) & first[..., :, None]  # [N, nb, j, k]: step_j < step_k, j first
    return below.sum(-2).view(n, -1)[:, :length]


def dipo_views(r: ViewRequest) -> Views:
    """DiPO (Zhu et al. 2025, DiRL, arXiv 2512.22234, Sec. 3.2, Eq. 6): the step-level views of a blockwise
    trajectory. Round rho (:func:`dipo_rounds`) packs the rho-th sampler step of every block: it masks, in each
    block, every position revealed at that block's rho-th step or later, and trains on the tokens that step revealed.
    Under block attention (a block-diffusion model, ``ddmrl.likelihood.block``: each block's noised copy sees the
    clean blocks before it) the view is, block by block, the exact state the sampler took that step from; on a
    full-sequence model the other blocks are seen in the same round instead (docs/methods.md). Every rollout has
    ``block_length`` rounds (rounds a block does not reach are empty: the release's padding to block_size samples
    per response), so that a rollout's loss is the mean over the rounds of each round's token mean. The rounds are
    spread over the mu optimiser steps (:func:`spread`), each trained once per rollout batch."""
    if r.reveal_step is None:
        raise ValueError("dipo views need the rollout's reveal_step")
    rounds = dipo_rounds(r.reveal_step, r.block_length)  # [N, L]
    k = max(r.block_length, int(rounds.max()) + 1)
    rho = torch.arange(k)[:, None, None]  # [K, 1, 1]
    masks, targets = rounds[None] >= rho, rounds[None] == rho  # [K, N, L]
    no_prompt = torch.zeros(k, *r.prompt_ids.shape, dtype=torch.bool)
    return Views(masks, no_prompt, masks.float().mean(-1), r.seed, targets=targets, schedule=spread(k, r.mu))


def spread(views: int, steps: int) -> tuple[tuple[int, ...], ...]:
    """``views`` views over ``steps`` optimiser steps, in order: contiguous chunks whose sizes differ by at most one
    (every view used once) when there are at least as many views as steps, else one view per step, cycling.

    >>> spread(5, 2), spread(2, 4)
    (((0, 1), (2, 3, 4)), ((0,), (1,), (0,), (1,)))
    """
    if views < steps:
        return tuple((s % views,) for s in range(steps))
    bounds = [s * views // steps for s in range(steps + 1)]
    return tuple(tuple(range(bounds[s], bounds[s + 1])) for s in range(steps))


def _states(r: ViewRequest) -> tuple[torch.Tensor, torch.Tensor]:
    """[S, N, L] the sampler's states before and after each step: stored, or rebuilt from the reveal steps."""
    if r.completion_ids is None or r.mask_id is None:
        raise ValueError("views built from the sampler's states need the rollouts' completion_ids and the mask id")
    if r.trajectory is not None:
        states = r.trajectory.states
    elif r.reveal_step is not None:
        states = states_from_reveal(r.completion_ids, r.reveal_step, r.mask_id)
    else:
        raise ValueError("views built from the sampler's states need its stored trajectory or reveal steps")
    return states, next_states(states, r.completion_ids)


def cj_grpo_views(r: ViewRequest) -> Views:
    """CJ-GRPO (Yang et al. 2025, arXiv 2509.23924): one view per sampler step s, the state x_s the step started
    from, whose targets are the tokens the step unmasked (towards the state after it); every optimiser step uses
    every view, the objective averaging the steps' token means, so that training follows the rollout's transitions
    exactly and each token is a target once."""
    states, after = _states(r)
    masks = states == r.mask_id  # [S, N, L]
    targets = masks & (after != r.mask_id)
    s = states.shape[0]
    stored = StepStates(states, after, torch.arange(s)[:, None].expand(s, states.shape[1]))
    no_prompt = torch.zeros(s, *r.prompt_ids.shape, dtype=torch.bool)
    every = (tuple(range(s)),) * r.mu
    return Views(masks, no_prompt, masks.float().mean(-1), r.seed, targets=targets, schedule=every, states=stored)


def top_steps(step_advantages: torch.Tensor, k: int) -> torch.Tensor:
    """[N, K] the K steps of each rollout with the largest |per-step advantage| (MDPO's released step selection,
    ``torch.topk(advantages.abs().sum(0), k=sample_train_steps)`` over the rows of one process, which its configs
    fill with one rollout), largest first. K is capped at the number of steps."""
    return torch.topk(step_advantages.abs(), k=min(k, step_advantages.shape[1]), dim=-1).indices


def mdpo_views(r: ViewRequest) -> Views:
    """MDPO (He et al. 2025, arXiv 2508.13148): the ``sample_train_steps`` sampler steps of each rollout with the
    largest |per-step advantage| (:func:`top_steps`); view j of rollout i is the state x_s of its j-th step, every
    masked position a target, trained towards the step's full prediction x̂_0^(s) and weighted by the step's
    confidence in it. The K views are spread over the mu optimiser steps (each used once per rollout batch, as
    MDPO's single update per batch uses each)."""
    if r.trajectory is None or r.step_advantages is None:
        raise ValueError("mdpo views need the rollouts' stored trajectory and per-step advantages")
    sel = top_steps(r.step_advantages, r.key("sample_train_steps", 1)).T  # [K, N]
    rows = torch.arange(sel.shape[1])[None]  # [1, N]
    inputs = r.trajectory.states[sel, rows]  # [K, N, L]
    masks = inputs == r.mask_id
    stored = StepStates(inputs, r.trajectory.predictions[sel, rows], sel, r.trajectory.confidence[sel, rows])
    no_prompt = torch.zeros(sel.shape[0], *r.prompt_ids.shape, dtype=torch.bool)
    return Views(masks, no_prompt, masks.float().mean(-1), r.seed, schedule=spread(sel.shape[0], r.mu), states=stored)


def block_random_views(r: ViewRequest) -> Views:
    """SPG's ``block_random`` views (Wang et al. 2026): a random block b; every block after b fully masked; inside
    b a random count in [1, block_length] of random positions masked; prompt tokens masked with p_mask_prompt.
    Mirrors semi-AR decoding. ``views_per_step`` consecutive views form one optimiser step (mu steps in all)."""
    completion_mask, prompt_ids, block_length, seed = r.completion_mask, r.prompt_ids, r.block_length, r.seed
    per_step, p_mask_prompt = r.key("views_per_step", 1), r.key("p_mask_prompt", 0.15)
    v = r.mu * per_step
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
        prompt_masks.append((torch.rand(prompt_ids.shape, generator=g) < p_mask_prompt) & (prompt_ids != r.pad_id))
    masks_t = _ensure_one(torch.stack(masks), completion_mask, _random(seed, n, length))
    t = masks_t.float().mean(-1)
    schedule = tuple(tuple(range(s, s + per_step)) for s in range(0, v, per_step))
    return Views(masks_t, torch.stack(prompt_masks), t, seed, schedule=schedule)


COUPLED_RATIOS = (0.2, 0.8)  # DiffuCoder's mask ratio t ~ U[0.2, 0.8] (``forward_process`` of its release)


def coupled_views(r: ViewRequest) -> Views:
    """Coupled-GRPO (DiffuCoder; Gong et al. 2025, arXiv 2506.20639): three views per optimiser step j, from one
    ratio t_j ~ U[0.2, 0.8] shared by the rows (as the release draws one ``mask_ratio`` per call) and one uniform
    u per position: the whole completion masked (t = 1), the positions with u < t_j (t = t_j) and exactly their
    complement (t = 1 - t_j), so that every completion position is masked in exactly one view of the pair. The
    prompt is never masked; positions after the first EOS are masked like any other (the loss ignores them). No
    view is forced to mask a token: a position's estimate comes from whichever view of the pair masks it. Each step
    uses its own triple (3 mu views, 3 forward passes per optimiser step against UniGRPO's 1)."""
    n, length = r.completion_mask.shape
    lo, hi = COUPLED_RATIOS
    masks, ratios = [], []
    for j in range(r.mu):
        g = generator(r.seed, "view", j)
        t = lo + (hi - lo) * torch.rand((), generator=g).item()
        m = torch.rand(n, length, generator=g) < t  # [N, L]
        masks += [torch.ones_like(m), m, ~m]
        ratios += [1.0, t, 1.0 - t]
    v = 3 * r.mu
    t_views = torch.tensor(ratios, dtype=torch.float32)[:, None].expand(v, n).clone()
    schedule = tuple(tuple(range(3 * j, 3 * j + 3)) for j in range(r.mu))
    no_prompt = torch.zeros(v, *r.prompt_ids.shape, dtype=torch.bool)
    return Views(torch.stack(masks), no_prompt, t_views, r.seed, schedule=schedule)


# ------------------------------------------------------------------------------ VRPO (LLaDA 1.5) and BGPO


def stratified_counts(length: int, n: int, k: int) -> torch.Tensor:
    """VRPO's and BGPO's masked-token counts of one sequence with ``length`` valid tokens at ``n`` timesteps: from a
    first count ``k`` in [1, length], n evenly spaced counts round(k + j length / n), j = 0..n-1, wrapped into
    [1, length] (LLaDA's stratified discrete ELBO timesteps; DARE's ``_forward_process_vrpo`` and
    ``_forward_process_bgpo``). Returns [n] (long); all 0 when
    there is no valid token."""
    if length == 0:
        return torch.zeros(n, dtype=torch.long)
    x = torch.round(torch.linspace(float(k), k + (n - 1) * (length / n), steps=n)).long()
    return (x - 1) % length + 1


def stratified_views(r: ViewRequest) -> Views:
    """VRPO (LLaDA 1.5; Zhu et al. 2025, arXiv 2505.19223) and BGPO (Lin et al. 2025, arXiv 2510.11683):
    ``views_per_step`` timesteps per optimiser step with one mask each (VRPO's optimal allocation n_t = n,
    n_yt = 1; BGPO's m Monte Carlo samples), each step its own draw. Per row and step, with l its valid completion
    tokens: a first count k ~ U{1..l}, then the stratified counts of :func:`stratified_counts`; each view masks that
    many valid positions, drawn uniformly without replacement, and its ratio t is count / l (the discrete ELBO's
    L / l weight is its 1 / t). The prompt and the positions after the first EOS are never masked. The views are
    the same inputs for the policy, old and reference passes (the paper's antithetic sampling)."""
    n, length = r.completion_mask.shape
    per_step, valid = r.key("views_per_step", 1), r.completion_mask
    lengths = valid.sum(1)  # [N]
    masks, ratios = [], []
    for s in range(r.mu):
        g = generator(r.seed, "view", s)
        first = (torch.rand(n, generator=g) * lengths).long() + 1  # [N] k ~ U{1..l}
        counts = [stratified_counts(int(m), per_step, int(k)) for m, k in zip(lengths, first, strict=True)]
        counts = torch.stack(counts, 1)  # [n_t, N]
        for j in range(per_step):
            order = torch.rand(n, length, generator=g).masked_fill(~valid, 2.0).argsort(1).argsort(1)  # [N, L]
            masks.append(order < counts[j][:, None])
            ratios.append(counts[j] / lengths.clamp_min(1))
    v = r.mu * per_step
    schedule = tuple(tuple(range(s * per_step, (s + 1) * per_step)) for s in range(r.mu))
    no_prompt = torch.zeros(v, *r.prompt_ids.shape, dtype=torch.bool)
    return Views(torch.stack(masks), no_prompt, torch.stack(ratios).float(), r.seed, schedule=schedule)


# ---------------------------------------------------------------------------------------------------- ESPO
ESPO_SEEDS = 2**12  # ESPO's release draws its mask seeds from [0, 4096) (``_generate_and_score_completions``)


def espo_counts(lengths: torch.Tensor, u: float) -> torch.Tensor:
    """ESPO's stratified mask counts (Ou et al. 2025, arXiv 2512.03759): one uniform u in [0, 1) shared by the N
    rows, row i shifted by i / N, c_i = floor(((u + i / N) mod 1) (T_i + 1)): each c_i uniform on {0, ..., T_i}
    (T_i valid tokens), the rows spread evenly over the counts. ``lengths`` [N] -> [N]."""
    n = lengths.shape[0]
    s = (u + torch.arange(n, dtype=torch.float64) / n) % 1.0  # [N]
    return torch.minimum((s * (lengths + 1).double()).floor().long(), lengths.long())


def released_espo_counts(length: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """The release's counts (ESPO ``forward_process``): k ~ U{0..T}, x = round(linspace(k, k + (n - 1)(T + 1) / n,
    n)) mod (T + 1) in float32, T the full completion length. ``torch.round`` rounds halves to even, so an offset of
    one half makes a row's count always even before the modulo: not uniform (docs/reproduction.md). [N]."""
    k = torch.randint(0, length + 1, (), generator=gen)
    x = torch.round(torch.linspace(float(k), float(k + (n - 1) * ((length + 1) / n)), steps=n)).long()
    return x % (length + 1)


def espo_masks(counts: torch.Tensor, valid: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Mask ``counts[i]`` valid positions of row i, chosen uniformly at random. [N], [N, L] -> [N, L] bool."""
    order = torch.rand(valid.shape, generator=gen).masked_fill(~valid, 2.0).argsort(1).argsort(1)  # [N, L]
    return order < counts[:, None]


def released_espo_masks(counts: torch.Tensor, length: int, gen: torch.Generator) -> torch.Tensor:
    """The release's masks: row i masks the first counts[i] entries of a fresh ``randperm(L)``, row after row."""
    first = torch.arange(length)[None] < counts[:, None]  # [N, L]
    return torch.stack([row[torch.randperm(length, generator=gen)] for row in first])


def espo_views(r: ViewRequest) -> Views:
    """ESPO (Ou et al. 2025, arXiv 2512.03759): per optimiser step, ``views_per_step`` Monte Carlo samples (its
    num_mc) of the sequence ELBO, each a pair of views: c_i valid completion tokens masked (:func:`espo_counts`,
    nominal ratio c_i / (T_i + 1)) and exactly the other T_i - c_i (ratio (T_i - c_i) / (T_i + 1); its ``reduce_var``
    coupling). Each view is on its own an unbiased estimate of the ELBO (its count is uniform on {0..T_i}); the pair
    averages two. The prompt is never masked. Step j uses views [2 M j, 2 M (j + 1)); the same views give the
    current, old and reference ELBOs.

    ``legacy``: the release's draws (:func:`released_espo_counts`, :func:`released_espo_masks`) over every completion
    position (T = L), from one seed in [0, 4096) per (step, sample) as its ``mask_seeds``."""
    n, length = r.completion_mask.shape
    m = r.key("views_per_step", 1)
    valid = r.completion_mask.bool()
    lengths = valid.sum(1)  # [N]
    if r.legacy:
        seeds = torch.randint(0, ESPO_SEEDS, (r.mu, m), generator=generator(r.seed, "espo_seeds")).tolist()
    masks, ratios = [], []
    for j in range(r.mu):
        for s in range(m):
            if r.legacy:
                g = torch.Generator().manual_seed(seeds[j][s])
                counts, total = released_espo_counts(length, n, g), torch.full((n,), length)
                mask = released_espo_masks(counts, length, g)
            else:
                g = generator(r.seed, "view", j, s)
                counts, total = espo_counts(lengths, torch.rand((), generator=g, dtype=torch.float64).item()), lengths
                mask = espo_masks(counts, valid, g)
            masks += [mask, valid & ~mask]
            ratios += [counts / (total + 1), (total - counts) / (total + 1)]
    schedule = tuple(tuple(range(2 * m * j, 2 * m * (j + 1))) for j in range(r.mu))
    no_prompt = torch.zeros(2 * m * r.mu, *r.prompt_ids.shape, dtype=torch.bool)
    return Views(torch.stack(masks), no_prompt, torch.stack(ratios).float(), r.seed, schedule=schedule)


# ---------------------------------------------------------------------------------------------------- EBPO
def ebpo_block_counts(block_lengths: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """EBPO's stratified block counts (LLaDA2.1, arXiv 2602.08676; DARE's ``_forward_process_ebpo``): the cells
    (sample m, block b) of row i, M x B_i of them in order, get noise levels (u_i + idx / (M B_i)) mod 1 and mask
    c = min(floor(noise l_b) + 1, l_b) of their block's l_b valid tokens: c uniform on {1..l_b}. ``block_lengths``
    [N, M, B] (0 for a block with no valid token), ``u`` [N] -> counts [N, M, B] (0 where l_b = 0)."""
    n, m, b = block_lengths.shape
    present = block_lengths > 0  # [N, M, B]
    cells = present.flatten(1).sum(1, keepdim=True).clamp_min(1)  # [N, 1] M x B_i
    idx = (present.flatten(1).cumsum(1) - 1).clamp_min(0)  # [N, M B] rank among the row's cells
    noise = (u.double()[:, None] + idx.double() / cells) % 1.0
    counts = torch.minimum((noise * block_lengths.flatten(1)).floor().long() + 1, block_lengths.flatten(1))
    return (counts * present.flatten(1)).view(n, m, b)


def ebpo_views(r: ViewRequest) -> Views:
    """EBPO (LLaDA2.1's ELBO-based block policy optimisation, arXiv 2602.08676, as DARE implements it) over a
    full-sequence model, block by block: the completion is cut into blocks of the sampler's ``block_length`` (from
    its first position, as the llada sampler's semi-AR blocks); per optimiser step ``views_per_step`` Monte Carlo
    samples (DARE's mc_num timesteps), each with one view per block b: the blocks before b clean, c_b of block b's
    valid tokens masked (:func:`ebpo_block_counts`, nominal ratio c_b / l_b) and every later position masked, the
    state the semi-AR sampler decodes block b from (a block-diffusion model's clean prefix, its later blocks hidden).
    The targets are block b's masked tokens. Step j uses views [M B j, M B (j + 1)), B = ceil(L / block_length)."""
    n, length = r.completion_mask.shape
    m, size = r.key("views_per_step", 1), r.block_length
    nb = -(-length // size)
    valid = r.completion_mask.bool()
    pos = torch.arange(length)
    block = pos // size  # [L]
    in_block = block[None] == torch.arange(nb)[:, None]  # [B, L]
    block_lengths = (valid[:, None] & in_block[None]).sum(-1)  # [N, B]
    masks, targets, ratios = [], [], []
    for j in range(r.mu):
        g = generator(r.seed, "view", j)
        counts = ebpo_block_counts(block_lengths[:, None].expand(n, m, nb), torch.rand(n, generator=g))  # [N, M, B]
        for s in range(m):
            order = torch.rand(n, length, generator=g).masked_fill(~valid, 2.0)  # [N, L]
            for b in range(nb):
                rank = order.masked_fill(~in_block[b][None], 3.0).argsort(1).argsort(1)  # [N, L] 0 = first in b
                chosen = (rank < counts[:, s, b : b + 1]) & valid & in_block[b][None]
                masks.append(chosen | (block[None] > b))
                targets.append(chosen)
                ratios.append(counts[:, s, b] / block_lengths[:, b].clamp_min(1))
    schedule = tuple(tuple(range(m * nb * j, m * nb * (j + 1))) for j in range(r.mu))
    no_prompt = torch.zeros(len(masks), *r.prompt_ids.shape, dtype=torch.bool)
    t = torch.stack(ratios).float()  # [V, N]
    return Views(torch.stack(masks), no_prompt, t, r.seed, targets=torch.stack(targets), schedule=schedule)


def tree_views(r: ViewRequest) -> Views:
    """d-TreeRPO (Pan et al. 2025, arXiv 2512.09675): one view per depth d of a tree of rollouts
    (``ddmrl.rollout.Tree``), the edge from each row's node at depth d to its child: the input is the parent's
    state (every token revealed at a step >= the depth's first step masked), the targets the tokens the child
    revealed (steps in [steps[d - 1], steps[d])), trained towards the row's own tokens. Rows under one node repeat
    its edges (the objective counts each node once). Every optimiser step uses every view: every segment of the
    tree is trained at every step (the release takes one parent's segments per num_iterations steps)."""
    if r.reveal_step is None or not r.branch_steps:
        raise ValueError("tree views need the rollouts' reveal_step and the tree's branch steps (rollout branching)")
    bounds = torch.tensor(r.branch_steps[:-1], dtype=torch.long)  # [D - 1]
    depth = torch.bucketize(r.reveal_step.long(), bounds, right=True)  # [N, L] the depth that revealed each token
    d = torch.arange(len(r.branch_steps))[:, None, None]  # [D, 1, 1]
    masks, targets = depth[None] >= d, depth[None] == d  # [D, N, L]
    no_prompt = torch.zeros(len(r.branch_steps), *r.prompt_ids.shape, dtype=torch.bool)
    every = (tuple(range(len(r.branch_steps))),) * r.mu
    return Views(masks, no_prompt, masks.float().mean(-1), r.seed, targets=targets, schedule=every)


def _random(seed: int, n: int, length: int) -> torch.Tensor:
    return torch.rand(n, length, generator=generator(seed, "ensure_one"))


def apply_view(
    prompt_ids: torch.Tensor, completion_ids: torch.Tensor, views: Views, j: int, mask_id: int
) -> torch.Tensor:
    """The model input of view j: [N, P + L] with the view's prompt and completion positions set to ``mask_id``
    (a view built from the sampler's states starts from that state instead of the completion)."""
    completion = completion_ids if views.states is None else views.states.inputs[j]
    x = torch.cat([prompt_ids, completion], dim=1)
    masked = torch.cat([views.prompt_masks[j], views.masks[j]], dim=1)
    return x.masked_fill(masked, mask_id)


def mask_frequency(views: Views, completion_mask: torch.Tensor) -> torch.Tensor:
    """RebRL's F(k): in how many views token k is a (valid) loss target. [N, L]."""
    return (views.target_masks & completion_mask[None]).sum(0)
