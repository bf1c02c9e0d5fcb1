"""Co-GRPO's schedule policy (Zhou, Ni et al. 2025, "Co-GRPO: Co-Optimized Group Relative Policy Optimization for
Masked Diffusion Model", arXiv 2512.22288): the inference schedule of MaskGIT's sampler as actions of the same MDP
as the tokens, one action per step, trained by GRPO with the model under one shared reward.

What is the paper's: generation is one MDP whose agent acts on the visual tokens and on the schedule parameters that
are normally fixed functions of the step (re-mask ratio, sampling temperature, guidance scale; its table also lists
the re-mask temperature); GRPO at the trajectory level with a shared reward, without back-propagating through the
sampler. No code has been released; what follows is ddmrl's reading where the paper is silent:

* one action per step, a_s = (ratio shift, log temperature multiplier, log CFG multiplier) (``actions`` selects
  which), drawn from a diagonal Gaussian N(mu_phi(o_s), diag(sigma^2)) with a learned sigma per action;
* the schedule a zero action gives is the sampler's own: the fraction of the completion left masked after step s is
  sigmoid(logit(m((s + 1) / T)) + a_ratio) (m MaskGIT's cosine schedule), the temperature T_s = T exp(a_temp), the
  guidance scale w_s = w exp(a_cfg). The ratio has no effect at the last step (everything is revealed), so its
  factor is left out of the last step's log-probability;
* mu_phi is a per-step table (``head: table``, ``knots`` entries over the normalised step r = s / (T - 1), linearly
  interpolated, so a schedule trained at 12 steps also drives 24) or a tiny MLP (``head: mlp``) of the observation
  o_s = (r, fraction still masked, mean confidence of the masked positions at the previous step);
* the policy starts at the zero action (the table and the MLP's last layer are zero) with sigma = ``init_std``;
* in ``eval()`` mode it acts with its mean (a deterministic learned schedule).

obs of a recorded step: o_s [.., 4] = (r, masked fraction, previous confidence, 1 if a later step follows else 0);
action: a_s [.., D].
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from ddmrl.aux_policies.base import AuxPolicy, AuxTrace

if TYPE_CHECKING:
    from ddmrl.config.grpo import AuxPolicyConfig

ACTIONS = ("ratio", "temperature", "cfg")
OBS = 4  # (r, masked fraction, previous confidence, a later step follows)


def gaussian_logp(a: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Elementwise log N(a; mean, exp(log_std)^2)."""
    return -0.5 * ((a - mean) * torch.exp(-log_std)) ** 2 - log_std - 0.5 * math.log(2 * math.pi)


