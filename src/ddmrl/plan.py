"""Per-GPU memory and time of a run's training and sampling, planned before the GPUs are booked.

    python -m ddmrl.plan [--params params.yaml] [--profile NAME] [--method SECTION] [--model-dir DIR] \
        [--prompt-length 256] [--memory-gib 80] [--tflops 312] [--utilisation 0.35] [--gpus-per-node 8] [--nodes N]

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

Every family's real class is planned (``model.kind``; its module's ``AUTO_CLASSES`` and ``plan_view``: Dream's aligned
view, the block families' ``block_forward``, LLaDA 2.x's experts under balanced routing). The sampler is traced as it
runs for ``llada`` and, call for call, for ``block``; the others (``dream``, ``maskgit``, ``emerge``) pick masked
positions by value, which fake tensors cannot follow, and are traced as the llada sampler's plain passes over the
same canvas with the same steps and guidance (a note says so). The launch is resolved on the model too: FSDP's
block classes (its ``_no_split_modules``), the gradient checkpointing the model takes, the modules LoRA adapts.

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
import importlib
import json
import math
import sys
import weakref
from collections.abc import Callable, Iterator, Sequence
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
from ddmrl.models import FAMILIES
from ddmrl.models.lora import lora_targets
from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM
from ddmrl.rollout import sampler_kwargs
from ddmrl.samplers.block import block_attention, block_index, positions
from ddmrl.samplers.cache import cached_forward
from ddmrl.samplers.llada import generate
from ddmrl.tasks.encoding import encode_prompts
from ddmrl.training.distributed import checkpointing_of, fsdp_wrap_classes, prepare_model
from ddmrl.training.grpo import logp_guidance, view_logps

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
    inner = next((m for m in model.modules() if callable(getattr(m, "tie_weights", None))), None)  # in a view too
    if inner is not None:
        inner.tie_weights()  # registering each parameter anew on meta unties tied ones
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
                   vocab_size: int, reference: nn.Module | None = None, count: bool = True,
                   guidance: dict[str, Any] | None = None) -> TrainTrace:  # fmt: skip
    """One micro-step of the GRPO / SFT update on ``rows`` sequences: the policy's forward (autocast in bf16 when
    ``mixed_precision`` says so), the float32 log-softmax of the completion (``ddmrl.likelihood.token_logps``),
    backward, and AdamW's first step (which makes its two moments). On fake tensors (:func:`fake_tensors`) it plans,
    on real ones it measures; ``count=False`` runs it uncounted (bytes and FLOPs 0), to time it. ``reference``: a
    separate frozen reference model (full fine-tuning), counted as weights. ``guidance``: ``token_logps``' keywords
    (``ddmrl.training.grpo.logp_guidance``: a block model's ``block_length``, CFG)."""
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
            logp = token_logps(policy, ids, ids[:, prompt_length:], **(guidance or {}))  # [rows, L]
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
                mixed_precision: str, vocab_size: int, count: bool = True,
                guidance: dict[str, Any] | None = None) -> int:  # fmt: skip
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
            view_logps(model, inputs, inputs[0, :, prompt_length:], **(guidance or {}))  # [V, N, L]
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


def trace_block_sampling(model: nn.Module, rows: int, prompt_length: int, completion_length: int, block_length: int,
                         steps: int, vocab_size: int, count: bool = True, shortcut: bool = True,
                         kv_cache: bool = True) -> SampleTrace:  # fmt: skip
    """The model calls of ddmrl's block sampler (``ddmrl.samplers.block.generate``: its exact cache, blocks aligned at
    the completion, ``steps`` passes per block) on ``rows`` prompts, without gradients: the prompt stored in one call,
    then per block ``steps`` passes over the block against the cache, each pass's logits in float32 (what the sampler
    proposes from), and one call that stores the block. Without ``kv_cache`` (``sampler.options.block.kv_cache:
    false``) each pass evaluates the canvas up to the block's end and nothing is stored. The sampler's choice of
    positions reads token values, which fake tensors do not have; the calls and their shapes do not depend on it.
    The passes over one block have equal shapes, hence equal bytes and FLOPs: with ``shortcut`` one is traced and its
    FLOPs counted ``steps`` times."""
    device = next(model.parameters()).device
    p, t = prompt_length, prompt_length + completion_length
    ids = torch.randint(0, vocab_size, (rows, t), device=device)
    valid = torch.ones(rows, t, dtype=torch.bool, device=device)
    pos, blocks = positions(valid), block_index(p, t, block_length, "completion").to(device)  # [N, T], [T]
    counter = _counter(count)
    for w in model.parameters():
        counter.add(w)
    base, nfe = counter.live, 0

    def call(lo: int, hi: int, cache: Any, store: bool) -> tuple[torch.Tensor, Any]:
        att = block_attention(blocks[lo:hi], blocks[:hi], valid[:, :hi])  # [N, hi - lo, hi]
        return model.block_forward(ids[:, lo:hi], pos[:, lo:hi], att, cache, store)

    def recomputed(lo: int, hi: int) -> torch.Tensor:
        att = block_attention(blocks[:hi], blocks[:hi], valid[:, :hi])  # [N, hi, hi]
        return model.block_forward(ids[:, :hi], pos[:, :hi], att, None, False)[0][:, lo:hi]

    with torch.no_grad(), counter:
        cache = None
        if kv_cache:
            _, cache = call(0, p, None, True)
            nfe += 1
        for lo in range(p, t, block_length):
            hi = min(lo + block_length, t)
            before = counter.flops
            for _ in range(1 if shortcut else steps):
                logits = call(lo, hi, cache, False)[0] if kv_cache else recomputed(lo, hi)  # [N, K, V]
                logits = logits.float().clone()
                del logits
            if shortcut:
                counter.flops += (steps - 1) * (counter.flops - before)
            nfe += steps
            if kv_cache and hi < t:
                _, cache = call(lo, hi, cache, True)
                nfe += 1
        kv = _bytes([x for x in tree_flatten(cache)[0] if isinstance(x, torch.Tensor)]) if count and kv_cache else 0
        del cache
    return SampleTrace(counter.peak - base, counter.flops, kv, nfe)


