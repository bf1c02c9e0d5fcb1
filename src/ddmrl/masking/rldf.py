"""RLDF's views (He et al. 2026, Reinforcement Learning from Denoising Feedback, arXiv 2605.25638; released as
ant-research/Drift, ``trainer/masking_strategy.py``'s ``sequential_masking``): k of a rollout's own denoising steps,
drawn with a preference for the steps whose tokens the sampler was least sure of, each view the state that step
started from.

For rollout i with decoding steps s (the distinct reveal steps of its valid tokens, in order) the weight of a step is
the mean surprisal of the tokens it committed, w_s = -mean_{k: step(k) = s} log p_k (p_k the sampler's probability of
token k when it committed it), and k steps are drawn from softmax(w / T): without replacement when the rollout has at
least k steps, else every step once and the rest with replacement (T = 0: the top k; T >= 1e4 or +inf, or weights of
std < 1e-8: uniformly, by a random permutation). View j of rollout i is the sampler's stored state x_{s_j} (every
position revealed at s_j or later masked, for a sampler that never re-masks) and its targets are the tokens step s_j
committed (the "current" tokens the objective always keeps, ``ddmrl.objectives.rldf``).

``legacy`` (``rldf_release_views``): the release's masks, which know the steps of the valid tokens only (its step
map is renumbered over them, every other position 0): a position after the first EOS is masked in the view of the
rollout's first step and visible in every other, instead of masked exactly while it was in the sampler's state; and
a rollout whose valid tokens were all revealed in one step gets no view (the renumbered map's maximum is 0, which the
release takes for a rollout without steps), instead of k views of that step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from ddmrl.masking.views import ViewRequest, Views
from ddmrl.seeding import generator

if TYPE_CHECKING:
    from ddmrl.samplers.trajectory import Trajectory

#: the sampling temperature from which the draw is uniform (the release's UNIFORM_TEMP_THRESHOLD)
UNIFORM_TEMPERATURE = 1e4
#: the release's ``sample_temperature`` in all its configs (LLaDA and Dream, math and code)
TEMPERATURE = 1.0


def step_surprisal(
    token_probs: torch.Tensor, step: torch.Tensor, valid: torch.Tensor
) -> tuple[list[int], list[float]]:
    """One rollout's decoding steps (its valid tokens' distinct reveal steps, ascending) and their weights, the mean
    surprisal -log p of the tokens each committed (p clamped at 1e-10), each a float32 mean.
    [L] token_probs, [L] step, [L] bool valid -> (steps, weights)."""
    steps, weights = [], []
    for s in torch.unique(step[valid]).tolist():
        sel = (step == s) & valid  # [L]
        steps.append(int(s))
        weights.append(-token_probs[sel].float().clamp(min=1e-10).log().mean().item())
    return steps, weights


def sample_step_indices(
    num: int, weights: list[float] | None, k: int, temperature: float, gen: torch.Generator | None
) -> list[int]:
    """k indices into a rollout's ``num`` >= 1 steps: softmax(weights / temperature) draws (without replacement when
    num >= k; else all, then k - num with replacement), the top k at temperature 0 (all, then the heaviest
    repeated), uniform for ``weights`` None or of std < 1e-8 (a permutation's first k; else each step k // num times
    and k mod num more from a permutation). One step's weights have no std and take the weighted path."""
    if num < 1:
        raise ValueError("a rollout without decoding steps has no step to draw")
    w = None if weights is None else torch.tensor(weights, dtype=torch.float32)  # [C]
    if w is None or (num > 1 and float(w.std()) < 1e-8):
        if num >= k:
            return torch.randperm(num, generator=gen)[:k].tolist()
        chosen = list(range(num)) * (k // num)
        if k % num:
            chosen += torch.randperm(num, generator=gen)[: k % num].tolist()
        return chosen
    if temperature == 0:
        if num >= k:
            return w.topk(k).indices.tolist()
        return list(range(num)) + [int(w.argmax())] * (k - num)
    probs = torch.softmax(w / temperature, dim=0)  # [C]
    if num >= k:
        return torch.multinomial(probs, k, replacement=False, generator=gen).tolist()
    return list(range(num)) + torch.multinomial(probs, k - num, replacement=True, generator=gen).tolist()


def uniform(temperature: float) -> bool:
    """Whether the temperature draws the steps uniformly (no token probabilities needed)."""
    return math.isinf(temperature) or temperature >= UNIFORM_TEMPERATURE


def select_steps(
    reveal_step: torch.Tensor,
    valid: torch.Tensor,
    token_probs: torch.Tensor | None,
    k: int,
    temperature: float,
    gen: torch.Generator | None,
    single: bool = True,
) -> list[list[int]]:
    """Each rollout's k drawn steps (sampler steps), rollout by rollout from one generator (a rollout without valid
    tokens draws nothing and gets none; ``single`` False: nor does one whose valid tokens were all revealed in one
    step, the release's quirk). [N, L] reveal_step, valid, token_probs -> N lists."""
    flat = uniform(temperature)
    if not flat and token_probs is None:
        raise ValueError(f"RLDF's step draw at temperature {temperature} needs the rollouts' token probabilities")
    out = []
    for i in range(reveal_step.shape[0]):
        if not valid[i].any():
            out.append([])
            continue
        if flat:
            steps, weights = torch.unique(reveal_step[i][valid[i]]).tolist(), None
        else:
            steps, weights = step_surprisal(token_probs[i], reveal_step[i], valid[i])
        if len(steps) == 1 and not single:
            out.append([])
            continue
        out.append([steps[j] for j in sample_step_indices(len(steps), weights, k, temperature, gen)])
    return out


def committed_probs(trajectory: Trajectory, reveal_step: torch.Tensor) -> torch.Tensor:
    """[N, L] the sampler's probability of each token at the step that committed it, from its stored confidence
    [S, N, L] (``ddmrl.samplers.trajectory``)."""
    step = reveal_step.long().clamp(0, trajectory.confidence.shape[0] - 1)
    return trajectory.confidence.gather(0, step[None]).squeeze(0)


def rldf_masks(
    reveal_step: torch.Tensor,
    valid: torch.Tensor,
    chosen: list[list[int]],
    k: int,
    legacy: bool = False,
    states: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The masks and targets [k, N, L] of the drawn steps: mask the positions revealed at the step or later
    (``legacy``: the valid ones, and every other position in the view of the rollout's first step), target the
    step's valid tokens. A rollout with no step has empty views (the release's dummy steps). ``states`` [S, N, L]
    bool, the stored states' masked positions: the paper's masks are those of the state the step started from (the
    same as revealed-at-or-after for a sampler that never re-masks; under RCR a token revealed, re-masked and
    revealed again is masked as the sampler had it)."""
    n, length = reveal_step.shape
    masks = torch.zeros(k, n, length, dtype=torch.bool)
    targets = torch.zeros_like(masks)
    for i, steps in enumerate(chosen):
        if not steps:
            continue
        first = int(reveal_step[i][valid[i]].min())
        for j, s in enumerate(steps):
            later = reveal_step[i] >= s  # [L]
            if legacy:
                masks[j, i] = (later & valid[i]) | (~valid[i] & (s == first))
            else:
                masks[j, i] = later if states is None else states[s, i]
            targets[j, i] = (reveal_step[i] == s) & valid[i]
    return masks, targets


def rldf_views(r: ViewRequest) -> Views:
    """RLDF's k = ``views_per_step`` views of the drawn denoising steps (module docstring), every one used by every
    optimiser step of the rollout batch (the release reuses its schedule for each of its num_iterations). The steps
    are drawn at the release's temperature 1 with the sampler's stored confidence (its recorded trajectory)."""
    if r.reveal_step is None or r.trajectory is None:
        raise ValueError("rldf views need the rollouts' reveal_step and stored trajectory (its token probabilities)")
    valid = r.completion_mask.bool()
    probs = committed_probs(r.trajectory, r.reveal_step)
    k = r.key("views_per_step", 1)
    chosen = select_steps(r.reveal_step, valid, probs, k, TEMPERATURE, generator(r.seed, "view"), not r.legacy)
    states = None if r.mask_id is None else r.trajectory.states == r.mask_id  # [S, N, L]
    masks, targets = rldf_masks(r.reveal_step, valid, chosen, k, r.legacy, states)
    no_prompt = torch.zeros(k, *r.prompt_ids.shape, dtype=torch.bool)
    every = (tuple(range(k)),) * r.mu
    return Views(masks, no_prompt, masks.float().mean(-1), r.seed, targets=targets, schedule=every)
