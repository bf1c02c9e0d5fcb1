"""A learned unmasking policy (Jazbec, Olausson et al. 2025, "Learning Unmasking Policies for Diffusion Language
Models", arXiv 2512.09106): which masked positions of the current block to reveal at each step.

The model is the environment (frozen in the paper): at each step it proposes a token and a confidence for every
position; the policy maps per-position (confidence, mask indicator) and the time t = steps taken / L to one logit
b_k per position, and every still-masked position of the current block is revealed independently with probability
s_k = sigmoid(b_k / T_pi) (Bernoulli; T_pi the policy temperature). Its log-likelihood is closed-form:

    log pi(u) = sum_{k selectable} u_k log s_k + (1 - u_k) log(1 - s_k).

**Fallback** (the released code's ``bernoulli-argmax``, which the paper evaluates with): a draw that selects nothing
reveals the selectable position with the highest s instead. The action "reveal k* alone" then has probability
P_B({k*}) + P_B({}) = prod_{k != k*} (1 - s_k), which :func:`bernoulli_logp` uses (exact). The released code scores
the forced set by its Bernoulli likelihood alone (omitting the empty draw's mass), and trains without the fallback
(``fallback: false`` here: an empty draw wastes the step, a block gets at most block_length steps, positions still
masked then stay masked).

**Reward** (the released code's ``_multiplicative_step_scaling_reward_func``): R = r x ((L - min(T, L) + 1) / L)^a,
r the task reward (correctness), T the steps (model evaluations) the sample took, L the completion length; the
paper's alpha a in {10, 3, 1, 0.3, 0}. The additive variant r - a T / L collapses to fast wrong answers.

**Architecture** (the released ``DiTConfidencePolicy``, rewritten): the top-1 confidence projected to the width,
a conditioning vector per position (a mask-indicator embedding plus an MLP of a sinusoidal embedding of t), one
transformer block with rotary positions whose two pre-norms are modulated by the conditioning (AdaLN, zero-initialised
so they start as plain LayerNorms), a final LayerNorm and a linear head whose bias starts at ``init_bias`` (-2: every
position revealed with probability 0.12 at first, a slow and careful policy). ddmrl's reading where the code was not
available: t is embedded as DiT embeds its timestep (t x 1000, periods up to 10^4).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ddmrl.aux_policies.base import AuxPolicy, AuxTrace
from ddmrl.models.tiny import rotary_angles, rotate

if TYPE_CHECKING:
    from ddmrl.config.grpo import AuxPolicyConfig


def bernoulli_logp(logits: torch.Tensor, unmask: torch.Tensor, select: torch.Tensor, fallback: bool) -> torch.Tensor:
    """Log-probability [...] of revealing exactly ``unmask`` among the ``select``-able positions, each revealed
    independently with probability sigmoid(logits) (logits [..., L], unmask and select bool [..., L]).

    With ``fallback``, an empty draw reveals the selectable position of highest logit k* alone, so that action's
    probability is prod_{k != k*} (1 - s_k), and an empty action has probability 0 (log-probability -inf). A row
    with nothing selectable has log-probability 0.
    """
    unmask = unmask & select
    ll = torch.where(unmask, F.logsigmoid(logits), F.logsigmoid(-logits)).masked_fill(~select, 0.0).sum(-1)
    if not fallback:
        return ll
    star = logits.masked_fill(~select, -torch.inf).argmax(-1, keepdim=True)  # [..., 1]
    count = unmask.sum(-1)
    lone_star = (count == 1) & unmask.gather(-1, star).squeeze(-1)
    # log P_B({k*}) + log(1 + P_B({}) / P_B({k*})) = log P_B({k*}) + softplus(-b_k*)
    ll = torch.where(lone_star, ll + F.softplus(-logits.gather(-1, star).squeeze(-1)), ll)
    return ll.masked_fill((count == 0) & select.any(-1), -torch.inf)


def draw_unmask(logits: torch.Tensor, select: torch.Tensor, fallback: bool, uniforms: torch.Tensor) -> torch.Tensor:
    """The positions revealed [N, L] bool: selectable k with u_k < sigmoid(logits_k) (``uniforms`` U[0, 1), float64);
    with ``fallback`` a row that selects nothing reveals its selectable position of highest logit."""
    unmask = (uniforms < torch.sigmoid(logits.double())) & select
    if fallback:
        empty = ~unmask.any(-1) & select.any(-1)  # [N]
        star = logits.masked_fill(~select, -torch.inf).argmax(-1)  # [N]
        unmask[empty, star[empty]] = True
    return unmask


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10_000.0) -> torch.Tensor:
    """DiT's sinusoidal embedding of ``t`` [...] (in [0, 1], scaled by 1000): [..., dim]."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    angles = 1000.0 * t.float()[..., None] * freqs  # [..., half]
    return torch.cat([angles.cos(), angles.sin()], -1)


