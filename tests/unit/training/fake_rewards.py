"""Rewards the training tests patch into a task: deterministic and spread out, so that groups have variance."""


def varied_reward(completion: str, example) -> float:
    """Deterministic, spread-out reward of the completion text."""
    return (sum(ord(c) * (i + 1) for i, c in enumerate(completion)) % 101) / 100