def trace_sampler(model: nn.Module, sampler: Any, rows: int, prompt_length: int, completion_length: int, mask_id: int,
                  vocab_size: int) -> tuple[SampleTrace, str]:  # fmt: skip
    """One rollout call of ``sampler`` (a ``sampler:`` section) on ``model``, and a note saying what was traced: the
    llada sampler as configured (:func:`trace_sampling`), the block sampler's model calls
    (:func:`trace_block_sampling`), any other sampler as the llada sampler's plain passes over the same canvas (one
    block, no cache) with its steps, temperature and guidance: a sampler that picks masked positions by value cannot
    run on fake tensors, and one full pass per step is what Dream's, MaskGIT's and emerge's loops evaluate."""
    kwargs = sampler_kwargs(sampler, completion_length)
    shape = f"{rows} rows, prompt {prompt_length} + completion {completion_length} tokens"
    if sampler.name == "llada":
        trace = trace_sampling(model, rows, prompt_length, completion_length, mask_id, kwargs, vocab_size)
        return trace, f"sampler llada, {shape}: {kwargs}"
    if sampler.name == "block":
        cached = kwargs.get("kv_cache", True)
        trace = trace_block_sampling(model, rows, prompt_length, completion_length, kwargs["block_length"],
                                     kwargs["steps"], vocab_size, kv_cache=cached)  # fmt: skip
        how = "" if cached else ", no KV cache (the canvas recomputed at every pass)"
        return trace, f"sampler block, {shape}: blocks of {kwargs['block_length']}, {kwargs['steps']} passes each{how}"
    stand_in = {"steps": kwargs["steps"], "temperature": sampler.temperature, "block_length": completion_length,
                "kv_cache": "none", "cfg_scale": sampler.cfg_scale}  # fmt: skip
    trace = trace_sampling(model, rows, prompt_length, completion_length, mask_id, stand_in, vocab_size)
    return trace, f"sampler {sampler.name}, {shape}: traced as the llada sampler's plain passes {stand_in}"


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
    #: the launch resolved on the model: FSDP's block classes (ddmrl.training.distributed.fsdp_wrap_classes; empty
    #: under DDP and ZeRO), how it recomputes activations (None: it keeps them), the modules LoRA adapts
    wrap_classes: list[str] = field(default_factory=list)
    checkpointing: str | None = None
    lora_targets: list[str] = field(default_factory=list)

    def table(self) -> str:
        rows = [f"| {k} | {v / GIB:.2f} |" for k, v in self.parts.items()]
        return "\n".join(
            [f"**{self.stage}** ({self.engine}, {self.processes} processes)", "", "| part | GiB per GPU |",
             "|---|---:|", *rows, f"| **peak** | **{self.peak / GIB:.2f}** |"]
        )  # fmt: skip