class _AdaLNBlock(nn.Module):
    """A pre-norm transformer block (bidirectional attention with rotary positions, then a GELU MLP) whose two
    LayerNorms are modulated per position by the conditioning: LN(x) (1 + scale) + shift."""

    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, intermediate), nn.GELU(), nn.Linear(intermediate, hidden))
        self.modulation = nn.Linear(hidden, 4 * hidden)
        nn.init.zeros_(self.modulation.weight)  # identity modulation at first (the released smart init)
        nn.init.zeros_(self.modulation.bias)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape  # x, cond: [B, L, D]
        shift1, scale1, shift2, scale2 = self.modulation(cond).chunk(4, -1)
        h = self.norm1(x) * (1 + scale1) + shift1
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, L, D/H]
        cos, sin = rotary_angles(n, d // self.heads, 10_000.0, x.device)
        a = F.scaled_dot_product_attention(rotate(q, cos, sin), rotate(k, cos, sin), v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x) * (1 + scale2) + shift2)


class UnmaskingPolicy(AuxPolicy):
    """The single-layer AdaLN transformer over (confidence, mask indicator, t): one unmasking logit per position.

    obs of a recorded step: (masked [.., L] bool, confidence [.., L], t [..], selectable [.., L] bool,
    temperature [..]); its action: the revealed positions [.., L] bool.
    """

    kind = "unmasking"

    @classmethod
    def from_config(cls, cfg: AuxPolicyConfig, rollout_steps: int) -> UnmaskingPolicy:
        """Its architecture, initial bias, fallback and temperatures from the section."""
        return cls(hidden_size=cfg.hidden_size, num_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
                   init_bias=cfg.init_bias, fallback=cfg.fallback, temperature=cfg.temperature,
                   eval_temperature=cfg.eval_temperature)  # fmt: skip

    def __init__(
        self,
        hidden_size: int = 128,
        num_heads: int = 2,
        intermediate_size: int = 512,
        time_embed_dim: int = 128,
        init_bias: float = -2.0,
        fallback: bool = True,
        temperature: float = 1.0,
        eval_temperature: float = 1.0,
    ) -> None:
        super().__init__(hidden_size=hidden_size, num_heads=num_heads, intermediate_size=intermediate_size,
                         time_embed_dim=time_embed_dim, init_bias=init_bias, fallback=fallback,
                         temperature=temperature, eval_temperature=eval_temperature)  # fmt: skip
        if hidden_size % num_heads or (hidden_size // num_heads) % 2:
            raise ValueError(f"hidden_size = {hidden_size}: must split into num_heads = {num_heads} even head widths")
        self.fallback = fallback
        self.time_embed_dim = time_embed_dim
        self.confidence = nn.Linear(1, hidden_size)
        self.mask_embedding = nn.Embedding(2, hidden_size)
        self.time_mlp = nn.Sequential(
            nn.Linear(time_embed_dim, hidden_size), nn.SiLU(), nn.Linear(hidden_size, hidden_size)
        )
        self.block = _AdaLNBlock(hidden_size, num_heads, intermediate_size)
        self.norm = nn.LayerNorm(hidden_size)
        self.head = nn.Linear(hidden_size, 1)
        with torch.no_grad():
            self.head.bias.fill_(init_bias)

    def logits(self, masked: torch.Tensor, confidence: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Unmasking logits [B, L] from masked [B, L] bool, confidence [B, L] and t [B]."""
        cond = self.mask_embedding(masked.long()) + self.time_mlp(timestep_embedding(t, self.time_embed_dim))[:, None]
        x = self.confidence(confidence.float()[..., None])  # [B, L, D]
        return self.head(self.norm(self.block(x, cond))).squeeze(-1)

    def temperature(self) -> float:
        """The policy temperature of sampling: the rollouts' in ``train()`` mode, the evaluation's in ``eval()``."""
        return self.config["temperature" if self.training else "eval_temperature"]

    def uses_fallback(self) -> bool:
        """Training follows the config; evaluation always falls back (a block is then sure to finish)."""
        return self.fallback or not self.training

    def forward(self, obs: tuple[torch.Tensor, ...], actions: torch.Tensor) -> torch.Tensor:
        """Log-probabilities [N, S] of the recorded reveals ``actions`` [N, S, L] given the recorded ``obs``."""
        masked, confidence, t, select, temperature = obs
        n, s, length = masked.shape
        b = self.logits(masked.reshape(-1, length), confidence.reshape(-1, length), t.reshape(-1))
        b = b.view(n, s, length) / temperature[..., None]
        return bernoulli_logp(b, actions, select, self.uses_fallback())

    def summary(self, trace: AuxTrace) -> dict[str, float]:
        """The mean steps per sample and tokens revealed per step."""
        steps = trace.active.sum(1).float()
        return {"aux/steps": steps.mean().item(), "aux/tokens_per_step": (trace.actions.sum() / steps.sum()).item()}
