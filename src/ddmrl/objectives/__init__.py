"""Objectives: advantages, token weights, the clipped policy loss with k3 KL, aggregation, and the policy
objectives of the methods, one module each. The registries of the parts a method names (each imported when first
looked up; a section may also name a part outside the package, as ``module:attribute`` or as an entry point of the
group named below): ``OBJECTIVES`` (``Method.objective``), ``WEIGHTINGS`` (``Method.weighting``), ``ADVANTAGES``
(``scale_rewards``), ``STEP_ADVANTAGES`` (``Method.step_advantage``) and ``VIEW_ADVANTAGES``
(``Method.view_advantage``). Import every other name from the module that defines it."""

from typing import NamedTuple

from ddmrl.registry import Registry


class Weighting(NamedTuple):
    """A token weighting's entry in ``WEIGHTINGS``: where its function (views, completion mask, rebrl_mode) ->
    (omega [V, N, L], Z [N] or None) is, and what the GRPO loop reads of it by name."""

    spec: str
    old_entropy: bool = False  # refined after the old pass by the old policy's token entropy (IGPO's hint filter)


OBJECTIVES = Registry(
    {
        "token_clip": "ddmrl.objectives.token_clip:token_clip",
        "sequence_clip": "ddmrl.objectives.sequence_clip:sequence_clip",
        "spg": "ddmrl.objectives.spg:spg",
        "weighted_likelihood": "ddmrl.objectives.weighted_likelihood:weighted_likelihood",
        "mdpo": "ddmrl.objectives.mdpo:mdpo",
        "coupled_clip": "ddmrl.objectives.coupled_clip:coupled_clip",
        "valid_token_clip": "ddmrl.objectives.valid_token_clip:valid_token_clip",
        "vrpo": "ddmrl.objectives.vrpo:vrpo",
        "espo_clip": "ddmrl.objectives.espo:espo_clip",
        "ebpo_clip": "ddmrl.objectives.ebpo:ebpo_clip",
        "tree_clip": "ddmrl.objectives.tree_clip:tree_clip",
        "dipo": "ddmrl.objectives.dipo:dipo",  # DiPO
        "gdsd": "ddmrl.objectives.gdsd:gdsd",  # GDSD, GDSD-TLC
        "value_clip": "ddmrl.objectives.value:value_clip",  # TraceRL's value model
        "rldf": "ddmrl.objectives.rldf:rldf",  # RLDF
    },
    group="ddmrl.objectives",
    noun="objective",
)

_WEIGHTS = "ddmrl.objectives.weights"
WEIGHTINGS = Registry(
    {
        "completion_mean": f"{_WEIGHTS}:completion_mean_weights",
        "hint_entropy": Weighting(f"{_WEIGHTS}:completion_mean_weights", old_entropy=True),  # IGPO
        "masked_mean": f"{_WEIGHTS}:masked_mean_weights",
        "rebrl": f"{_WEIGHTS}:rebrl_weights",
        "gdpo_elbo": f"{_WEIGHTS}:gdpo_elbo_weights",
        "mdpo_confidence": f"{_WEIGHTS}:mdpo_confidence_weights",
        "coupled": f"{_WEIGHTS}:coupled_weights",
        "vrpo_elbo": f"{_WEIGHTS}:vrpo_elbo_weights",
        "espo_elbo": f"{_WEIGHTS}:espo_elbo_weights",
        "ebpo_elbo": f"{_WEIGHTS}:ebpo_elbo_weights",
        "gdsd_denoise": "ddmrl.objectives.gdsd:denoise_weights",  # GDSD
        "gdsd_tlc": "ddmrl.objectives.gdsd:tlc_weights",  # GDSD-TLC
        "rldf": "ddmrl.objectives.rldf:rldf_weights",  # RLDF
    },
    group="ddmrl.weightings",
    noun="weighting",
)

_ADVANTAGES = "ddmrl.objectives.advantages"
#: a group's advantages from its rewards r [B, G], their std [B, 1] and eps
ADVANTAGES = Registry(
    {
        "group": f"{_ADVANTAGES}:z_score",
        "none": f"{_ADVANTAGES}:mean_centred",
        "population": f"{_ADVANTAGES}:population_zscore",  # DiPO's release: population std, no epsilon
        "leave_one_out": "ddmrl.objectives.gdsd:leave_one_out",  # GDSD's release: r - mean of the others
        "rldf": "ddmrl.objectives.rldf:rldf_zscore",  # RLDF's release: std floored at 0.01
    },
    group="ddmrl.advantages",
    noun="scale_rewards",
)
#: the group advantages of ``scale_rewards`` unless a config says otherwise (TRL's z-score)
DEFAULT_ADVANTAGES = "group"
#: per-step advantages [N, S] from per-step rewards and the group size
STEP_ADVANTAGES = Registry(
    {"mdpo": f"{_ADVANTAGES}:mdpo_step_advantages"}, group="ddmrl.step_advantages", noun="step advantage"
)
#: per-view advantages [V, N] from the rewards and the rollouts
VIEW_ADVANTAGES = Registry(
    {"tree": f"{_ADVANTAGES}:rollout_tree_advantages"}, group="ddmrl.view_advantages", noun="view advantage"
)


def weighting(name: str) -> Weighting:
    """The record of weighting ``name`` (``WEIGHTINGS``)."""
    return WEIGHTINGS.record(name, Weighting)


__all__ = ["ADVANTAGES", "OBJECTIVES", "STEP_ADVANTAGES", "VIEW_ADVANTAGES", "WEIGHTINGS", "Weighting", "weighting"]
