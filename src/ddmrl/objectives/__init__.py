"""Objectives: advantages, token weights, the clipped policy loss with k3 KL, aggregation, and the policy
objectives of the methods, one module each (``OBJECTIVES``, imported when first looked up: a run depends on its
method's objective only). Every other name here is imported from its module on first use."""

from ddmrl.registry import Registry, lazy_exports

OBJECTIVES = Registry(
    {
        "token_clip": "ddmrl.objectives.token_clip:token_clip",
        "sequence_clip": "ddmrl.objectives.sequence_clip:sequence_clip",
        "spg": "ddmrl.objectives.spg:spg",
        "weighted_likelihood": "ddmrl.objectives.weighted_likelihood:weighted_likelihood",
        "mdpo": "ddmrl.objectives.mdpo:mdpo",
        "coupled_clip": "ddmrl.objectives.coupled_clip:coupled_clip",
    }
)

_LAZY = {
    "ADVANTAGES": "ddmrl.objectives.advantages",
    "group_advantages": "ddmrl.objectives.advantages",
    "ObjectiveInputs": "ddmrl.objectives.base",
    "ObjectiveOutput": "ddmrl.objectives.base",
    "TokenLoss": "ddmrl.objectives.policy_loss",
    "aggregate": "ddmrl.objectives.policy_loss",
    "clipped_token_loss": "ddmrl.objectives.policy_loss",
    "k3_kl": "ddmrl.objectives.policy_loss",
    "REBRL_LAMBDA": "ddmrl.objectives.weights",
    "WEIGHTINGS": "ddmrl.objectives.weights",
    "ENTROPY_WEIGHTINGS": "ddmrl.objectives.weights",
    "hint_entropy_filter": "ddmrl.objectives.weights",
    "realised_ratio": "ddmrl.objectives.weights",
    "token_weights": "ddmrl.objectives.weights",
}
__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = ["OBJECTIVES", *_LAZY]
