"""Samplers: the reverse process that produces rollouts, each recording the step that revealed every token and
the number of model evaluations. ``SAMPLERS`` maps ``sampler.name`` to its ``generate`` function, imported when
first looked up (a stage runs, and depends on, only the sampler it uses); a section may also name a sampler outside
the package, as ``module:attribute`` or as an entry point of the ``ddmrl.samplers`` group (docs/extending.md)."""

from typing import NamedTuple

from ddmrl.registry import Registry

#: the ``parallel`` rules of the ``sampler:`` section (Fast-dLLM's), and its ``remasking`` orders
PARALLEL_RULES = ("none", "threshold", "factor")
REMASKING_ORDERS = ("low_confidence", "random", "rcr")


class Sampler(NamedTuple):
    """A sampler's entry in ``SAMPLERS``: where its ``generate`` is, and which of the ``sampler:`` section's shared
    keys it takes, read by the schema without importing it. A sampler outside the package has the defaults."""

    spec: str
    #: takes LLaDA's own keys of ``sampler:`` (rcr remasking, the ASS schedule, EOSER, confidence_dtype,
    #: parallel_floor, factor_rule, ...): LLaDA's semi-autoregressive sampler
    llada_keys: bool = False
    kv_cache: bool = False  # has semi-autoregressive blocks for Fast-dLLM's approximate cache (``kv_cache``)
    states: bool = False  # records the states that views of stored states read (plain: kv_cache and parallel none)
    parallel: tuple[str, ...] = PARALLEL_RULES  # the confidence-aware parallel rules it takes
    guidance: bool = True  # takes classifier-free guidance (``cfg_scale``)
    remasking: tuple[str, ...] = REMASKING_ORDERS  # the ``remasking`` orders it takes
    why: str = ""  # why it refuses what it does not take (its errors' reason)


SAMPLERS = Registry(
    {
        "llada": Sampler("ddmrl.samplers.llada:generate", llada_keys=True, kv_cache=True, states=True),
        "maskgit": "ddmrl.samplers.maskgit:generate",
        "emerge": Sampler(
            "ddmrl.samplers.emerge:generate",
            parallel=("none",),
            why="emerge reveals each position by its own coin (ancestral sampling); no confidence rule applies",
        ),
        "dream": Sampler(
            "ddmrl.samplers.dream:generate", parallel=("none",), guidance=False, why="not an option of Dream's sampler"
        ),
        "block": Sampler(
            "ddmrl.samplers.block:generate",
            parallel=("none", "threshold"),
            guidance=False,
            remasking=("low_confidence",),
            why="the block sampler commits by count or threshold, ranked by confidence (low_confidence), without "
            "guidance",
        ),
    },
    group="ddmrl.samplers",
)
#: the sampler a ``sampler:`` section names unless it says otherwise
DEFAULT_SAMPLER = "llada"
#: the image branch's sampler unless it says otherwise (MMaDA's ``t2i_generate``)
IMAGE_SAMPLER = "maskgit"


def sampler_record(name: str) -> Sampler:
    """The record of sampler ``name`` (``SAMPLERS``)."""
    return SAMPLERS.record(name, Sampler)


__all__ = ["DEFAULT_SAMPLER", "IMAGE_SAMPLER", "SAMPLERS", "Sampler", "sampler_record"]
