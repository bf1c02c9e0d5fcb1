"""``Params`` mixins of keys that a few methods share, so that only those methods' sections have them: a
reproduction switch their releases share, a key of a view sampler they use. A method builds its ``Params`` on the
mixin (and may change its default); the others' sections refuse the key as unknown, and the library reads it only
from a run whose method declares it. Kept out of any one method's module, so that editing a method reruns only its
own stages."""

from __future__ import annotations

from pydantic import Field

from ddmrl.config._base import Bool, Int, section
from ddmrl.config.grpo import GRPOConfig


@section
class LossAfterEos(GRPOConfig):
    """The ``loss_after_eos`` switch (MDPO, CJ-GRPO, IGPO, JustGRPO, ESPO and GDSD: docs/reproduction.md)."""

    loss_after_eos: Bool = Field(
        False,
        description="Train every completion position, the EOS padding after the first EOS included (the release's "
        "loss mask); false: the tokens up to and including the first EOS (d1's completion mask).",
    )


@section
class TraceSteps(GRPOConfig):
    """The key of TraceRL's views (``remasking: tracerl``), for the ``Params`` of the methods that use them (TraceRL
    and its value-model variant, Co-GRPO, JustGRPO, the unmasking policy's)."""

    shrink: Int = Field(2, ge=1, description="TraceRL's views: consecutive sampler steps merged into one trace step.")
