"""Per-GPU memory and time of a run's training and sampling, planned before the GPUs are booked.

    python -m ddmrl.plan [--params params.yaml] [--profile NAME] [--method SECTION] [--model-dir DIR] \
        [--prompt-length 256] [--memory-gib 80] [--tflops 312] [--utilisation 0.35] [--gpus-per-node 8] [--nodes 1]

Nothing is allocated: the model's real class is instantiated on the meta device and moved to fake tensors
(PyTorch's ``FakeTensorMode``: shapes and dtypes, no storage), and ddmrl's own code runs on them: one call of the
configured sampler, the old (and reference) log-probs of a rollout batch, and one training micro-step (forward under
autocast, float32 log-softmax, backward, AdamW's step). Every tensor is counted when an operator makes it and
uncounted when Python frees it (:class:`LiveBytes`: what ``torch.cuda.max_memory_allocated`` reports, before the
allocator's rounding), with the FLOPs of the matrix products and attention (torch's formulas). The parts are then
combined per process as the engine shards them (:func:`per_gpu`), and the peak is what persists (weights, AdamW's
states, DDP's buckets, ZeRO-3's gathered blocks) plus the largest phase:

* training: the micro-step's gradients and activations (saved tensors, logits and their float32 log-softmax);
* old / reference log-probs: ``view_logps`` over the rollout batch, without gradients;
* sampling: the sampler's peak over the weights (the KV cache of ``kv_cache: prefix/dual``; the plain sampler's
  [N, T, V] float32 and float64 work over the whole sequence).

Checked against real runs (docs/real_scale.md): on a CPU within 0.85 to 1.15 of a GRPO run's peak; on an H200 the
sampler and log-prob phases within 0.6%, the checkpointed training micro-step within 1.5%, without checkpointing 1.39
times the CUDA allocator's peak (the trace runs PyTorch's CPU kernels; fake CUDA tensors cannot run backward on a
CPU-only torch). Left out: the CUDA context
(about 0.5 GiB), the allocator's rounding and fragmentation, NCCL and DeepSpeed buffers, and the rollout tensors kept
between the phases (megabytes). Time is FLOPs over ``tflops x utilisation``: an assumption, not a measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import weakref
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from ddmrl import config
from ddmrl.errors import ConfigError
from ddmrl.likelihood import token_logps
from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM
from ddmrl.rollout import sampler_kwargs
from ddmrl.samplers.cache import cached_forward
from ddmrl.samplers.llada import generate
from ddmrl.training.data import encode_prompts
from ddmrl.training.distributed import prepare_model
from ddmrl.training.grpo import view_logps

GIB = 2**30
ENGINES = ("ddp", "zero2", "zero3", "fsdp")
SHARDED = {"ddp": (), "zero2": ("gradients", "optimizer"), "zero3": ("gradients", "optimizer", "weights")}
SHARDED["fsdp"] = SHARDED["zero3"]


class DoesNotFit(ConfigError):
    """A run that needs more memory per GPU, or more GPUs, than the declared hardware has (one line)."""


# ------------------------------------------------------------------------------------------------ counting


#: FLOP formulas by operator: torch's (matrix products, convolutions, CUDA attention), and PyTorch's CPU
#: FlashAttention counted as the CUDA one (same leading arguments; missing from torch's table)
FLOP_FORMULAS = {
    **flop_registry,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: flop_registry[
        torch.ops.aten._scaled_dot_product_flash_attention
    ],
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: flop_registry[
        torch.ops.aten._scaled_dot_product_flash_attention_backward
    ],
}


class LiveBytes(TorchDispatchMode):
    """Bytes of the tensor storages alive while the mode is active, their peak, and the FLOPs of the operators run.

    A storage is counted once (views share it), when the first operator returns a tensor on it, and uncounted when
    Python frees it. Storages made before the mode (parameters, optimiser states) are counted with :meth:`add`.
    Works on real tensors and on fake ones (their ``nbytes`` is what the real run would allocate). FLOPs come from
    :data:`FLOP_FORMULAS`, as torch's ``FlopCounterMode`` counts them, without its module tracking (whose hooks keep
    tensors alive: under activation checkpointing they inflate the peak many times over).
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = self.flops = 0
        self._refs: dict[int, weakref.ref] = {}

    def add(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta" and not isinstance(t, FakeTensor):
            return
        storage = t.untyped_storage()
        key, n = id(storage), storage.nbytes()
        if key in self._refs:
            return
        self._refs[key] = weakref.ref(storage, lambda _, key=key, n=n: self._free(key, n))
        self.live += n
        self.peak = max(self.peak, self.live)

    def _free(self, key: int, n: int) -> None:
        if self._refs.pop(key, None) is not None:
            self.live -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = FLOP_FORMULAS.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=out)
        for t in tree_flatten(out)[0]:
            self.add(t)
        return out


