"""unmasking policy as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ddmrl.config._base import Str, refuse, section
from ddmrl.config.grpo import AuxPolicyConfig
from ddmrl.config.names import ViewSampler
from ddmrl.config.sampler import SamplerConfig
from ddmrl.methods.base import Method
from ddmrl.methods.mixins import TraceSteps


@section
class Params(TraceSteps):
    """A learned unmasking policy (Jazbec, Olausson et al. 2025, arXiv 2512.09106): a single-layer AdaLN transformer
    over the model's confidences reveals positions by Bernoulli draws; GRPO with mean-only advantages and no KL (by
    definition), the multiplicative correctness x speed reward, the model frozen (freeze_model: false trains it
    jointly on TraceRL's views of the policy's trajectories)."""

    method: Str = "unmask_policy"
    remasking: ViewSampler = "tracerl"
    sampler: SamplerConfig = Field(default_factory=lambda: SamplerConfig(temperature=0.0))  # the paper's greedy model
    beta: Literal[0.0] = 0.0
    scale_rewards: Literal["none"] = "none"
    aux_policy: AuxPolicyConfig = Field(
        default_factory=lambda: AuxPolicyConfig(kind="unmasking", freeze_model=True, speed_alpha=1.0)
    )

    def _check_method(self) -> None:
        if self.aux_policy.kind != "unmasking":
            raise refuse("aux_policy.kind", self.aux_policy.kind, "this method trains an unmasking policy")


# an unmasking policy (aux_policy.kind: unmasking) on the frozen model; the views train the model when joint
METHOD = Method(
    name="unmask_policy",
    params=Params,
    display="unmasking policy",
    weighting="masked_mean",
    paper="Jazbec, Olausson et al. 2025, Learning Unmasking Policies for Diffusion Language Models (arXiv 2512.09106)",
)
