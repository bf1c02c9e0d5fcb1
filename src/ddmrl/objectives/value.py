"""TraceRL's diffusion value model (Wang et al. 2026, TraceRL / TraDo, ICLR 2026, arXiv 2509.06949, Sec. 3.2): the
step-level returns and generalised advantages of a trajectory from token values, the clipped value loss, and the
policy objective that reads the per-token advantages (``value_clip``).

A rollout's trajectory is its sequence of trace steps t = 1..T (TraceRL's views: trace step t reveals the tokens of
view t, from the state in which every token of steps >= t is masked). The value model predicts a value V_j for each
token j from the state of its own step (the view's input). With the verifiable reward r placed on the tokens of the
rollout's last step (r_j = r there, 0 elsewhere) and t_j the step of token j (Eq. 7-9):

    r*_t = mean_{j in t} r_j,   V*_t = mean_{j in t} V_j                        (step-level aggregates)
    R*_t = r*_t + gamma R*_{t+1},   delta*_t = r*_t - V*_t + gamma V*_{t+1},   A*_t = delta*_t + gamma lam A*_{t+1}
    R_j = r_j + gamma R*_{t_j+1},   A_j = r_j - V_j + gamma V*_{t_j+1} + gamma lam A*_{t_j+1}

(R*_{T+1} = V*_{T+1} = A*_{T+1} = 0). The value loss is PPO's clipped regression onto R_j (dLLM-RL
``train/train_trado_value.py``): 1/2 max((V - R)^2, (V_clip - R)^2) with V_clip = V_old + clip(V - V_old, -eps, eps).
With gamma = lam = 1 every R_j is the rollout's reward and A_j = r - V_j: the learned baseline in place of the group
mean. A step is "next" among the steps of the row that have trainable tokens (a trace step a row does not reach is
skipped, as the release's ``torch.unique`` of the row's steps).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, NamedTuple

import torch

from ddmrl.objectives.base import ObjectiveInputs, ObjectiveOutput
from ddmrl.objectives.policy_loss import aggregate, clipped_token_loss

if TYPE_CHECKING:
    from ddmrl.config import GRPOConfig


class Credit(NamedTuple):
    """Per-token returns and advantages [V, N, L] (0 off each view's targets)."""

    returns: torch.Tensor
    advantages: torch.Tensor


def step_means(x: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean of ``x`` [V, N, L] over each view's targets [V, N, L] bool: ([V, N] means, 0 where empty; [V, N] bool
    the views with a target)."""
    count = targets.sum(-1)  # [V, N]
    total = (x * targets).sum(-1)
    return total / count.clamp_min(1), count > 0


def token_rewards(rewards: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The verifiable reward on the tokens of each rollout's last step (the last view with a target), 0 elsewhere:
    rewards [N], targets [V, N, L] bool -> [V, N, L]."""
    present = targets.any(-1)  # [V, N]
    v = torch.arange(targets.shape[0], device=targets.device)[:, None]  # [V, 1]
    last = torch.where(present, v, -1).max(0).values  # [N] the last step with a target (-1: none)
    return torch.where((v == last)[..., None] & targets, rewards[None, :, None].to(torch.float32), 0.0)


def trace_gae(
    rewards: torch.Tensor, values: torch.Tensor, targets: torch.Tensor, gamma: float = 1.0, lam: float = 1.0
) -> Credit:
    """TraceRL's step-level returns and GAE mapped to tokens (module docstring; Eq. 7-9 of the paper).

    Args:
        rewards: [V, N, L] token rewards r_j (:func:`token_rewards`), read at each view's targets.
        values: [V, N, L] the value model's V_j at each view (old values, no gradient), read at its targets.
        targets: [V, N, L] bool, the trainable tokens of each view (every token at most once over the views).
        gamma, lam: discount and GAE lambda (the release's ``gam``, ``lam``; both 1 by default).
    Returns:
        returns R_j and advantages A_j [V, N, L], 0 off the targets.
    """
    r_star, present = step_means(rewards.float(), targets)  # [V, N]
    v_star, _ = step_means(values.float(), targets)
    n_views = targets.shape[0]
    r_next = v_next = a_next = torch.zeros_like(r_star[0])  # [N] the next present step's R*, V*, A* (0 after the last)
    r_of_next, v_of_next, a_of_next = (torch.zeros_like(r_star) for _ in range(3))  # [V, N]
    for v in range(n_views - 1, -1, -1):
        r_of_next[v], v_of_next[v], a_of_next[v] = r_next, v_next, a_next
        here = present[v]
        big_r = r_star[v] + gamma * r_next
        delta = r_star[v] - v_star[v] + gamma * v_next
        big_a = delta + gamma * lam * a_next
        r_next = torch.where(here, big_r, r_next)
        v_next = torch.where(here, v_star[v], v_next)
        a_next = torch.where(here, big_a, a_next)
    r_tok = rewards.float()
    returns = r_tok + gamma * r_of_next[..., None]  # [V, N, L]
    adv = r_tok - values.float() + gamma * v_of_next[..., None] + gamma * lam * a_of_next[..., None]
    return Credit(returns.masked_fill(~targets, 0.0), adv.masked_fill(~targets, 0.0))


class ValueLoss(NamedTuple):
    """loss (with gradient), and the detached share of the targets whose clipped term was the larger."""

    loss: torch.Tensor
    clip_ratio: float


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    targets: torch.Tensor,
    epsilon: float,
    norm: str = "targets",
) -> ValueLoss:
    """PPO's clipped value regression at one view (dLLM-RL ``train_trado_value.py``'s ``forward_process``):

        l_j = 1/2 max((V_j - R_j)^2, (V_clip_j - R_j)^2),   V_clip_j = V_old_j + clip(V_j - V_old_j, -eps, eps)

    values (with gradient), old_values, returns: [N, L]; targets [N, L] bool. ``norm``: ``targets`` the mean over
    each row's targets, then over the rows that have one (the paper's mean over tokens, as ddmrl's TraceRL policy
    loss); ``length`` the release's sum over the row's targets divided by L. Either is then averaged over the rows
    that have a target (the release's rows are the (rollout, step) pairs with one).
    """
    clipped = old_values + (values - old_values).clamp(-epsilon, epsilon)
    unclipped_sq, clipped_sq = (values - returns) ** 2, (clipped - returns) ** 2
    per_token = 0.5 * torch.maximum(unclipped_sq, clipped_sq) * targets  # [N, L]
    n_targets = int(targets.sum())
    share = float(((clipped_sq > unclipped_sq) & targets).sum()) / n_targets if n_targets else 0.0
    if norm not in ("targets", "length"):
        raise ValueError(f"unknown value_loss_norm '{norm}'; choose targets or length")
    rows = targets.any(1)  # [N]
    denominator = targets.sum(1).clamp_min(1) if norm == "targets" else targets.shape[1]
    per_row = per_token.sum(1) / denominator  # [N]
    return ValueLoss(per_row.sum() / rows.sum().clamp_min(1), share)


