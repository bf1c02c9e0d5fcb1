"""ddmrl: reinforcement-learning post-training of masked (discrete) diffusion models.

Importing it pins the CPU numerics (:mod:`ddmrl.numerics`) before torch chooses its kernels, so that every stage's
float results are the same on every x86-64 machine (``DDMRL_NUMERICS=native`` leaves them to the machine)."""

from ddmrl import numerics

numerics.pin()

__version__ = "0.1.0"