class _Uncounted(contextlib.nullcontext):
    """Stands in for :class:`LiveBytes` when a trace function is timed (``count=False``): a Python dispatch mode
    costs tens of microseconds per operator, which would dominate a GPU's step time."""

    live = peak = flops = 0

    def add(self, t: Any) -> None:
        pass


def _counter(count: bool) -> LiveBytes | _Uncounted:
    return LiveBytes() if count else _Uncounted()


class _Planning(TorchFunctionMode):
    """``bool(fake tensor)`` is True: a sampler's data-dependent early exits ("any mask left?") never fire, so the
    trace runs every step (the worst case for time; memory per step does not depend on it)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__bool__ and isinstance(args[0], FakeTensor):
            return True
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def fake_tensors() -> Iterator[None]:
    """Tensors made inside are fake: shapes, dtypes and a (CPU) device, no storage. (Fake CUDA tensors need a CUDA
    build of torch for backward; the bytes and FLOPs are the same. One difference: a CPU trace takes PyTorch's CPU
    attention kernel, which like FlashAttention keeps no [T, T] score matrix for backward.)"""
    with FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True), _Planning():
        yield


def on_meta(build: Callable[[], nn.Module]) -> nn.Module:
    """``build()`` with its parameters on the meta device (no memory, no initialisation work), also
    where the model's code names a device itself (LLaDA builds "always on CPU to start with")."""
    from accelerate import init_empty_weights

    with init_empty_weights():
        model = build()
    if callable(getattr(model, "tie_weights", None)):
        model.tie_weights()  # registering each parameter anew on meta unties tied ones
    return model


def to_fake(module: nn.Module) -> nn.Module:
    """``module`` with every parameter and buffer replaced in place by a fake tensor of its shape, dtype and
    ``requires_grad`` (tied parameters stay tied). Call inside :func:`fake_tensors`."""
    made: dict[int, torch.Tensor] = {}

    def fake(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in made:
            new = torch.empty(t.shape, dtype=t.dtype, device="cpu")
            made[id(t)] = nn.Parameter(new, t.requires_grad) if isinstance(t, nn.Parameter) else new
        return made[id(t)]

    for m in module.modules():
        for table in (m._parameters, m._buffers):
            for name, t in table.items():
                if t is not None:
                    table[name] = fake(t)
    return module


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _bytes(tensors) -> int:
    return sum({id(t.untyped_storage()): t.untyped_storage().nbytes() for t in tensors}.values())


# ------------------------------------------------------------------------------------------------ traces


@dataclass
class TrainTrace:
    """One process, unsharded: bytes of each part of one training micro-step, and its FLOPs."""

    weights: int
    trainable_params: int
    gradients: int
    optimizer: int
    activations: int
    flops: int
    forward_flops: int
    optimizer_step: int = 0  # the step's temporaries beyond the states it keeps (foreach AdamW: sqrt(v))


@dataclass
class SampleTrace:
    """One sampler call: its peak over the weights (bytes), its FLOPs, the KV cache's bytes and the model
    evaluations (on fake tensors every step runs: no early exit)."""

    peak: int
    flops: int
    kv_cache: int = 0
    nfe: int = 0


def trace_training(policy: nn.Module, rows: int, prompt_length: int, completion_length: int, mixed_precision: str,
                   vocab_size: int, reference: nn.Module | None = None, count: bool = True) -> TrainTrace:  # fmt: skip
    """One micro-step of the GRPO / SFT update on ``rows`` sequences: the policy's forward (autocast in bf16 when
    ``mixed_precision`` says so), the float32 log-softmax of the completion (``ddmrl.likelihood.token_logps``),
    backward, and AdamW's first step (which makes its two moments). On fake tensors (:func:`fake_tensors`) it plans,
    on real ones it measures; ``count=False`` runs it uncounted (bytes and FLOPs 0), to time it. ``reference``: a
    separate frozen reference model (full fine-tuning), counted as weights."""
    policy.zero_grad(set_to_none=True)  # as every optimiser step starts
    params = list(policy.parameters())
    trainable = [p for p in params if p.requires_grad]
    device = params[0].device
    weights = _bytes(params) + (_bytes(list(reference.parameters())) if reference is not None else 0)
    counter = _counter(count)
    for t in params:
        counter.add(t)
    ids = torch.randint(0, vocab_size, (rows, prompt_length + completion_length), device=device)
    policy.train()
    with counter:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed_precision == "bf16"):
            logp = token_logps(policy, ids, ids[:, prompt_length:])  # [rows, L]
        forward = counter.flops
        logp.mean().backward()
        del logp
    activations, flops = counter.peak - counter.live, counter.flops  # beyond the weights and gradients it left
    gradients = _bytes([p.grad for p in trainable if p.grad is not None])
    # foreach: PyTorch's default on CUDA (on a CPU, a loop over parameters); its step holds sqrt(v) of every
    # parameter at once, one more copy of the trainable weights beside the gradients and both moments
    opt = torch.optim.AdamW(trainable, lr=1e-6, foreach=True)
    before = counter.peak = counter.live
    with counter:
        opt.step()
    optimizer, step = counter.live - before, counter.peak - counter.live
    return TrainTrace(weights, sum(p.numel() for p in trainable), gradients, optimizer, activations, flops, forward,
                      step)  # fmt: skip


