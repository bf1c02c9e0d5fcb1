"""Training scale: precision, activation checkpointing, LoRA adapters and how a stage is launched."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_validator

from ddmrl.config._base import (
    Bool,
    Float,
    Int,
    Section,
    Str,
    refuse,
    section,
)

if TYPE_CHECKING:  # the sections it checks (they import this module)
    from ddmrl.config.download import SFTConfig
    from ddmrl.config.grpo import GRPOConfig

# ------------------------------------------------------------------------------------------------ training scale

MixedPrecision = Annotated[
    Literal["no", "bf16", "fp16"], Field(description="accelerate autocast; the master weights stay in float32.")
]
GradientCheckpointing = Annotated[
    Bool, Field(description="Recompute activations in backward (models that support it) to save memory.")
]


@section
class LoraConfig(Section):
    """LoRA adapters (Hu et al. 2022) through peft; ``r: 0`` trains every weight. d1 uses r 128, alpha 64, dropout
    0.05 on the attention and MLP projections. Saved models have the adapters merged in; with LoRA the frozen base
    is the KL reference."""

    r: Int = Field(0, ge=0, description="Adapter rank (0: no adapters).", json_schema_extra={"why": "0 = no adapters"})
    alpha: Float = Field(16.0, gt=0, description="peft lora_alpha: the update is scaled by alpha / r.")
    dropout: Float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter input.")
    target_modules: Annotated[tuple[Str, ...], Field(min_length=1)] | Str = Field(
        ("all-linear",),
        description="Module names to adapt (peft: a name matches itself and any module whose name ends with '.' + "
        "it), all-linear (every Linear but the LM head), or one string: a regular expression matching full module "
        "names (ddmrl.models.lora).",
        json_schema_extra={"why": "must be a list of module names or one regular expression"},
    )

    @model_validator(mode="after")
    def _check(self) -> LoraConfig:
        if isinstance(self.target_modules, str):
            try:
                re.compile(self.target_modules)
            except re.error as e:
                raise refuse("target_modules", self.target_modules, f"not a regular expression ({e})") from None
        return self


@section
class LaunchConfig(Section):
    """How the engines start a training stage: ``python stages/X.py ...`` or, for several GPUs, ``accelerate launch
    --config_file F --num_processes N stages/X.py ...`` (DDP, DeepSpeed ZeRO or FSDP; docs/distributed.md)."""

    launcher: Literal["python", "accelerate"] = Field("python", description="python (one process) or accelerate.")
    config_file: Str = Field(
        "configs/accelerate/ddp.yaml", description="accelerate config (configs/accelerate/: ddp, zero2, zero3, fsdp)."
    )
    num_processes: Int = Field(1, ge=1, description="Processes, one per GPU, over all nodes (the job's GPU count).")
    num_machines: Int = Field(
        1,
        ge=1,
        description="Nodes the stage spans (accelerate's --num_machines): num_processes / num_machines GPUs on each, "
        "one launcher per node through srun; only through SLURM (docs/distributed.md, section 4).",
    )
    timeout_s: Float = Field(
        1800.0,
        gt=0,
        description="Seconds a process waits in a collective (the gradient all-reduce, a barrier) for the others "
        "before its run fails with an error: a hung or lost process ends the job instead of holding it to its limit.",
    )
    gpu_memory_gib: Float = Field(
        0.0,
        ge=0,
        description="Memory of one GPU the run is booked on (GiB); > 0: the grpo stage plans its per-GPU peak "
        "first (python -m ddmrl.plan) and refuses to start when it does not fit; 0: no check.",
    )

    @model_validator(mode="after")
    def _check(self) -> LaunchConfig:
        if self.launcher == "accelerate" and not self.config_file:
            raise refuse("config_file", self.config_file, "must name an accelerate config file")
        if self.num_machines > 1 and self.launcher != "accelerate":
            raise refuse("num_machines", self.num_machines, "needs launcher: accelerate (one launcher per node)")
        if self.num_processes % self.num_machines:
            raise refuse(
                "num_processes", self.num_processes, f"must be a multiple of num_machines ({self.num_machines})"
            )
        return self


def check_scale(cfg: SFTConfig | GRPOConfig) -> None:
    if cfg.launch.launcher == "python" and cfg.launch.num_processes != 1:
        raise refuse(
            "launch.num_processes",
            cfg.launch.num_processes,
            "needs launch.launcher: accelerate (python runs one process)",
        )
