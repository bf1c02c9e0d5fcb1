"""Co-GRPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from pydantic import Field

from ddmrl.config._base import Int, Str, refuse, section
from ddmrl.config.grpo import AuxPolicyConfig
from ddmrl.config.names import ViewSampler
from ddmrl.config.sampler import SamplerConfig
from ddmrl.methods.base import Method
from ddmrl.methods.mixins import TraceSteps


@section
class Params(TraceSteps):
    """Co-GRPO (Zhou et al. 2025, arXiv 2512.22288): the model and a schedule policy (per-step masked fraction,
    temperature and guidance of MaskGIT's sampler) trained together by GRPO under one reward; the model on its
    trajectory (TraceRL's views: each token at the state it was revealed from, shrink steps merged), the schedule
    per step. Its backbone is an image MDM (Meissonic-class): image runs only, sampler maskgit."""

    method: Str = "cogrpo"
    remasking: ViewSampler = "tracerl"
    shrink: Int = Field(3, ge=1)
    sampler: SamplerConfig = Field(
        default_factory=lambda: SamplerConfig(name="maskgit", steps=12, temperature=1.0, cfg_scale=1.0)
    )
    aux_policy: AuxPolicyConfig = Field(default_factory=lambda: AuxPolicyConfig(kind="schedule"))

    def _check_method(self) -> None:
        if self.aux_policy.kind != "schedule":
            raise refuse("aux_policy.kind", self.aux_policy.kind, "Co-GRPO trains a schedule policy: use schedule")


# the model on its own trajectory (TraceRL's views), plus a schedule policy (aux_policy.kind: schedule)
METHOD = Method(
    name="cogrpo",
    params=Params,
    display="Co-GRPO",
    weighting="masked_mean",
    paper="Zhou, Ni et al. 2025, Co-GRPO: Co-Optimized GRPO for Masked Diffusion Model (arXiv 2512.22288)",
)
