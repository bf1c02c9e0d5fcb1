"""MaskGRPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ddmrl.config._base import Bool, Float, Str, refuse, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.config.names import ViewSampler
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """MaskGRPO (Ma et al. 2026, ICLR, arXiv 2510.02880): truncated ratios t_j = gamma + (1 - gamma) j / mu with
    AR-like fading (text; images: maskgrpo_random, gamma 0.8). Paper runs: epsilon 0.2, beta 0.01, mu 12."""

    method: Str = "maskgrpo"
    remasking: ViewSampler = "maskgrpo_fading"
    gamma: Float = Field(
        0.6, ge=0, lt=1, description="maskgrpo views: truncated ratios t_j = gamma + (1 - gamma) j / mu."
    )
    maskgrpo_legacy: Bool = Field(
        False,
        description="Reproduce its released text objective end to end (the fading curve over prompt + completion, "
        "view index m % mu of the micro-step m, the broadcast loss mask with masked tokens after the first EOS, "
        "advantage epsilon 1e-5, no forced masked token; docs/reproduction.md).",
    )
    legacy_broadcast_weighting: Bool = Field(
        False, description="Reproduce its released loss mask alone (every view's mask broadcast to all views)."
    )

    def _check_method(self) -> None:
        fading = self.remasking == "maskgrpo_fading"
        if fading and self.coupling == "trajectory":
            why = "AR-like fading has its own position-wise curve; use independent or nested"
            raise refuse("coupling", "trajectory", why)
        if fading and self.gamma < 0.5:
            why = "AR-like fading needs gamma >= 0.5 (its keep curve saturates below a mask ratio of 0.5)"
            raise refuse("gamma", self.gamma, why)
        if self.maskgrpo_legacy and not fading:
            why = f"reproduces MaskGRPO's text views (maskgrpo_fading), not {self.remasking}"
            raise refuse("maskgrpo_legacy", True, why)
        if self.maskgrpo_legacy and self.legacy_micro_step_views:
            why = "maskgrpo_legacy has its own view index (m % mu); choose one"
            raise refuse("legacy_micro_step_views", True, why)


#: MaskGRPO's released code: its advantages' epsilon (its ``compute_loss``)
LEGACY_ADVANTAGE_EPS = 1e-5


class MaskGRPO(Method):
    """``maskgrpo_legacy`` reproduces the released text objective (docs/reproduction.md): its seeded fading views,
    weights broadcast over rows, its view index ``m % mu`` (``_step % mu - 1`` after the increment, -1 read as
    mu - 1) and its advantage epsilon."""

    def advantage_eps(self, cfg: Any) -> float:
        return LEGACY_ADVANTAGE_EPS if cfg.maskgrpo_legacy else super().advantage_eps(cfg)

    def legacy_views(self, cfg: Any) -> bool:
        return cfg.maskgrpo_legacy

    def broadcast_weighting(self, cfg: Any) -> bool:
        return cfg.maskgrpo_legacy or cfg.legacy_broadcast_weighting

    def view_index(self, cfg: Any, micro_step: int, num_views: int) -> tuple[int, ...] | None:
        return (micro_step % num_views,) if cfg.maskgrpo_legacy else None


# text runs: gamma 0.6, AR-like fading (paper runs: eps 0.2, beta 0.01, mu 12; its t2t_grpo_train.sh)
METHOD = MaskGRPO(
    name="maskgrpo",
    params=Params,
    display="MaskGRPO",
    weighting="masked_mean",
    paper="Ma et al. 2026, MaskGRPO (ICLR 2026, arXiv 2510.02880)",
    switches=("maskgrpo_legacy",),
)
