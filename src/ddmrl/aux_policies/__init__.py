"""Auxiliary policies: trainable modules besides the model whose actions a sampler draws and records (Co-GRPO's
schedule policy, a learned unmasking policy), trained by GRPO on their trajectories and saved with the model in
``<model>/aux_policy/``. ``AUX_POLICIES`` maps ``aux_policy.kind`` to its class, imported when first looked up (a
run depends on its own policy's module only); what they share is :mod:`ddmrl.aux_policies.base`."""

from __future__ import annotations

from pathlib import Path

from ddmrl.aux_policies.base import AUX_DIR, aux_config
from ddmrl.registry import Registry

AUX_POLICIES = Registry(
    {
        "schedule": "ddmrl.aux_policies.schedule:SchedulePolicy",
        "unmasking": "ddmrl.aux_policies.unmasking:UnmaskingPolicy",
    }
)


def new_aux_policy(cfg, rollout_steps: int):
    """A freshly initialised ``AuxPolicy`` for an ``aux_policy`` config section (None for kind ``none``);
    ``rollout_steps``: the rollout sampler's steps (the schedule table's knots)."""
    if cfg.kind == "unmasking":
        return AUX_POLICIES["unmasking"](
            hidden_size=cfg.hidden_size,
            num_heads=cfg.num_heads,
            intermediate_size=cfg.intermediate_size,
            init_bias=cfg.init_bias,
            fallback=cfg.fallback,
            temperature=cfg.temperature,
            eval_temperature=cfg.eval_temperature,
        )
    if cfg.kind == "schedule":
        return AUX_POLICIES["schedule"](
            actions=cfg.actions, head=cfg.head, knots=rollout_steps, hidden_size=cfg.hidden_size, init_std=cfg.init_std
        )
    return None


def load_aux_policy(path: str | Path, device: str | None = None):
    """The ``AuxPolicy`` saved with the model in directory ``path`` (eval mode), or None when it has none."""
    from safetensors.torch import load_file

    config = aux_config(path)
    if config is None:
        return None
    kind = config.pop("kind", None)
    if kind not in AUX_POLICIES:
        where = Path(path) / AUX_DIR / "config.json"
        raise ValueError(f"{where}: kind = {kind!r}; choose one of {list(AUX_POLICIES)}")
    policy = AUX_POLICIES[kind](**config)
    policy.load_state_dict(load_file(str(Path(path) / AUX_DIR / "model.safetensors")))
    return policy.to(device or "cpu").eval()


__all__ = ["AUX_POLICIES", "load_aux_policy", "new_aux_policy"]
