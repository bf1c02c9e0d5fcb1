"""Reproduction switches that a few methods' releases share: one ``Params`` mixin each. A method whose release has
the quirk builds its ``Params`` on the mixin (and may change its default); the others' sections refuse the key as
unknown, and the GRPO loop reads it only from a run whose method declares it."""

from __future__ import annotations

from pydantic import Field

from ddmrl.config._base import Bool, section
from ddmrl.config.grpo import GRPOConfig


@section
class LossAfterEos(GRPOConfig):
    """The ``loss_after_eos`` switch (MDPO, CJ-GRPO, IGPO, JustGRPO and ESPO: docs/reproduction.md)."""

    loss_after_eos: Bool = Field(
        False,
        description="Train every completion position, the EOS padding after the first EOS included (the release's "
        "loss mask); false: the tokens up to and including the first EOS (d1's completion mask).",
    )
