"""MAR's sampler with everything GRPO needs recorded: the random order, the state at every AR step and the diffusion
head's whole denoising trajectory of every token it sampled.

MAR (Li et al. 2024, section 3.3; its ``sample_tokens``): draw a uniformly random order of the tokens; at AR step s
of S, the transformer gives a condition z_i for every unknown token i, the number still unknown after the step
follows MaskGIT's cosine schedule floor(N cos(pi/2 (s + 1) / S)) (at least one revealed, one kept until the last
step), and the diffusion head samples the revealed tokens' values from their conditions by K DDPM steps
(``ddmrl.mar.diffusion``) at temperature tau. The tokens revealed are the ones at the start of the order that are
no longer masked (MAR's ``mask_by_order`` masks the first ``mask_len`` of the order). The order has no parameters, so
its probability is constant: the policy's log-probability of an image is the sum of its tokens' transition
log-probabilities, each under the condition of the step that revealed it.

With ``drafts=True`` (what training rollouts record) the head also samples every token that stays unknown after the
step, from that step's condition: MAR's transformer proposes a condition for every unknown token at every step (as
its training loss does), and MAR-GRPO's released code records these *drafts* at the steps it trains, for its loss and
its consistency-aware token selection. Drafts are discarded from the image, as MAR discards the conditions of the
tokens it does not reveal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ddmrl.mar.diffusion import Schedule, posterior_mean, sampling_schedule, step_std
from ddmrl.mar.encoding import decode


def ar_schedule(num_tokens: int, ar_steps: int) -> list[int]:
    """Tokens still unknown after each of the ``ar_steps`` steps (MAR's ``sample_tokens``): the cosine schedule,
    at least one token revealed per step and one kept unknown until the last step, which reveals the rest (0)."""
    if not 1 <= ar_steps <= num_tokens:
        raise ValueError(f"ar_steps must be in [1, {num_tokens}], got {ar_steps}")
    unknown, out = num_tokens, []
    for s in range(ar_steps - 1):
        target = math.floor(num_tokens * math.cos(math.pi / 2 * (s + 1) / ar_steps))
        unknown = max(1, min(unknown - 1, target))
        out.append(unknown)
    return [*out, 0]


def schedule_of(model, sampler) -> Schedule:
    """The head's sampling schedule for a sampler section (``ddmrl.config.MarSamplerConfig``)."""
    return sampling_schedule(model.config.diffusion_steps, sampler.diffusion_steps, sampler.variance)


@dataclass
class MARRollout:
    """One batch of B images sampled with S AR steps of K diffusion steps (N tokens of C channels, conditions of D)."""

    prompt_ids: torch.Tensor  # [B, P]
    masks: torch.Tensor  # [S + 1, B, N] bool: unknown at the start of step s (masks[S]: none)
    tokens: torch.Tensor  # [S, B, N, C] the known tokens at the start of step s (0 where unknown)
    trajectories: torch.Tensor  # [S, K + 1, B, N, C] the head's trajectory of every token sampled at step s
    conditions: torch.Tensor  # [B, N, D] the condition each token was revealed under
    final: torch.Tensor  # [B, N, C] the generated tokens
    codes: torch.Tensor  # [B, N] their nearest colour codes
    transformer_passes: int  # per image
    head_passes: int  # head evaluations per image (one per sampled token per diffusion step)

    @property
    def committed(self) -> torch.Tensor:
        """[S, B, N] bool: the tokens revealed at step s."""
        return self.masks[:-1] & ~self.masks[1:]


def sample_head(
    head, schedule: Schedule, z: torch.Tensor, gen: torch.Generator, temperature: float = 1.0
) -> torch.Tensor:
    """The head's K-step ancestral sampling of n tokens from their conditions z [n, D]: the trajectory
    [K + 1, n, C], ``traj[K]`` the initial noise and ``traj[0]`` the sample (the last step is the mean)."""
    n, k_steps, c = z.shape[0], len(schedule), head.out.out_features
    x = torch.randn(n, c, generator=gen).to(z.device)
    traj = [x]
    for k in reversed(range(k_steps)):
        kk = torch.full((n,), k, dtype=torch.long, device=z.device)
        mean = posterior_mean(schedule, x, kk, head(x, schedule.timesteps.to(z.device)[kk], z))
        if k > 0:
            x = mean + step_std(schedule, kk, temperature)[:, None] * torch.randn(n, c, generator=gen).to(z.device)
        else:
            x = mean
        traj.append(x)
    return torch.stack(traj[::-1])  # [K + 1, n, C], index k = state after step k


@torch.no_grad()
def generate(
    model,
    prompt_ids: torch.Tensor,
    ar_steps: int,
    schedule: Schedule,
    gen: torch.Generator,
    temperature: float = 1.0,
    drafts: bool = False,
) -> MARRollout:
    """Sample one image per row of ``prompt_ids`` [B, P] (repeat the rows for a group), recording every state."""
    b, n, c = prompt_ids.shape[0], model.config.num_tokens, model.config.token_dim
    dev, k_steps = prompt_ids.device, len(schedule)
    order = torch.rand(b, n, generator=gen).argsort(-1).to(dev)  # [B, N] a uniformly random order per image
    rank = order.argsort(-1)  # [B, N] the place of every token in its image's order
    tokens = torch.zeros(b, n, c, device=dev)
    conditions = torch.zeros(b, n, model.config.hidden_size, device=dev)
    masks, states, trajectories, head_passes = [torch.ones(b, n, dtype=torch.bool, device=dev)], [], [], 0
    for unknown_after in ar_schedule(n, ar_steps):
        mask = masks[-1]
        mask_next = rank < unknown_after  # MAR's mask_by_order: the first unknown_after of the order stay masked
        revealed = mask & ~mask_next
        z = model.conditions(prompt_ids, tokens, mask)  # [B, N, D]
        sampled = mask if drafts else revealed
        traj = torch.zeros(k_steps + 1, b, n, c, device=dev)
        traj[:, sampled] = sample_head(model.head, schedule, z[sampled], gen, temperature)
        head_passes += k_steps * int(sampled.sum()) // b
        states.append(tokens.clone())
        trajectories.append(traj)
        conditions[revealed] = z[revealed]
        tokens = torch.where(revealed[..., None], traj[0], tokens)
        masks.append(mask_next)
    return MARRollout(
        prompt_ids=prompt_ids,
        masks=torch.stack(masks),
        tokens=torch.stack(states),
        trajectories=torch.stack(trajectories),
        conditions=conditions,
        final=tokens,
        codes=decode(tokens),
        transformer_passes=ar_steps,
        head_passes=head_passes,
    )
