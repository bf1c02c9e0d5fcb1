"""The forward process: masking schedules and the seeded, coupled training views of a rollout batch
(``ddmrl.masking.views``). ``VIEWS`` maps a method's ``remasking`` (its view sampler) to the function that draws its
views, imported when first looked up; a section may also name a view sampler outside the package, as
``module:attribute`` or as an entry point of the ``ddmrl.views`` group (docs/extending.md). A leaf: the schema
validates names against it without importing torch.
"""

from typing import NamedTuple

from ddmrl.registry import Registry


class ViewSampler(NamedTuple):
    """A view sampler's entry in ``VIEWS``: where its function is, and what the schema, the GRPO loop, the credit
    stage and the DAG read of it by name, without importing it (torch). A sampler outside the package has the
    defaults."""

    spec: str  # "module:function" drawing the views from a ddmrl.masking.views.ViewRequest
    states: bool = False  # its views are the sampler's stored states: the rollouts are recorded (plain llada only)
    per_step: bool = True  # one view per optimiser step (d1's micro-step view index applies to it)
    legacy: bool = False  # has a released code's own draws (``legacy: true``)
    #: keys of the run's section its function reads beyond the shared ones (``ViewRequest.key``), declared by the
    #: ``Params`` of the methods that use it; a section without them refuses the sampler
    keys: tuple[str, ...] = ()
    step_advantages: bool = False  # ranks the steps by per-step advantages: a method with ``step_advantage``


VIEWS = Registry(
    {
        "full_completion": "ddmrl.masking.views:full_completion_views",
        "unigrpo": "ddmrl.masking.views:unigrpo_views",
        "maskgrpo_fading": ViewSampler("ddmrl.masking.views:maskgrpo_fading_views", legacy=True, keys=("gamma",)),
        "maskgrpo_random": ViewSampler("ddmrl.masking.views:maskgrpo_random_views", keys=("gamma",)),
        "rebrl_linear": "ddmrl.masking.views:rebrl_views",
        "tracerl": ViewSampler("ddmrl.masking.views:tracerl_views", per_step=False, keys=("shrink",)),
        "gdpo_quadrature": ViewSampler("ddmrl.masking.views:gdpo_views", per_step=False),
        "block_random": ViewSampler("ddmrl.masking.views:block_random_views", per_step=False),
        "cj_grpo": ViewSampler("ddmrl.masking.views:cj_grpo_views", states=True),
        "mdpo_topk": ViewSampler(
            "ddmrl.masking.views:mdpo_views", states=True, keys=("sample_train_steps",), step_advantages=True
        ),
        "coupled": ViewSampler("ddmrl.masking.views:coupled_views", per_step=False),
        "stratified": "ddmrl.masking.views:stratified_views",  # VRPO, BGPO
        "espo": ViewSampler("ddmrl.masking.views:espo_views", legacy=True),
        "ebpo_blocks": "ddmrl.masking.views:ebpo_views",
        "tree": ViewSampler("ddmrl.masking.views:tree_views", per_step=False),
        "dipo": ViewSampler("ddmrl.masking.views:dipo_views", per_step=False),  # DiPO
        "rldf": ViewSampler("ddmrl.masking.rldf:rldf_views", states=True, per_step=False, legacy=True),  # RLDF
    },
    group="ddmrl.views",
    noun="view sampler",
)


def view_sampler(name: str) -> ViewSampler:
    """The record of view sampler ``name`` (``VIEWS``)."""
    return VIEWS.record(name, ViewSampler)


__all__ = ["VIEWS", "ViewSampler", "view_sampler"]