def interpolate(table: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Piecewise-linear ``table`` [K, D] (knots at r = k / (K - 1)) at ``r`` [...] in [0, 1]: [..., D]."""
    k = table.shape[0]
    pos = r.clamp(0, 1) * (k - 1)
    lo = pos.floor().long().clamp(max=k - 1)
    hi = (lo + 1).clamp(max=k - 1)
    w = (pos - lo)[..., None]
    return (1 - w) * table[lo] + w * table[hi]


def remasked_fraction(base: float, shift: torch.Tensor) -> torch.Tensor:
    """The fraction left masked after a step [N]: sigmoid(logit(base) + shift), exactly ``base`` where shift is 0."""
    if base <= 0:
        return torch.zeros_like(shift, dtype=torch.float64)
    if base >= 1:
        return torch.ones_like(shift, dtype=torch.float64)
    shifted = torch.sigmoid(math.log(base / (1 - base)) + shift.double())
    return torch.where(shift == 0, torch.full_like(shifted, base), shifted)


class SchedulePolicy(AuxPolicy):
    """A Gaussian policy over the schedule actions of one MaskGIT step."""

    kind = "schedule"

    @classmethod
    def from_config(cls, cfg: AuxPolicyConfig, rollout_steps: int) -> SchedulePolicy:
        """Its actions, head and width from the section; one knot per rollout step."""
        return cls(actions=cfg.actions, head=cfg.head, knots=rollout_steps, hidden_size=cfg.hidden_size,
                   init_std=cfg.init_std)  # fmt: skip

    def __init__(
        self,
        actions: tuple[str, ...] | list[str] = ACTIONS,
        head: str = "table",
        knots: int = 12,
        hidden_size: int = 32,
        init_std: float = 0.3,
    ) -> None:
        super().__init__(actions=list(actions), head=head, knots=knots, hidden_size=hidden_size, init_std=init_std)
        unknown = [a for a in actions if a not in ACTIONS]
        if unknown or not actions or len(set(actions)) != len(actions):
            raise ValueError(f"actions = {list(actions)}: a non-empty list of distinct names from {ACTIONS}")
        self.actions = tuple(actions)
        d = len(self.actions)
        if head == "table":
            self.table = nn.Parameter(torch.zeros(max(knots, 1), d))
        elif head == "mlp":
            self.mlp = nn.Sequential(nn.Linear(OBS - 1, hidden_size), nn.Tanh(), nn.Linear(hidden_size, d))
            nn.init.zeros_(self.mlp[-1].weight)
            nn.init.zeros_(self.mlp[-1].bias)
        else:
            raise ValueError(f"head = {head!r}: choose table or mlp")
        self.head = head
        self.log_std = nn.Parameter(torch.full((d,), math.log(init_std)))

    def mean(self, obs: torch.Tensor) -> torch.Tensor:
        """mu_phi(o) [..., D] from observations [..., 4]."""
        if self.head == "table":
            return interpolate(self.table, obs[..., 0])
        return self.mlp(obs[..., : OBS - 1])

    def factors(self, obs: torch.Tensor) -> torch.Tensor:
        """[..., D] 1 where an action component affects the step (the ratio does not at the last step)."""
        on = torch.ones(*obs.shape[:-1], len(self.actions), dtype=obs.dtype, device=obs.device)
        if "ratio" in self.actions:
            on[..., self.actions.index("ratio")] = obs[..., 3]
        return on

    def act(self, obs: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """One step's actions [N, D] and their log-probabilities [N] for observations [N, 4]: drawn from the
        Gaussian (standard normals from ``generator``) in ``train()`` mode, its mean in ``eval()`` mode."""
        mean = self.mean(obs)
        if not self.training:
            return mean, torch.zeros(obs.shape[0], device=obs.device)
        where = generator.device if generator is not None else obs.device
        eps = torch.randn(mean.shape, generator=generator, device=where).to(mean.device)
        a = mean + torch.exp(self.log_std) * eps
        return a, (gaussian_logp(a, mean, self.log_std) * self.factors(obs)).sum(-1)

    def forward(self, obs: tuple[torch.Tensor, ...], actions: torch.Tensor) -> torch.Tensor:
        """Log-probabilities [N, S] of the recorded actions [N, S, D] given the recorded observations [N, S, 4]."""
        (o,) = obs
        return (gaussian_logp(actions, self.mean(o), self.log_std) * self.factors(o)).sum(-1)

    def knobs(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ratio shift, temperature multiplier, CFG multiplier), each [N], of actions [N, D] (0, 1, 1 for the
        actions the policy does not take)."""
        zero = torch.zeros(a.shape[0], dtype=a.dtype, device=a.device)

        def component(name: str) -> torch.Tensor:
            return a[:, self.actions.index(name)] if name in self.actions else zero

        return component("ratio"), torch.exp(component("temperature")), torch.exp(component("cfg"))

    def summary(self, trace: AuxTrace) -> dict[str, float]:
        """The mean of each action over the active steps, as the sampler applies it (shift, multipliers)."""
        a, on = trace.actions, trace.active[..., None].float()
        out = {}
        for i, name in enumerate(self.actions):
            value = a[..., i] if name == "ratio" else torch.exp(a[..., i])
            out[f"aux/{name}"] = ((value[..., None] * on).sum() / on.sum().clamp_min(1)).item()
        return out
