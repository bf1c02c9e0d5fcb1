"""Which modules LoRA adapts (Hu et al. 2022), checked before training.

``lora.target_modules`` takes peft's two forms: a list of names, each matching a module whose name is that name or
ends with ``.`` + that name, or one string, a regular expression that must match a module's full name. A list
entry can reach further than meant: in LLaDA's and MMaDA's code ``ff_out`` names both every block's MLP
down-projection (``model.transformer.blocks.<i>.ff_out``) and the output head (``model.transformer.ff_out``,
126464 x 4096). :func:`peft_target_modules` refuses, before any training, a target that reaches the output head
or an embedding unless that module is named in full (a list entry equal to its whole name: adapting it is then
meant). The paper profiles target the blocks by full name with a regular expression.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ddmrl.config import ConfigError

__all__ = ["lora_targets", "peft_target_modules", "protected_modules"]

ALL_LINEAR = "all-linear"  # peft: every Linear but the output layer


def protected_modules(model: nn.Module) -> dict[str, str]:
    """Module name -> description of the modules no LoRA target should reach by accident: the output head
    (``get_output_embeddings``) and every embedding (the input embeddings included)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    out = {}
    for name, module in model.named_modules():
        if head is not None and module is head:
            out[name] = f"output head {name} ({_shape(module)})"
        elif isinstance(module, nn.Embedding):
            out[name] = f"embedding {name} ({_shape(module)})"
    return out


def _shape(module: nn.Module) -> str:
    weight = getattr(module, "weight", None)
    return " x ".join(map(str, weight.shape)) if weight is not None else type(module).__name__


def _peft_form(target_modules: tuple[str, ...] | str) -> str | list[str]:
    if target_modules in ((ALL_LINEAR,), ALL_LINEAR):
        return ALL_LINEAR
    return target_modules if isinstance(target_modules, str) else list(target_modules)


def lora_targets(model: nn.Module, target_modules: tuple[str, ...] | str) -> list[str]:
    """The names of the modules of ``model`` that ``target_modules`` selects, by peft's own matching."""
    from peft import LoraConfig
    from peft.tuners.tuners_utils import check_target_module_exists

    targets = _peft_form(target_modules)
    if targets == ALL_LINEAR:
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        return [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and m is not head]
    probe = LoraConfig(target_modules=targets)
    return [name for name, _ in model.named_modules() if name and check_target_module_exists(probe, name)]


def peft_target_modules(model: nn.Module, target_modules: tuple[str, ...] | str) -> Any:
    """``target_modules`` as peft's ``LoraConfig`` takes it, after checking it on ``model``.

    Raises ``ConfigError`` (one line) when it selects the output head or an embedding that is not named in full,
    or nothing at all.
    """
    targets = _peft_form(target_modules)
    selected = set(lora_targets(model, target_modules))
    if not selected:
        raise ConfigError(f"lora.target_modules = {targets!r}: selects no module of {type(model).__name__}")
    named_in_full = set(targets) if isinstance(targets, list) else set()
    for name, what in protected_modules(model).items():
        if name in selected and name not in named_in_full:
            raise ConfigError(
                f"lora.target_modules = {targets!r}: also selects the {what}, not only the blocks' projections; "
                "target the blocks by full name (a regular expression such as '.*\\.blocks\\.\\d+\\.(q_proj|ff_out)') "
                f"or list {name!r} itself to adapt it on purpose"
            )
    return targets
