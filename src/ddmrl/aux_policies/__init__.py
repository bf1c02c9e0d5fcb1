"""Auxiliary policies: trainable modules besides the model whose actions a sampler draws and records (Co-GRPO's
schedule policy, a learned unmasking policy), trained by GRPO on their trajectories and saved with the model in
``<model>/aux_policy/``. ``AUX_POLICIES`` maps ``aux_policy.kind`` to its class, imported when first looked up (a
run depends on its own policy's module only); what they share, building and loading included, is
:mod:`ddmrl.aux_policies.base`. A section may also name a policy outside the package, as ``module:attribute`` or as
an entry point of the ``ddmrl.aux_policies`` group (docs/extending.md). A leaf: the registry only."""

from __future__ import annotations

from typing import NamedTuple

from ddmrl.registry import Registry


class AuxPolicyKind(NamedTuple):
    """An auxiliary policy's entry in ``AUX_POLICIES``: where its class is, and what the schema checks of the run
    it drives, read by name without importing it (torch). A policy outside the package has the defaults."""

    spec: str
    sampler: str = ""  # the sampler (``ddmrl.samplers.SAMPLERS``) whose steps it drives ("": any)
    plain: bool = False  # it replaces the sampler's own commit rule: kv_cache and parallel none
    actions: bool = False  # it scales the sampler's keys named in ``aux_policy.actions`` (cfg_scale, temperature)
    heads: bool = False  # a transformer of ``aux_policy.num_heads`` heads (rotary: an even width per head)


AUX_POLICIES = Registry(
    {
        "schedule": AuxPolicyKind("ddmrl.aux_policies.schedule:SchedulePolicy", sampler="maskgit", actions=True),
        "unmasking": AuxPolicyKind(
            "ddmrl.aux_policies.unmasking:UnmaskingPolicy", sampler="llada", plain=True, heads=True
        ),
    },
    group="ddmrl.aux_policies",
)


def aux_policy_kind(name: str) -> AuxPolicyKind:
    """The record of auxiliary policy ``name`` (``AUX_POLICIES``)."""
    return AUX_POLICIES.record(name, AuxPolicyKind)


__all__ = ["AUX_POLICIES", "AuxPolicyKind", "aux_policy_kind"]