def largest_block_bytes(model: nn.Module, classes: Sequence[str] = ()) -> int:
    """Bytes of the largest module of ``classes`` (FSDP's wrapped blocks), else of the largest direct child of the
    model's block list (what ZeRO-3 / FSDP gather whole)."""
    if classes:
        return max(_bytes(list(m.parameters())) for m in model.modules() if type(m).__name__ in classes)
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
    model = on_meta(build)
    vocab = model.get_input_embeddings().num_embeddings
    # a full fine-tune keeps a frozen copy as the reference (the stage's deepcopy, in the dtype the model loads in)
    reference = on_meta(build) if not cfg.lora.r and cfg.beta and cfg.kl_target == "ref" else None
    targets = lora_targets(model, cfg.lora.target_modules) if cfg.lora.r else []
    policy = prepare_model(model, cfg.mixed_precision, cfg.gradient_checkpointing, cfg.lora)
    wrap = fsdp_wrap_classes(policy) if engine == "fsdp" else []
    gathered = largest_block_bytes(policy, wrap)
    guidance = logp_guidance(cfg, mask_id)
    with fake_tensors():
        sample, sampled = trace_sampler(to_fake(on_meta(build)), cfg.sampler, local_rows, prompt_length,
                                        completion_length, mask_id, vocab)  # fmt: skip
        policy = to_fake(policy)
        logps = trace_logps(policy, cfg.num_iterations, local_rows, prompt_length, completion_length,
                            cfg.mixed_precision, vocab, guidance=guidance)  # fmt: skip
        train = trace_training(policy, micro_rows, prompt_length, completion_length, cfg.mixed_precision, vocab,
                               reference and to_fake(reference), guidance=guidance)  # fmt: skip
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
    checkpointing = checkpointing_of(policy)
    notes = [
        f"rows per process: {local_rows} sampled, {micro_rows} per micro-batch; {sampled}",
        f"trainable parameters: {train.trainable_params / 1e6:.1f} M"
        + (f" (LoRA r {cfg.lora.r} on {len(targets)} modules)" if targets else ""),
        f"gradient checkpointing: {checkpointing or 'off'}",
    ]
    if wrap:
        notes.append(f"FSDP wraps each {', '.join(wrap)} (the model's _no_split_modules)")
    seconds = flops / (hw.tflops * 1e12 * hw.utilisation)
    return StagePlan("grpo", engine, processes, parts, peak, flops, seconds, notes, wrap, checkpointing, targets)


# ------------------------------------------------------------------------------------------------ models


#: the auto classes tried in config.json's auto_map when a family's module declares none (``AUTO_CLASSES``)
AUTO_CLASSES = ("AutoModel", "AutoModelForCausalLM", "AutoModelForMaskedLM")


def model_builder(spec: Any, model_dir: str | Path | None = None) -> tuple[Callable[[], nn.Module], int]:
    """``(build, mask_id)``: ``build()`` instantiates the model class of ``spec`` (a ``model:`` section) from its
    config alone, in the spec's dtype, no weights read, as the stages see it (the family module's ``plan_view``, if
    it declares one). ``model_dir``: where config.json (and its remote code) is, if not ``spec.path_or_id``. The
    class: TinyDDM's, MMaDA's from its checkout (``mmada_code``), else the checkpoint's own code under the first of
    the family module's ``AUTO_CLASSES`` in its auto_map."""
    # a real model's classes (and the hub's checks): the stages of a real model name the module in their uses
    from ddmrl.models.adapters import DTYPES, LLADA_MASK_ID, remote_class
    from ddmrl.models.mmada import import_mmada

    local = Path(model_dir or spec.path_or_id)
    if not (local / "config.json").is_file():
        raise FileNotFoundError(
            f"{local}/config.json: the planner needs the model's config (and its remote code), not its weights; "
            "pass --model-dir"
        )
    dtype = DTYPES[spec.dtype] if spec.dtype != "auto" else torch.bfloat16
    raw = json.loads((local / "config.json").read_text())
    family = importlib.import_module(FAMILIES.module(spec.kind))
    if spec.kind == "tiny":
        cls, config = TinyDDMForMaskedLM, TinyDDMConfig.from_pretrained(local)
    elif spec.kind == "mmada":
        cls = import_mmada(spec.mmada_code).MMadaModelLM
        config = cls.config_class.from_pretrained(local)
        config.use_cache = bool(raw.get("use_cache", False))  # LLaDA's forward reads it; transformers 5 drops it
    else:
        cls, config, _ = remote_class(local, getattr(family, "AUTO_CLASSES", AUTO_CLASSES))
    mask_id = int(raw.get("mask_token_id", getattr(family, "MASK_ID", LLADA_MASK_ID)))
    view = getattr(family, "plan_view", None)

    def build() -> nn.Module:
        with default_dtype(dtype):
            model = cls(config)
        return model if view is None else view(model, raw)

    return build, mask_id


# ------------------------------------------------------------------------------------------------ command line


