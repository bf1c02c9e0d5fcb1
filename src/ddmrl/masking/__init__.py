"""The forward process: masking schedules and the seeded, coupled training views of a rollout batch
(``ddmrl.masking.views``). ``VIEWS`` maps a method's ``remasking`` (its view sampler) to the function that draws its
views, imported when first looked up; a section may also name a view sampler outside the package, as
``module:attribute`` or as an entry point of the ``ddmrl.views`` group (docs/extending.md). A leaf: the schema
validates names against it without importing torch.
"""

from ddmrl.registry import Registry

VIEWS = Registry(
    {
        "full_completion": "ddmrl.masking.views:full_completion_views",
        "unigrpo": "ddmrl.masking.views:unigrpo_views",
        "maskgrpo_fading": "ddmrl.masking.views:maskgrpo_fading_views",
        "maskgrpo_random": "ddmrl.masking.views:maskgrpo_random_views",
        "rebrl_linear": "ddmrl.masking.views:rebrl_views",
        "tracerl": "ddmrl.masking.views:tracerl_views",
        "gdpo_quadrature": "ddmrl.masking.views:gdpo_views",
        "block_random": "ddmrl.masking.views:block_random_views",
        "cj_grpo": "ddmrl.masking.views:cj_grpo_views",
        "mdpo_topk": "ddmrl.masking.views:mdpo_views",
        "coupled": "ddmrl.masking.views:coupled_views",
        "stratified": "ddmrl.masking.views:stratified_views",  # VRPO, BGPO
        "espo": "ddmrl.masking.views:espo_views",
        "ebpo_blocks": "ddmrl.masking.views:ebpo_views",
        "tree": "ddmrl.masking.views:tree_views",
        "dipo": "ddmrl.masking.views:dipo_views",  # DiPO
    },
    group="ddmrl.views",
)

__all__ = ["VIEWS"]
