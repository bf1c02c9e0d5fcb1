"""Samplers: the reverse process that produces rollouts. ``SAMPLERS`` maps a name to a ``generate`` function."""

from ddmrl.samplers.llada import SampleOutput, generate, transfer_schedule

SAMPLERS = {"llada": generate}

__all__ = ["SAMPLERS", "SampleOutput", "generate", "transfer_schedule"]