def plan_run(run: Any, spec: Any, model_dir: str | Path | None, prompt_length: int, completion_length: int,
             hw: Hardware) -> StagePlan:  # fmt: skip
    """The GRPO stage of resolved run ``run`` (a ``GRPOConfig``) on ``hw``, its model from ``spec`` (a ``model:``
    section) and ``model_dir``; the engine from ``run.launch``. Refuses more processes than ``hw`` has GPUs, and a
    multi-node launch (``launch.num_machines``) whose nodes or GPUs per node ``hw`` does not have."""
    processes, machines = run.launch.num_processes, run.launch.num_machines
    if processes > hw.world:
        raise DoesNotFit(
            f"launch.num_processes = {processes}: the hardware has {hw.world} GPUs ({hw.nodes} x {hw.gpus_per_node})"
        )
    if machines > 1 and (machines > hw.nodes or processes // machines > hw.gpus_per_node):
        raise DoesNotFit(
            f"launch.num_machines = {machines}: {processes // machines} processes on each of {machines} nodes; the "
            f"hardware has {hw.nodes} nodes of {hw.gpus_per_node} GPUs"
        )
    engine = engine_of(run.launch.config_file) if run.launch.launcher == "accelerate" else "ddp"
    build, mask_id = model_builder(spec, model_dir)
    return grpo_plan(build, run, mask_id, prompt_length, completion_length, hw, engine)


def require_fit(plan: StagePlan, memory_gib: float, key: str, nodes: int = 1) -> None:
    """Raise :class:`DoesNotFit`, one line naming ``key``, when ``plan``'s peak exceeds ``memory_gib`` per GPU (the
    plan of one GPU of ``nodes`` nodes)."""
    if plan.peak > memory_gib * GIB:
        parts = sorted(plan.parts.items(), key=lambda kv: -kv[1])[:3]
        shown = ", ".join(f"{k} {v / GIB:.1f}" for k, v in parts)
        on = f" on {nodes} nodes" if nodes > 1 else ""
        raise DoesNotFit(
            f"{key} = {memory_gib:g}: {plan.stage} needs {plan.peak / GIB:.1f} GiB per GPU ({plan.engine}, "
            f"{plan.processes} processes{on}; largest parts in GiB: {shown}); see python -m ddmrl.plan"
        )


def check_fits(run: Any, spec: Any, model_dir: str | Path, tok: Any, task: Any) -> StagePlan:
    """The grpo stage's check before it starts (``launch.gpu_memory_gib`` > 0): plan ``run`` at its first rollout
    batch's longest prompt and the task's completion length, and refuse (:class:`DoesNotFit`) a peak above the
    declared memory. ``model_dir``: the stage's model (a tiny model's own directory; a checkpoint's pointer is read
    through ``spec``)."""
    prompt_length = encode_prompts(tok, task, task.generate(run.num_prompts, seed=0)).shape[1]
    local = model_dir if spec.kind == "tiny" else None
    machines = run.launch.num_machines
    hw = Hardware(run.launch.gpu_memory_gib, gpus_per_node=run.launch.num_processes // machines, nodes=machines)
    plan = plan_run(run, spec, local, prompt_length, task.completion_length, hw)
    require_fit(plan, hw.memory_gib, "launch.gpu_memory_gib", hw.nodes)
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
        default = None if name == "nodes" else value  # nodes: the run's launch.num_machines
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=default)
    p.add_argument("--json", help="also write the plan here")
    args = p.parse_args(argv)

    cfg = config.load(args.params, args.profile)
    image = not cfg.tasks  # an image-only profile (paper_mmada_geneval): its image runs
    method = args.method or (cfg.image.methods if image else cfg.grpo.methods)[0]
    name = next((n for n in cfg.run_names() if n.startswith(f"{method}_")), None)
    if name is None:
        raise SystemExit(f"{args.params}: no run of method section {method!r}; runs are: {', '.join(cfg.run_names())}")
    run, task, _ = cfg.run(name)
    # an image run: the image model, its image tokens as the completion (text runs: the task's completion length)
    spec, key = (cfg.image.model, "num_image_tokens") if task in cfg.image.tasks else (cfg.model, "completion_length")
    params = (cfg.image.task_params if task in cfg.image.tasks else cfg.task_params).get(task, {})
    length = args.completion_length or params.get(key)
    if not length:
        raise SystemExit(f"{args.params}: task_params.{task}.{key} is not set; pass --completion-length")
    nodes = args.nodes or run.launch.num_machines
    hw = Hardware(args.memory_gib, args.gpus_per_node, nodes, args.tflops, args.utilisation)
    try:
        plan = plan_run(run, spec, args.model_dir, args.prompt_length, length, hw)
        print(plan.table())
        for note in plan.notes:
            print(f"- {note}")
        print(f"- FLOPs per rollout batch per GPU: {plan.flops_per_step:.3g}; at {hw.tflops:g} TFLOP/s x "
              f"{hw.utilisation:g}: {plan.seconds_per_step:.0f} s")  # fmt: skip
        if args.json:
            Path(args.json).write_text(json.dumps(asdict(plan) | {"hardware": asdict(hw)}, indent=1))
        require_fit(plan, hw.memory_gib, "--memory-gib", hw.nodes)
    except DoesNotFit as e:
        print(f"does not fit: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
