"""CPU numerics pinned, so that a stage's float results are bit-identical on every x86-64 machine.

PyTorch's CPU build picks its kernels by what the processor offers: ATen's vectorised kernels (softmax, layer norm,
reductions, attention) by ``ATEN_CPU_CAPABILITY`` (AVX2 or AVX-512), oneDNN's by ``ONEDNN_MAX_CPU_ISA``, MKL's GEMM
by its own dispatch (``MKL_CBWR``, Intel's conditional numerical reproducibility). Kernels of different vector
widths sum in a different order, so the same pre-training gives other weights on another CPU, and every figure
downstream moves. The thread count changes the order of float sums too (layer norm's backward, MKL's GEMM).

:func:`pin` fixes all of these before torch chooses its kernels: ``import ddmrl`` calls it, so a stage script, the
Snakemake workflow (whose jobs inherit the environment), a SLURM job and the tests all get it, and :func:`check`
(called by every stage, ``ddmrl.cli.run_stage``) refuses to run when torch chose its kernels first. The mode comes
from the environment variable ``DDMRL_NUMERICS``:

- ``avx2`` (default): every library on its AVX2 kernels, one thread per stage. Measured on an AMD EPYC with AVX-512
  (Zen 4): the same weights as an AVX2 machine's kernels give, and no slower than the native AVX-512 ones
  (docs/pipeline.md#numerics).
- ``compatible``: ``avx2``, and MKL's ``COMPATIBLE`` branch (SSE2). MKL honours its ``AVX2`` branch on Intel
  processors only; between Intel and AMD processors only this branch is documented to agree. Slower
  (docs/pipeline.md#numerics).
- ``native``: nothing pinned (the environment's own ``OMP_NUM_THREADS``, ``MKL_CBWR``, ... apply); fastest on some
  machines, reproducible only on one kind of CPU.

A leaf: imports nothing but ``os``; torch only inside :func:`check`.
"""

from __future__ import annotations

import os

#: the environment variable that selects the mode
MODE_VAR = "DDMRL_NUMERICS"
#: the variables each mode sets (overriding the environment's: an inherited MKL_CBWR=AUTO would silently undo it)
MODES: dict[str, dict[str, str]] = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2,STRICT"},
    "compatible": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"},
    "native": {},
}
#: intra-op threads of every stage in the pinned modes (one: every machine has it, and the DAG's jobs run side by side)
THREADS = 1


class NumericsError(RuntimeError):
    """The numerics cannot be pinned as selected (one line: what, and how to fix it)."""


def mode() -> str:
    """The selected mode; an unknown value is refused with the variable's name."""
    value = os.environ.get(MODE_VAR, "avx2")
    if value not in MODES:
        raise NumericsError(f"{MODE_VAR}={value!r}: expected one of {', '.join(MODES)}")
    return value


def pin() -> dict[str, str]:
    """Set the selected mode's variables in ``os.environ`` (before torch chooses its kernels); returns them. An
    unknown mode sets nothing here (``import ddmrl`` never fails on it); :func:`check` refuses it."""
    env = MODES.get(os.environ.get(MODE_VAR, "avx2"), {})
    os.environ.update(env)
    return env


def check() -> None:
    """Apply the thread count, and refuse (:class:`NumericsError`) when torch's CPU kernels are not the pinned
    ones: torch ran a kernel before :func:`pin`, e.g. it was imported and used before ``ddmrl``."""
    import torch

    if mode() == "native":
        if "OMP_NUM_THREADS" in os.environ:  # Snakemake sets it to the rule's threads
            torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))
        return
    torch.set_num_threads(THREADS)
    chosen = torch.backends.cpu.get_cpu_capability()
    if chosen not in ("AVX2", "DEFAULT"):  # DEFAULT: a CPU without AVX2, where ATen falls back to scalar kernels
        raise NumericsError(
            f"torch chose its {chosen} CPU kernels before ddmrl pinned them ({MODE_VAR}={mode()}): import ddmrl "
            f"before running torch code, or set {MODE_VAR}=native"
        )
