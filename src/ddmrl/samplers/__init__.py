"""Samplers: the reverse process that produces rollouts, each recording the step that revealed every token and
the number of model evaluations. ``SAMPLERS`` maps ``sampler.name`` to its ``generate`` function."""

from ddmrl.samplers import emerge, maskgit
from ddmrl.samplers.llada import SampleOutput, generate, transfer_schedule

SAMPLERS = {"llada": generate, "maskgit": maskgit.generate, "emerge": emerge.generate}

__all__ = ["SAMPLERS", "SampleOutput", "generate", "transfer_schedule"]
