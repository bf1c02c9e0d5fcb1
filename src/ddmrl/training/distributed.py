"""Training at scale: accelerate processes (DDP, DeepSpeed ZeRO, FSDP), LoRA adapters through peft, mixed precision
and gradient checkpointing, shared by the ``sft`` and ``grpo`` stages.

How a run is split over ``W`` processes (TRL's GRPOTrainer, which d1 and MaskGRPO launch with ``accelerate launch``,
d1's ``diffu-grpo/run.sh``, MaskGRPO's ``scripts/train/*.sh``):

* ``num_prompts`` (GRPO) and ``batch_size`` (SFT) stay the global batch. Every process draws the same batch from the
  run's seed and keeps its own contiguous share (:func:`shard`), so which prompts a step trains on does not depend
  on ``W``; whole prompt groups stay on one process, so group advantages need no communication.
* Each process samples completions, training views and masks from its own generators: process 0 keeps the run's
  seed and process ``r > 0`` uses ``derive_seed(seed, "rank", r)`` (:func:`rank_seed`). One process therefore
  reproduces the single-process run bit for bit (the unit tests check it).
* Gradients are averaged by the backend (DDP all-reduce, ZeRO reduce-scatter): each process's loss is the mean over
  its own tokens, as in TRL. Rewards and metrics are gathered for the curve; only the main process writes
  outputs, the curve and the trackers' files. Resumable checkpoints (``ddmrl.training.resume``) are accelerate's
  ``save_state``: every process writes its part (ZeRO and FSDP shards, its random states) and the main process
  checksums and renames the directory.

LoRA (``lora.r > 0``): the policy is a peft model; with ``mixed_precision: bf16`` the frozen base is stored in bf16
and the adapters in fp32 (peft's default). The GRPO reference is the same network with its adapters disabled (TRL's
PEFT path, no second copy; d1 and MaskGRPO). Saved models have the adapters merged in, so ``evaluate`` loads a plain
model. Gradient checkpointing uses the transformers API where the model supports it (TinyDDM, Dream, SDAR, LLaDA 2.x
do), else LLaDA's own ``set_activation_checkpointing`` (LLaDA's and MMaDA's remote code, which lack the transformers
API: LLaDA issue #51), and is otherwise skipped with a printed note. FSDP shards the model's own blocks, the classes
its ``_no_split_modules`` names (:func:`configure_fsdp`), so one accelerate config serves every family.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, InitProcessGroupKwargs

from ddmrl.config import ConfigError, LoraConfig
from ddmrl.io import atomic_path
from ddmrl.models.checkpoint import save_checkpoint
from ddmrl.models.layout import unwrap
from ddmrl.models.lora import peft_target_modules
from ddmrl.seeding import derive_seed

T = TypeVar("T")


# ------------------------------------------------------------------------------------------------ processes


def make_accelerator(
    mixed_precision: str = "no",
    gradient_accumulation_steps: int = 1,
    cpu: bool | None = None,
    log_with=None,
    timeout_s: float | None = None,
):
    """The run's ``Accelerator``: processes and device come from ``accelerate launch`` (its config file),
    ``mixed_precision`` from params (the ``mixed_precision`` key of the stage's section), ``log_with`` the experiment
    trackers (``ddmrl.training.tracking.trackers``), ``timeout_s`` how long a collective waits for the other processes
    before it raises (params' ``launch.timeout_s``; None: torch's default), so that a hung or lost process ends the
    run with an error.

    ``cpu`` defaults to "no CUDA device here": several processes on a CPU-only host then form a gloo group
    (accelerate's multi-GPU launcher does not tell them to; configs/accelerate/cpu_2proc.yaml relies on this).
    DeepSpeed launched on a CPU-only host runs on DeepSpeed's CPU accelerator over gloo (to try zero2/zero3 without
    a GPU). FSDP cannot run there and is refused: accelerate 1.15 sets up FSDP only for accelerator devices (its
    ``AcceleratorState`` takes the FSDP branch for MULTI_GPU/XPU/NPU/... and never for MULTI_CPU).
    """
    group = {} if timeout_s is None else {"timeout": timedelta(seconds=timeout_s)}
    if cpu is None:
        cpu = not torch.cuda.is_available()
        if cpu and _launched_with("DEEPSPEED"):
            cpu, group = False, {**group, "backend": "gloo"}
    acc = Accelerator(
        mixed_precision=mixed_precision,
        gradient_accumulation_steps=gradient_accumulation_steps,
        cpu=cpu,
        kwargs_handlers=[InitProcessGroupKwargs(**group)] if group else None,
        log_with=log_with or None,
    )
    if _launched_with("FSDP") and acc.distributed_type != DistributedType.FSDP:
        raise RuntimeError(
            f"an FSDP config was launched but accelerate set up {acc.distributed_type.value}: FSDP needs CUDA devices "
            "(on a CPU use configs/accelerate/cpu_2proc.yaml, or zero2.yaml / zero3.yaml with deepspeed installed)"
        )
    if acc.num_processes > 1 and acc.distributed_type == DistributedType.NO:
        raise RuntimeError(f"{acc.num_processes} processes but no distributed backend: they would not synchronise")
    return acc


def _launched_with(kind: str) -> bool:
    """``accelerate launch`` with a DeepSpeed or FSDP config sets ACCELERATE_USE_<KIND>=true for its processes."""
    return os.environ.get(f"ACCELERATE_USE_{kind}", "").lower() == "true"


def local_accelerator(model, mixed_precision: str = "no", gradient_accumulation_steps: int = 1, log_with=None):
    """A single-process ``Accelerator`` on the device the model already lives on (training functions called
    without one, e.g. from the unit tests; the download stage's pre-training)."""
    on_cpu = next((p.device.type == "cpu" for p in model.parameters()), True)
    return make_accelerator(mixed_precision, gradient_accumulation_steps, cpu=on_cpu, log_with=log_with)


def set_accumulation(acc, steps: int) -> None:
    """Make ``acc.backward`` divide by ``steps`` (DeepSpeed fixes the value when the engine is built)."""
    if acc.distributed_type == DistributedType.DEEPSPEED:
        if acc.state.deepspeed_plugin.deepspeed_config.get("gradient_accumulation_steps") not in (steps, "auto"):
            raise ConfigError(
                f"the DeepSpeed config's gradient_accumulation_steps differs from params ({steps}); set it to auto"
            )
    acc.gradient_accumulation_steps = steps


def configure_deepspeed(acc, micro_batch: int, gradient_accumulation_steps: int, max_grad_norm: float) -> None:
    """Under DeepSpeed, fill the engine's batch, accumulation and clipping from params (there is no dataloader for
    accelerate to read them from; the clipping is done by the engine at the accumulation boundary)."""
    if acc.distributed_type != DistributedType.DEEPSPEED:
        return
    ds = acc.state.deepspeed_plugin.deepspeed_config
    ds["train_micro_batch_size_per_gpu"] = micro_batch
    ds["gradient_accumulation_steps"] = gradient_accumulation_steps
    ds["gradient_clipping"] = max_grad_norm
    ds["train_batch_size"] = micro_batch * gradient_accumulation_steps * acc.num_processes


def fsdp_wrap_classes(model: torch.nn.Module) -> list[str]:
    """The block classes FSDP shards one by one, from the model itself: the names its modules declare in
    ``_no_split_modules`` (transformers' list of a model's blocks; searched through wrappers such as Dream's aligned
    view, an image layout or peft), keeping those some module of the model is an instance of (LLaDA's list names
    three block classes, one per ``block_type``). ``ConfigError`` (one line) when none is.

    An accelerate config written for one model (``fsdp_transformer_layer_cls_to_wrap: _Block``, TinyDDM's class)
    stops every other with "Could not find the transformer layer class"; this makes one config serve every family.
    """
    declared = dict.fromkeys(name for m in model.modules() for name in getattr(m, "_no_split_modules", None) or ())
    present = {type(m).__name__ for m in model.modules()}
    found = [name for name in declared if name in present]
    if not found:
        raise ConfigError(
            f"FSDP: {type(model).__name__} declares no block class that it contains (_no_split_modules: "
            f"{list(declared) or 'none'}); name one in the accelerate config's fsdp_transformer_layer_cls_to_wrap"
        )
    return found


def configure_fsdp(acc, model: torch.nn.Module) -> tuple[str, ...]:
    """Under FSDP, before ``acc.prepare``: wrap ``model``'s own blocks (:func:`fsdp_wrap_classes`). A class the
    accelerate config names (``fsdp_transformer_layer_cls_to_wrap``) is kept when the model has it and refused, in
    one line, when it has not. Returns the class names (none outside FSDP)."""
    if acc.distributed_type != DistributedType.FSDP:
        return ()
    plugin = acc.state.fsdp_plugin
    present = {type(m).__name__ for m in model.modules()}
    named = list(plugin.transformer_cls_names_to_wrap or ())
    if missing := [name for name in named if name not in present]:
        raise ConfigError(
            f"accelerate config: fsdp_transformer_layer_cls_to_wrap = {','.join(named)}: {type(model).__name__} has "
            f"no {', '.join(missing)} (its blocks: {', '.join(fsdp_wrap_classes(model))}); remove the key, the stage "
            "wraps the model's own blocks"
        )
    plugin.transformer_cls_names_to_wrap = named or fsdp_wrap_classes(model)
    return tuple(plugin.transformer_cls_names_to_wrap)


def is_deepspeed(acc) -> bool:
    return acc.distributed_type == DistributedType.DEEPSPEED


def is_sharded(acc) -> bool:
    """Parameters are split over processes (ZeRO-3, FSDP): no process holds the whole model."""
    if acc.distributed_type == DistributedType.FSDP:
        return True
    if acc.distributed_type == DistributedType.DEEPSPEED:
        return acc.state.deepspeed_plugin.zero_stage == 3
    return False


def check_supported(acc, lora: LoraConfig) -> None:
    """Refuse combinations this module does not implement, with what to use instead."""
    if lora.r and is_sharded(acc):
        raise ConfigError(
            "lora.r > 0 with ZeRO-3 or FSDP is not supported (adapters cannot be merged from shards here); "
            "use configs/accelerate/zero2.yaml or ddp.yaml, the adapters are small"
        )


def rank_seed(seed: int, rank: int) -> int:
    """The seed of process ``rank``'s own draws: process 0 keeps ``seed`` (so one process reproduces the
    single-process run), process r > 0 gets ``derive_seed(seed, "rank", r)``."""
    return seed if rank == 0 else derive_seed(seed, "rank", rank)


def shard(items: Sequence[T], rank: int, world: int, what: str = "batch") -> list[T]:
    """Process ``rank``'s contiguous share of a global batch; the batch must split evenly.

    >>> shard([0, 1, 2, 3], 1, 2)
    [2, 3]
    """
    n = len(items)
    if n % world:
        raise ConfigError(f"{what} = {n}: does not split over {world} processes; use a multiple of {world}")
    k = n // world
    return list(items[rank * k : (rank + 1) * k])


def all_processes(acc, flag: bool) -> bool:
    """True when ``flag`` holds on every process (one collective; none with a single process)."""
    if acc.num_processes == 1:
        return bool(flag)
    return bool(acc.gather(torch.tensor([float(flag)], device=acc.device)).min().item() > 0)


def gather(acc, x: torch.Tensor) -> torch.Tensor:
    """Every process's ``x`` concatenated along dim 0, on the CPU (``x`` itself with one process)."""
    if acc.num_processes == 1:
        return x
    return acc.gather(x.to(acc.device)).cpu()


def mean_over_processes(acc, values: dict[str, float]) -> dict[str, float]:
    """The mean over processes of each float (unchanged with one process)."""
    if acc.num_processes == 1 or not values:
        return values
    t = torch.tensor(list(values.values()), dtype=torch.float64, device=acc.device)
    return dict(zip(values, acc.reduce(t, reduction="mean").tolist(), strict=True))


def weights_checksum(model) -> float:
    """Sum of every parameter in float64, in name order: a cheap fingerprint for logs (equal on every process after a
    synchronised step)."""
    with torch.no_grad():
        return sum(p.detach().double().sum().item() for _, p in sorted(model.named_parameters()))


def fingerprint_parts(acc) -> tuple[str, ...]:
    """Extra parts of a run's identity: a resumed run must have as many processes, and the same engine (the layout
    of ``save_state``'s files and of the optimiser shards), as the one that saved."""
    if acc.num_processes == 1 and acc.distributed_type == DistributedType.NO:
        return ()
    engine = acc.distributed_type.value
    if acc.distributed_type == DistributedType.DEEPSPEED:
        engine += f"-zero{acc.state.deepspeed_plugin.zero_stage}"
    elif acc.distributed_type == DistributedType.FSDP:
        engine += f"-{acc.state.fsdp_plugin.state_dict_type}"
    return (f"processes={acc.num_processes}", f"engine={engine}")


def device_generator(device: torch.device, *parts: object) -> torch.Generator:
    """A generator seeded by ``derive_seed(*parts)`` on ``device``: the CPU one of ``ddmrl.seeding.generator`` on a
    CPU, a CUDA generator on a GPU (noise of shape [N, T, V] is drawn where the logits are)."""
    return torch.Generator(device=device).manual_seed(derive_seed(*parts))


def to_device(obj: Any, device: torch.device) -> Any:
    """Tensors inside tuples, NamedTuples and mappings moved to ``device`` (the same objects when already there)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, Mapping):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(to_device(v, device) for v in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def no_sync_unless(acc, model, last: bool):
    """Skip DDP's gradient all-reduce on every micro-batch but the last of an optimiser step (``model``: one module
    or a list of the modules trained together)."""
    if last:
        return contextlib.nullcontext()
    if not isinstance(model, list):
        return acc.no_sync(model)
    stack = contextlib.ExitStack()
    for m in model:
        stack.enter_context(acc.no_sync(m))
    return stack


# ------------------------------------------------------------------------------------------------ models


def prepare_model(model, mixed_precision: str, gradient_checkpointing: bool, lora: LoraConfig):
    """Gradient checkpointing, then LoRA adapters (peft), on a freshly loaded model; returns the model to train."""
    if gradient_checkpointing and not enable_checkpointing(model):
        print(f"note: {type(model).__name__} does not support gradient checkpointing; training without it")
    if lora.r:
        try:
            from peft import LoraConfig as PeftLoraConfig
            from peft import get_peft_model
        except ImportError:
            raise RuntimeError("lora.r > 0 needs peft: pip install peft==0.21.2") from None
        if mixed_precision == "bf16" and any(p.dtype != torch.bfloat16 for p in model.parameters()):
            model = model.to(torch.bfloat16)  # the frozen base; peft keeps the adapters in fp32
        targets = peft_target_modules(model, lora.target_modules)  # refuses an accidental output head or embedding
        model = get_peft_model(
            model,
            PeftLoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets),
        )
    return model


def enable_checkpointing(model) -> bool:
    """Non-reentrant activation checkpointing of every block; False where the model has no way to do it.

    Through the transformers API where the model supports it (TinyDDM), else through LLaDA's own
    ``set_activation_checkpointing("whole_layer")`` on its inner model (OLMo's strategies; LLaDA's and MMaDA's remote
    code, which do not support the transformers API: LLaDA issue #51), which checkpoints each block with
    ``torch.utils.checkpoint(use_reentrant=False)``."""
    if getattr(model, "supports_gradient_checkpointing", False):
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable({"use_reentrant": False})
        return True
    inner = getattr(model, "model", None)
    if callable(getattr(inner, "set_activation_checkpointing", None)):
        inner.set_activation_checkpointing("whole_layer")
        return True
    return False


def checkpointing_of(model: torch.nn.Module) -> str | None:
    """How ``model`` recomputes activations in backward: ``"transformers"`` (a module's ``gradient_checkpointing``
    flag, set by the transformers API), LLaDA's strategy name (``"whole_layer"``), or None (it keeps them)."""
    if any(getattr(m, "gradient_checkpointing", None) is True for m in model.modules()):
        return "transformers"
    strategy = next((s for m in model.modules() if (s := getattr(m, "activation_checkpointing_strategy", None))), None)
    return None if strategy is None else getattr(strategy, "name", str(strategy))


def is_peft(model) -> bool:
    """True for a model with LoRA adapters (also inside an image layout wrapper)."""
    model = unwrap(model)
    return hasattr(model, "disable_adapter") and hasattr(model, "merge_and_unload")


def trainable(model) -> list[torch.nn.Parameter]:
    """The parameters the optimiser updates (all of them without adapters), in ``model.parameters()`` order."""
    return [p for p in model.parameters() if p.requires_grad]


@contextlib.contextmanager
def adapters_disabled(acc, policy) -> Iterator[None]:
    """The policy with its LoRA adapters switched off: the frozen base, i.e. the reference model."""
    with unwrap(acc.unwrap_model(policy)).disable_adapter():
        yield


def place_reference(acc, ref):
    """The frozen reference on the run's device, in bf16 under bf16 mixed precision (half the memory)."""
    if ref is None:
        return None
    ref = ref.to(acc.device)
    if acc.mixed_precision == "bf16" and acc.device.type != "cpu":
        ref = ref.to(torch.bfloat16)
    return ref.eval().requires_grad_(False)


def prepared(acc, model):
    """The wrapper ``acc.prepare`` made of ``model`` (DDP module, DeepSpeed engine, ...), or ``model`` itself."""
    return next((m for m in acc._models if acc.unwrap_model(m) is acc.unwrap_model(model)), model)


def report_weights(acc, model, stage: str) -> None:
    """Print ``<stage>: process r/W done, weights checksum X``: equal on every process after synchronised steps.
    Under ZeRO-3 and FSDP each process holds only its shard, so no checksum is printed."""
    who = f"{stage}: process {acc.process_index + 1}/{acc.num_processes} done"
    if is_sharded(acc):
        print(f"{who} (parameters sharded: no checksum)", flush=True)
    else:
        print(f"{who}, weights checksum {weights_checksum(acc.unwrap_model(model))!r}", flush=True)


def save_policy(acc, policy, tok, path: str | Path, aux_policy=None, value_model=None) -> None:
    """Write the trained model as a plain ``save_pretrained`` checkpoint (adapters merged), from the main process,
    with its auxiliary policy (``ddmrl.aux_policies``) or value model (TraceRL's) if it has one.

    Every process must call it: with ZeRO-3 or FSDP the full state dict is gathered collectively first.
    """
    state = acc.get_state_dict(prepared(acc, policy)) if is_sharded(acc) else None
    if not acc.is_main_process:
        return
    model = unwrap(acc.unwrap_model(policy))  # the model inside an image layout is what is saved
    if is_peft(model):
        model = model.merge_and_unload()
    aux = None if aux_policy is None else acc.unwrap_model(aux_policy)
    if state is None:
        save_checkpoint(model, tok, path, aux, None if value_model is None else acc.unwrap_model(value_model))
        return
    with atomic_path(path) as tmp:
        model.save_pretrained(tmp, state_dict=state, safe_serialization=True)
        tok.save_pretrained(tmp)
