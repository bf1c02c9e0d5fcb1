"""ddmrl: reinforcement-learning post-training of masked (discrete) diffusion models."""

__version__ = "0.1.0"
