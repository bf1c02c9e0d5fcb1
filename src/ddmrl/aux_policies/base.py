"""What every auxiliary policy shares: the trace a sampler records of its actions, the module interface, saving and
loading next to the model, and the GRPO loss on its per-step log-probabilities.

An auxiliary policy is a second trainable module besides the model (docs/aux_policies.md): a sampler
asks it for an action at each step (Co-GRPO's schedule of the step, or which positions a learned unmasking policy
reveals), draws the action from the sampler's own generator and records, per row and step, the policy's inputs,
the action and its log-probability. GRPO then trains the policy on those trajectories like PPO trains any policy:
a clipped ratio per step, exp(log pi_phi(a_s | o_s) - log pi_old(a_s | o_s)), times the rollout's advantage.

The policy's observations are recorded as the sampler computed them (from the model's logits at the time): they
are the state of the MDP, so a model trained jointly changes what the policy will observe next time, not the
gradient of this step (the observations carry no gradient to the model).

Training and evaluation: in ``train()`` mode a policy samples its exploration distribution (the one the
log-probabilities refer to); in ``eval()`` mode it acts as deployed (the schedule policy its mean, the unmasking
policy at its evaluation temperature).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ddmrl.aux_policies import AUX_POLICIES
from ddmrl.models.checkpoint import AUX_DIR

if TYPE_CHECKING:
    from ddmrl.config.grpo import AuxPolicyConfig


class AuxTrace(NamedTuple):
    """What a sampler records of an auxiliary policy's actions over S steps for N rows.

    obs: the policy's inputs at each step, a tuple of tensors [N, S, ...] (detached);
    actions: [N, S, ...] the actions drawn;
    logp: [N, S] their log-probabilities when drawn (the old policy of GRPO's ratio);
    active: [N, S] bool, the steps at which the row acted (a row whose block is complete waits);
    nfe: [N] the model evaluations each row needed (forward passes, both CFG branches counted).
    """

    obs: tuple[torch.Tensor, ...]
    actions: torch.Tensor
    logp: torch.Tensor
    active: torch.Tensor
    nfe: torch.Tensor

    def rows(self, rows: slice) -> AuxTrace:
        """The trace of a slice of the rows (a micro-batch)."""
        return AuxTrace(
            tuple(o[rows] for o in self.obs), self.actions[rows], self.logp[rows], self.active[rows], self.nfe[rows]
        )


def stack_steps(steps: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    """Per-step tuples of [N, ...] tensors -> one tuple of [N, S, ...] tensors."""
    return tuple(torch.stack(column, 1) for column in zip(*steps, strict=True))


class AuxPolicy(nn.Module):
    """Base of the auxiliary policies: a module whose ``forward(obs, actions)`` is the log-probability [N, S] of
    recorded actions (with gradient; a DDP wrapper's forward, so that its gradients are synchronised), built from a
    plain ``config`` mapping that is saved with its weights."""

    kind: ClassVar[str] = ""

    def __init__(self, **config: Any) -> None:
        super().__init__()
        self.config = dict(config)

    @classmethod
    def from_config(cls, cfg: AuxPolicyConfig, rollout_steps: int) -> AuxPolicy:
        """A freshly initialised policy for an ``aux_policy`` config section (``ddmrl.config.AuxPolicyConfig``);
        ``rollout_steps``: the rollout sampler's steps."""
        raise NotImplementedError

    def forward(self, obs: tuple[torch.Tensor, ...], actions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def summary(self, trace: AuxTrace) -> dict[str, float]:
        """Scalars of a rollout batch's actions for the curve (e.g. the mean NFE); none by default."""
        return {}

    def save_pretrained(self, path: str | Path) -> None:
        """``path/config.json`` (kind and config) and ``path/model.safetensors``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps({"kind": self.kind, **self.config}, indent=1))
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(state, str(path / "model.safetensors"))


def aux_config(path: str | Path) -> dict[str, Any] | None:
    """The saved config of the auxiliary policy of model directory ``path`` (None: the model has none)."""
    file = Path(path) / AUX_DIR / "config.json"
    return json.loads(file.read_text()) if file.exists() else None


def new_aux_policy(cfg: AuxPolicyConfig, rollout_steps: int) -> AuxPolicy | None:
    """A freshly initialised policy of ``AUX_POLICIES[cfg.kind]`` for an ``aux_policy`` config section (None for
    kind ``none``); ``rollout_steps``: the rollout sampler's steps (the schedule table's knots)."""
    return None if cfg.kind == "none" else AUX_POLICIES[cfg.kind].from_config(cfg, rollout_steps)


def load_aux_policy(path: str | Path, device: str | None = None) -> AuxPolicy | None:
    """The ``AuxPolicy`` saved with the model in directory ``path`` (eval mode), or None when it has none."""
    config = aux_config(path)
    if config is None:
        return None
    kind = config.pop("kind", None)
    if kind not in AUX_POLICIES:
        where = Path(path) / AUX_DIR / "config.json"
        raise ValueError(f"{where}: kind = {kind!r}; choose one of {list(AUX_POLICIES)}")
    policy = AUX_POLICIES[kind](**config)
    policy.load_state_dict(load_file(str(Path(path) / AUX_DIR / "model.safetensors")))
    return policy.to(device or "cpu").eval()


class AuxLoss(NamedTuple):
    """loss (with gradient) and the detached fraction of active steps whose ratio was clipped."""

    loss: torch.Tensor
    clip_ratio: float


def aux_clip_loss(
    logp: torch.Tensor, old: torch.Tensor, active: torch.Tensor, advantages: torch.Tensor, epsilon: float
) -> AuxLoss:
    """GRPO's clipped objective on an auxiliary policy's steps (PPO per step, as the unmasking paper's trainer):

        psi_s = min(rho_s A, clip(rho_s, 1 - eps, 1 + eps) A),  rho_s = exp(logp_s - old_s),
        loss = - mean_i [ sum_s active_is psi_is / sum_s active_is ]

    logp, old, active: [N, S]; advantages: [N]. Rows without an active step contribute 0.
    """
    ratio = torch.exp(logp - old)  # [N, S]
    a = advantages[:, None].to(ratio.dtype)
    unclipped, clipped = ratio * a, ratio.clamp(1 - epsilon, 1 + epsilon) * a
    psi = torch.minimum(unclipped, clipped).masked_fill(~active, 0.0)  # [N, S] (masked_fill: no nan from -inf)
    steps = active.sum(1)  # [N]
    per_row = psi.sum(1) / steps.clamp_min(1)
    n_active = int(steps.sum())
    clip = float(((clipped < unclipped) & active).sum()) / n_active if n_active else 0.0
    return AuxLoss(-per_row.mean(), clip)


def trajectory_logp(
    token_logps: torch.Tensor, targets: torch.Tensor, aux_logp: torch.Tensor, active: torch.Tensor
) -> torch.Tensor:
    """Co-GRPO's joint log-probability of a trajectory over tokens and schedule actions [N]:

        log p(tau) = sum_s [ log pi_phi(a_s | o_s) + sum_{k revealed at s} log p_theta(x_k | x_s) ]

    token_logps: [V, N, L] the model's log-probs at the trajectory's states (view v: the state before the tokens
    of step v are revealed; TraceRL's views); targets: [V, N, L] bool, the tokens each view scores (every revealed
    token exactly once); aux_logp, active: [N, S] the policy's log-probs and active steps.
    """
    tokens = (token_logps * targets).sum((0, 2))  # [N]
    return tokens + aux_logp.masked_fill(~active, 0.0).sum(1)


def speed_reward(reward: torch.Tensor, steps: torch.Tensor, length: int, alpha: float) -> torch.Tensor:
    """The multiplicative reward r x ((L - min(T_hat, L) + 1) / L)^alpha (1 for one step, 1/L^alpha for L steps).

    >>> speed_reward(torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1, 4, 1]), 4, 1.0).tolist()
    [1.0, 0.25, 0.0]
    """
    if alpha == 0:
        return reward
    factor = ((length - steps.clamp(max=length) + 1).to(reward.dtype) / length) ** alpha
    return reward * factor
