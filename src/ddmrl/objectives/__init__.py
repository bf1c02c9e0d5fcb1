"""Objectives: advantages, token weights, the clipped policy loss with k3 KL, aggregation, and the policy
objectives of the methods, one module each (``OBJECTIVES``, imported when first looked up: a run depends on its
method's objective only). Import every other name from the module that defines it."""

from ddmrl.registry import Registry

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
        "bgpo": "ddmrl.objectives.bgpo:bgpo",  # BGPO
        "tree_clip": "ddmrl.objectives.tree_clip:tree_clip",
        "dipo": "ddmrl.objectives.dipo:dipo",  # DiPO
    }
)


__all__ = ["OBJECTIVES"]