def value_clip(x: ObjectiveInputs, cfg: GRPOConfig) -> ObjectiveOutput:
    """TraceRL's policy loss with the value model's per-token advantages A_j (``x.extras["token_advantages"]``): at
    each view the clipped token ratio psi = min(rho A_j, clip(rho, 1 -/+ eps) A_j) minus beta k3 KL, weighted and
    aggregated as ``token_clip`` (the views of one step averaged). Without per-token advantages (the credit
    measurement, which has no value model) every token gets its rollout's advantage: a zero value head's A_j with
    gamma = lam = 1."""
    losses, kls, clips = [], [], []
    own = x.extras.get("token_advantages")  # [V, N, L]
    for v in range(x.logps.shape[0]):
        a = x.advantages if own is None else own[v].to(x.logps.dtype)  # [N] or [N, L]
        ref = None if x.ref is None else x.ref[v]
        tl = clipped_token_loss(x.logps[v], x.old[v], ref, a, cfg.epsilon, cfg.beta, cfg.epsilon_high)
        losses.append(aggregate(tl.loss, x.weights[v], cfg.loss_type, x.z))
        kls.append(aggregate(tl.kl, x.weights[v], "token_mean").item())
        clips.append(aggregate(tl.clipped, x.weights[v], "token_mean").item())
    n = len(losses)
    return ObjectiveOutput(torch.stack(losses).mean(), {"kl": sum(kls) / n, "clip_ratio": sum(clips) / n})


class ValueModel(torch.nn.Module):
    """TraceRL's diffusion value model (dLLM-RL ``train/init_*_value_model.py``): a copy of the policy whose output
        head is replaced by a linear value head (hidden -> 1, no bias) initialised at zero, so that it starts from the
        policy's features and predicts V = 0 everywhere. ``forward(input_ids [N, T])`` -> values [N, T] (float32) at
        every position of the model's input (a view's state: prompt and partly masked completion). ``policy`` is
    copied, never changed."""

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__()
        self.trunk = copy.deepcopy(policy)
        head = self.trunk.get_output_embeddings() if hasattr(self.trunk, "get_output_embeddings") else None
        if not isinstance(head, torch.nn.Linear):
            raise ValueError(f"{type(policy).__name__}: a value model needs the model's linear output head")
        owner, name = _owner_of(self.trunk, head)
        w = head.weight
        value_head = torch.nn.Linear(head.in_features, 1, bias=False, device=w.device, dtype=w.dtype)
        torch.nn.init.zeros_(value_head.weight)
        setattr(owner, name, value_head)
        self.trunk.requires_grad_(True)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.trunk(input_ids).logits.squeeze(-1).float()  # [N, T]: the value head in place of the logits

    def save_pretrained(self, path) -> None:
        """``path/model.safetensors``: the whole value model's weights (its trunk's architecture is the policy's,
        saved beside it)."""
        from pathlib import Path

        from safetensors.torch import save_file

        Path(path).mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(state, str(Path(path) / "model.safetensors"))


def _owner_of(model: torch.nn.Module, module: torch.nn.Module) -> tuple[torch.nn.Module, str]:
    """The parent of ``module`` in ``model`` and its attribute name there."""
    for name, child in model.named_modules():
        if child is module and name:
            parent, _, attr = name.rpartition(".")
            return model.get_submodule(parent), attr
    raise ValueError(f"{type(model).__name__}: its output head is not one of its submodules")