def trace_logps(model: nn.Module, views: int, rows: int, prompt_length: int, completion_length: int,
                mixed_precision: str, vocab_size: int, count: bool = True) -> int:  # fmt: skip
    """Peak bytes over the weights of the old (or reference) log-probs of a rollout batch: ``views`` views of
    ``rows`` sequences through ``ddmrl.training.grpo.view_logps``, without gradients (autocast as in training);
    ``count=False``: uncounted (0), to time it."""
    device = next(model.parameters()).device
    inputs = torch.randint(0, vocab_size, (views, rows, prompt_length + completion_length), device=device)
    counter = _counter(count)
    for t in (inputs, *model.parameters()):
        counter.add(t)
    base = counter.live
    model.eval()  # grpo.old_logp_mode: eval (dropout off)
    with torch.no_grad(), counter:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed_precision == "bf16"):
            view_logps(model, inputs, inputs[0, :, prompt_length:])  # [V, N, L]
    model.train()
    return counter.peak - base


def trace_sampling(model: nn.Module, rows: int, prompt_length: int, completion_length: int, mask_id: int,
                   sampler_kwargs: dict[str, Any], vocab_size: int, shortcut: bool = True,
                   count: bool = True) -> SampleTrace:  # fmt: skip
    """One call of ddmrl's LLaDA sampler (``ddmrl.samplers.llada.generate``) with ``sampler_kwargs`` on ``rows``
    prompts, without gradients; with ``kv_cache``, also the bytes of the keys and values one full pass keeps.

    With the linear schedule every block's steps cost the same but its first (a full pass; later ones the cache's
    window), and memory does not grow with the steps: the sampler is traced with one and with two steps per block,
    and the FLOPs of s steps per block are F1 + (s - 1)(F2 - F1), exact for the plain, prefix and dual samplers.
    ``shortcut=False`` runs the sampler once as configured (to measure it); ``count=False`` also uncounted (bytes and
    FLOPs 0), to time it."""
    device = next(model.parameters()).device
    prompts = torch.randint(0, vocab_size, (rows, prompt_length), device=device)
    counter = _counter(count)
    for t in model.parameters():
        counter.add(t)
    base = counter.live

    def run(**kw: Any) -> tuple[int, int]:
        before = counter.flops
        with torch.no_grad(), counter:
            out = generate(model, prompts, completion_length, mask_id=mask_id, **(sampler_kwargs | kw))
        return counter.flops - before, out.nfe

    blocks = -(-completion_length // sampler_kwargs.get("block_length", completion_length))
    per_block = max(1, sampler_kwargs["steps"] // blocks)
    if not shortcut or sampler_kwargs.get("schedule", "linear") != "linear" or per_block <= 2:
        flops, nfe = run()
    else:
        (one, _), (two, _) = run(steps=blocks), run(steps=2 * blocks)
        flops, nfe = one + (per_block - 1) * (two - one), blocks * per_block
    kv = 0
    if count and sampler_kwargs.get("kv_cache", "none") != "none":
        with torch.no_grad():
            ids = torch.randint(0, vocab_size, (rows, prompt_length + completion_length), device=device)
            _, past = cached_forward(model, sampler_kwargs["kv_cache"])(ids, None, 0)
            kv = _bytes([t for t in tree_flatten(past)[0] if isinstance(t, torch.Tensor)])
    return SampleTrace(counter.peak - base, flops, kv, nfe)


# ------------------------------------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class Hardware:
    """What the run is booked on. ``tflops``: one GPU's dense bf16 peak (A100 312, H100 / H200 SXM 989);
    ``utilisation``: the fraction of it assumed for the time estimate."""

    memory_gib: float = 80.0
    gpus_per_node: int = 8
    nodes: int = 1
    tflops: float = 312.0
    utilisation: float = 0.35

    @property
    def world(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass
class StagePlan:
    """Bytes per GPU of each part, the peak, and FLOPs and seconds per optimiser step (GRPO: per rollout batch)."""

    stage: str
    engine: str
    processes: int
    parts: dict[str, int]
    peak: int
    flops_per_step: float
    seconds_per_step: float
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        rows = [f"| {k} | {v / GIB:.2f} |" for k, v in self.parts.items()]
        return "\n".join(
            [f"**{self.stage}** ({self.engine}, {self.processes} processes)", "", "| part | GiB per GPU |",
             "|---|---:|", *rows, f"| **peak** | **{self.peak / GIB:.2f}** |"]
        )  # fmt: skip


def largest_block_bytes(model: nn.Module) -> int:
    """Bytes of the largest direct child of the model's block list (what ZeRO-3 / FSDP gather whole)."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 1]
    if not lists:
        return 0
    return max(_bytes(list(block.parameters())) for block in max(lists, key=len))


def per_gpu(train: TrainTrace, engine: str, processes: int, gathered_block: int = 0) -> dict[str, int]:
    """The training parts of one process under ``engine`` (``ENGINES``) over ``processes`` processes."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
    sharded = SHARDED[engine]

    def share(part: str, n: int) -> int:
        return math.ceil(n / processes) if part in sharded else n

    parts = {k: share(k, getattr(train, k)) for k in ("weights", "gradients", "optimizer")}
    if engine == "ddp" and processes > 1:
        parts["ddp gradient buckets"] = train.gradients
    if engine in ("zero3", "fsdp") and processes > 1:
        parts["gathered blocks (ZeRO-3 / FSDP)"] = 2 * gathered_block
    parts["activations"] = train.activations
    return parts


def engine_of(config_file: str | Path) -> str:
    """ddp, zero2, zero3 or fsdp from an accelerate config file (``configs/accelerate/*.yaml``)."""
    import yaml

    raw = yaml.safe_load(Path(config_file).read_text()) or {}
    if raw.get("distributed_type") == "FSDP" or raw.get("fsdp_config"):
        return "fsdp"
    ds = raw.get("deepspeed_config") or {}
    if raw.get("distributed_type") == "DEEPSPEED" or ds:
        return f"zero{int(ds.get('zero_stage', 2))}" if int(ds.get("zero_stage", 2)) in (2, 3) else "ddp"
    return "ddp"


def grpo_plan(build: Callable[[], nn.Module], cfg: Any, mask_id: int, prompt_length: int, completion_length: int,
              hw: Hardware, engine: str) -> StagePlan:  # fmt: skip
    """The GRPO stage of resolved run ``cfg`` (a ``GRPOConfig``) per process: sampling, the old and reference
    passes and the update; ``build()`` instantiates the model as the stage loads it (see :func:`model_builder`)."""
    processes = cfg.launch.num_processes
    local_rows = cfg.num_prompts // processes * cfg.num_generations  # this process's rollouts
    micro_rows = max(1, local_rows // cfg.gradient_accumulation_steps)
    kwargs = sampler_kwargs(cfg.sampler, completion_length)
    model = on_meta(build)
    vocab = model.get_input_embeddings().num_embeddings
    # a full fine-tune keeps a frozen copy as the reference (the stage's deepcopy, in the dtype the model loads in)
    reference = on_meta(build) if not cfg.lora.r and cfg.beta and cfg.kl_target == "ref" else None
    policy = prepare_model(model, cfg.mixed_precision, cfg.gradient_checkpointing, cfg.lora)
    gathered = largest_block_bytes(policy)
    with fake_tensors():
        sample = trace_sampling(to_fake(on_meta(build)), local_rows, prompt_length, completion_length, mask_id,
                                kwargs, vocab)  # fmt: skip
        policy = to_fake(policy)
        logps = trace_logps(policy, cfg.num_iterations, local_rows, prompt_length, completion_length,
                            cfg.mixed_precision, vocab)  # fmt: skip
        train = trace_training(policy, micro_rows, prompt_length, completion_length, cfg.mixed_precision, vocab,
                               reference and to_fake(reference))  # fmt: skip
    parts = per_gpu(train, engine, processes, gathered)
    # gradients exist only in the update (zeroed to None before each step): the phases' peaks over what persists
    persistent = sum(v for k, v in parts.items() if k not in ("gradients", "activations"))
    step = math.ceil(train.optimizer_step / processes) if "optimizer" in SHARDED[engine] else train.optimizer_step
    phases = {"activations": parts["gradients"] + train.activations, "optimizer step": parts["gradients"] + step,
              "old / reference log-probs": logps, "sampling": sample.peak}  # fmt: skip
    peak = persistent + max(phases.values())
    parts |= {k: v for k, v in phases.items() if k not in ("activations", "optimizer step")}
    if step:
        parts["AdamW's step (foreach temporaries)"] = step
    if sample.kv_cache:
        parts["of which the KV cache"] = sample.kv_cache
    # per rollout batch: one sampling call, the old (and reference) forward passes over mu views, mu optimiser steps
    # of GA micro-batches
    views, ga = cfg.num_iterations, cfg.gradient_accumulation_steps
    logp_passes = views * (1 + (cfg.beta > 0 and cfg.kl_target == "ref")) * ga
    flops = sample.flops + logp_passes * train.forward_flops + views * ga * train.flops
    notes = [
        f"rows per process: {local_rows} sampled, {micro_rows} per micro-batch; prompt {prompt_length} + completion "
        f"{completion_length} tokens; sampler {kwargs}",
        f"trainable parameters: {train.trainable_params / 1e6:.1f} M",
    ]
    return StagePlan("grpo", engine, processes, parts, peak, flops, flops / (hw.tflops * 1e12 * hw.utilisation), notes)


# ------------------------------------------------------------------------------------------------ models


def model_builder(spec: Any, model_dir: str | Path | None = None) -> tuple[Callable[[], nn.Module], int]:
    """``(build, mask_id)``: ``build()`` instantiates the model class of ``spec`` (a ``model:`` section) from its
    config alone, in the spec's dtype, no weights read. ``model_dir``: where config.json (and its
    remote code) is, if not ``spec.path_or_id``."""
    # a real model's classes (and the hub's checks): the stages of a real model name the module in their uses
    from ddmrl.models.adapters import DTYPES, LLADA_MASK_ID, remote_class

    local = Path(model_dir or spec.path_or_id)
    if not (local / "config.json").is_file():
        raise FileNotFoundError(
            f"{local}/config.json: the planner needs the model's config (and its remote code), not its weights; "
            "pass --model-dir"
        )
    dtype = DTYPES[spec.dtype] if spec.dtype != "auto" else torch.bfloat16
    raw = json.loads((local / "config.json").read_text())
    if spec.kind == "tiny":
        cls, config = TinyDDMForMaskedLM, TinyDDMConfig.from_pretrained(local)
    else:
        cls, config, _ = remote_class(local, ("AutoModel", "AutoModelForCausalLM", "AutoModelForMaskedLM"))
    mask_id = int(raw.get("mask_token_id", LLADA_MASK_ID))

    def build() -> nn.Module:
        with default_dtype(dtype):
            return cls(config)

    return build, mask_id


# ------------------------------------------------------------------------------------------------ command line


def plan_run(run: Any, spec: Any, model_dir: str | Path | None, prompt_length: int, completion_length: int,
             hw: Hardware) -> StagePlan:  # fmt: skip
    """The GRPO stage of resolved run ``run`` (a ``GRPOConfig``) on ``hw``, its model from ``spec`` (a ``model:``
    section) and ``model_dir``; the engine from ``run.launch``. Refuses more processes than ``hw`` has GPUs."""
    processes = run.launch.num_processes
    if processes > hw.world:
        raise DoesNotFit(
            f"launch.num_processes = {processes}: the hardware has {hw.world} GPUs ({hw.nodes} x {hw.gpus_per_node})"
        )
    engine = engine_of(run.launch.config_file) if run.launch.launcher == "accelerate" else "ddp"
    build, mask_id = model_builder(spec, model_dir)
    return grpo_plan(build, run, mask_id, prompt_length, completion_length, hw, engine)


def require_fit(plan: StagePlan, memory_gib: float, key: str) -> None:
    """Raise :class:`DoesNotFit`, one line naming ``key``, when ``plan``'s peak exceeds ``memory_gib`` per GPU."""
    if plan.peak > memory_gib * GIB:
        parts = sorted(plan.parts.items(), key=lambda kv: -kv[1])[:3]
        shown = ", ".join(f"{k} {v / GIB:.1f}" for k, v in parts)
        raise DoesNotFit(
            f"{key} = {memory_gib:g}: {plan.stage} needs {plan.peak / GIB:.1f} GiB per GPU ({plan.engine}, "
            f"{plan.processes} processes; largest parts in GiB: {shown}); see python -m ddmrl.plan"
        )


def check_fits(run: Any, spec: Any, model_dir: str | Path, tok: Any, task: Any) -> StagePlan:
    """The grpo stage's check before it starts (``launch.gpu_memory_gib`` > 0): plan ``run`` at its first rollout
    batch's longest prompt and the task's completion length, and refuse (:class:`DoesNotFit`) a peak above the
    declared memory. ``model_dir``: the stage's model (a tiny model's own directory; a checkpoint's pointer is read
    through ``spec``)."""
    prompt_length = encode_prompts(tok, task, task.generate(run.num_prompts, seed=0)).shape[1]
    local = model_dir if spec.kind == "tiny" else None
    hw = Hardware(memory_gib=run.launch.gpu_memory_gib, gpus_per_node=run.launch.num_processes)
    plan = plan_run(run, spec, local, prompt_length, task.completion_length, hw)
    require_fit(plan, hw.memory_gib, "launch.gpu_memory_gib")
    return plan


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ddmrl.plan", description=__doc__.split("\n\n")[0])
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--profile", help="the profile to plan (default: the params file's)")
    p.add_argument("--method", help="a section of methods: (default: the first of grpo.methods)")
    p.add_argument("--model-dir", help="the model's config.json and remote code (default: model.path_or_id)")
    p.add_argument("--prompt-length", type=int, default=256, help="tokens of the longest prompt")
    p.add_argument("--completion-length", type=int, help="default: the run's first task's completion_length")
    for name, value in asdict(Hardware()).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    p.add_argument("--json", help="also write the plan here")
    args = p.parse_args(argv)

    cfg = config.load(args.params, args.profile)
    method = args.method or cfg.grpo.methods[0]
    run, task, _ = cfg.run(next(n for n in cfg.run_names() if n.startswith(f"{method}_")))
    length = args.completion_length or cfg.task_params.get(task, {}).get("completion_length")
    if not length:
        raise SystemExit(f"{args.params}: task_params.{task}.completion_length is not set; pass --completion-length")
    hw = Hardware(args.memory_gib, args.gpus_per_node, args.nodes, args.tflops, args.utilisation)
    try:
        plan = plan_run(run, cfg.model, args.model_dir, args.prompt_length, length, hw)
        print(plan.table())
        for note in plan.notes:
            print(f"- {note}")
        print(f"- FLOPs per rollout batch per GPU: {plan.flops_per_step:.3g}; at {hw.tflops:g} TFLOP/s x "
              f"{hw.utilisation:g}: {plan.seconds_per_step:.0f} s")  # fmt: skip
        if args.json:
            Path(args.json).write_text(json.dumps(asdict(plan) | {"hardware": asdict(hw)}, indent=1))
        require_fit(plan, hw.memory_gib, "--memory-gib")
    except DoesNotFit as e:
        print(f"does not fit: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
