"""Samplers: the reverse process that produces rollouts, each recording the step that revealed every token and
the number of model evaluations. ``SAMPLERS`` maps ``sampler.name`` to its ``generate`` function, imported when
first looked up (a stage runs, and depends on, only the sampler it uses); a section may also name a sampler outside
the package, as ``module:attribute`` or as an entry point of the ``ddmrl.samplers`` group (docs/extending.md)."""

from ddmrl.registry import Registry

SAMPLERS = Registry(
    {
        "llada": "ddmrl.samplers.llada:generate",
        "maskgit": "ddmrl.samplers.maskgit:generate",
        "emerge": "ddmrl.samplers.emerge:generate",
        "dream": "ddmrl.samplers.dream:generate",
        "block": "ddmrl.samplers.block:generate",
    },
    group="ddmrl.samplers",
)


__all__ = ["SAMPLERS"]
