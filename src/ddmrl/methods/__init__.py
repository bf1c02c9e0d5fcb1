"""The methods: one module each (``ddmrl.methods.<name>``: its section model ``Params`` and its ``METHOD`` record,
:class:`ddmrl.methods.base.Method`). ``METHODS`` is the only list of their names; a section may also name a method
outside the package, as ``module:attribute`` on the Python path or as an entry point of the ``ddmrl.methods`` group
of an installed package (docs/extending.md). Looking a method up imports its module only, so a run depends on its own
method's module, not on the others'.
"""

from __future__ import annotations

from ddmrl.methods.base import Method  # the members' contract (standard library only)
from ddmrl.registry import Registry

METHODS = Registry(
    {
        "diffu_grpo": "ddmrl.methods.diffu_grpo:METHOD",
        "unigrpo": "ddmrl.methods.unigrpo:METHOD",
        "maskgrpo": "ddmrl.methods.maskgrpo:METHOD",
        "rebrl": "ddmrl.methods.rebrl:METHOD",
        "tracerl": "ddmrl.methods.tracerl:METHOD",
        "tracerl_value": "ddmrl.methods.tracerl_value:METHOD",  # TraceRL's value model
        "gdpo": "ddmrl.methods.gdpo:METHOD",
        "spg": "ddmrl.methods.spg:METHOD",
        "wd1": "ddmrl.methods.wd1:METHOD",
        "mdpo": "ddmrl.methods.mdpo:METHOD",
        "cj_grpo": "ddmrl.methods.cj_grpo:METHOD",
        "cogrpo": "ddmrl.methods.cogrpo:METHOD",
        "unmask_policy": "ddmrl.methods.unmask_policy:METHOD",
        "igpo": "ddmrl.methods.igpo:METHOD",
        "coupled_grpo": "ddmrl.methods.coupled_grpo:METHOD",
        "justgrpo": "ddmrl.methods.justgrpo:METHOD",
        "vrpo": "ddmrl.methods.vrpo:METHOD",
        "espo": "ddmrl.methods.espo:METHOD",
        "ebpo": "ddmrl.methods.ebpo:METHOD",
        "bgpo": "ddmrl.methods.bgpo:METHOD",  # BGPO
        "treerpo": "ddmrl.methods.treerpo:METHOD",
        "dipo": "ddmrl.methods.dipo:METHOD",  # DiPO
        "gdsd": "ddmrl.methods.gdsd:METHOD",  # GDSD
        "gdsd_tlc": "ddmrl.methods.gdsd_tlc:METHOD",  # GDSD-TLC
        "rldf": "ddmrl.methods.rldf:METHOD",  # RLDF
    },
    group="ddmrl.methods",
    kind=Method,
    noun="method",
)
#: the runs of ``grpo.methods`` unless a config lists its own: the sections of these methods
DEFAULT_RUNS = ("diffu_grpo", "unigrpo", "maskgrpo", "rebrl", "tracerl", "gdpo", "spg", "wd1")
