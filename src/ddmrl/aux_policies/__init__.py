"""Auxiliary policies: trainable modules besides the model whose actions a sampler draws and records (Co-GRPO's
schedule policy, a learned unmasking policy), trained by GRPO on their trajectories and saved with the model in
``<model>/aux_policy/``. ``AUX_POLICIES`` maps ``aux_policy.kind`` to its class, imported when first looked up (a
run depends on its own policy's module only); what they share, building and loading included, is
:mod:`ddmrl.aux_policies.base`. A section may also name a policy outside the package, as ``module:attribute`` or as
an entry point of the ``ddmrl.aux_policies`` group (docs/extending.md). A leaf: the registry only."""

from __future__ import annotations

from ddmrl.registry import Registry

AUX_POLICIES = Registry(
    {
        "schedule": "ddmrl.aux_policies.schedule:SchedulePolicy",
        "unmasking": "ddmrl.aux_policies.unmasking:UnmaskingPolicy",
    },
    group="ddmrl.aux_policies",
)

__all__ = ["AUX_POLICIES"]
