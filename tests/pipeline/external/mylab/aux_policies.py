"""A researcher's own auxiliary policy, outside ddmrl: a learned confidence threshold for LLaDA's sampler. Each masked
position of the block is revealed with probability sigmoid((scale x confidence + bias) / T), two parameters in all
(the built-in unmasking policy is a transformer over the same inputs). It keeps that policy's protocol (the sampler's
``logits``, temperatures and fallback; ``ddmrl.aux_policies.unmasking``) and takes the section's shared keys
(``init_bias``, ``temperature``, ``eval_temperature``, ``fallback``). A section names it as
``aux_policy: {kind: "mylab.aux_policies:ThresholdPolicy"}``."""

from __future__ import annotations

import torch
from torch import nn

from ddmrl.aux_policies.base import AuxPolicy
from ddmrl.aux_policies.unmasking import UnmaskingPolicy


class ThresholdPolicy(UnmaskingPolicy):
    """Unmasking logits ``scale * confidence + bias`` [B, L]; ``bias`` starts at ``init_bias``."""

    kind = "mylab.aux_policies:ThresholdPolicy"  # the name it is saved and loaded under

    @classmethod
    def from_config(cls, cfg, rollout_steps: int) -> ThresholdPolicy:
        return cls(init_bias=cfg.init_bias, fallback=cfg.fallback, temperature=cfg.temperature,
                   eval_temperature=cfg.eval_temperature)  # fmt: skip

    def __init__(
        self, init_bias: float = -2.0, fallback: bool = True, temperature: float = 1.0, eval_temperature: float = 1.0
    ) -> None:
        AuxPolicy.__init__(
            self, init_bias=init_bias, fallback=fallback, temperature=temperature, eval_temperature=eval_temperature
        )  # fmt: skip  (not the transformer's __init__)
        self.fallback = fallback
        self.scale = nn.Parameter(torch.tensor(4.0))
        self.bias = nn.Parameter(torch.tensor(float(init_bias)))

    def logits(self, masked: torch.Tensor, confidence: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.scale * confidence.float() + self.bias  # [B, L]
