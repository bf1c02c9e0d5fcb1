"""CPU numerics pinned, so that a stage's float results are bit-identical on x86-64 machines, Intel and AMD alike, by
construction in the default mode. What was tried: an Intel Xeon (AVX-512) and an AMD EPYC (Zen 4), which computed
different floats in the earlier ``avx2`` mode; ``portable`` has run on the Intel Xeon only (docs/pipeline.md,
"Numerics").

PyTorch's CPU build picks its kernels by what the processor offers: ATen's vectorised kernels (softmax, layer norm,
reductions, attention) by ``ATEN_CPU_CAPABILITY`` (AVX2 or AVX-512), oneDNN's by ``ONEDNN_MAX_CPU_ISA``, MKL's GEMM
by its own dispatch, which also looks at the vendor: MKL's conditional numerical reproducibility (``MKL_CBWR``)
honours its ``AVX2`` branch on Intel processors only, and runs its automatic branch on others. Kernels of different
vector widths or blockings sum in a different order, so the same pre-training gives other weights on another CPU,
and every figure downstream moves. The thread count changes the order of float sums too (layer norm's backward,
GEMM).

:func:`pin` fixes all of these before torch chooses its kernels: ``import ddmrl`` calls it, so a stage script, the
Snakemake workflow (whose jobs inherit the environment), a SLURM job and the tests all get it, and :func:`check`
(called by every stage, ``ddmrl.cli.run_stage``) applies the rest and refuses to run when torch (or numpy's
OpenBLAS) chose its kernels first. The mode comes from the environment variable ``DDMRL_NUMERICS``:

- ``portable`` (default): no kernel that a library picks by vendor or cache size. ATen on its AVX2 kernels (the same
  compiled code on every x86-64 CPU with AVX2), oneDNN off (its kernels' blocking follows the cache sizes), the
  matrix products of ``aten::mm``, ``addmm``, ``bmm`` and ``baddbmm`` on OpenBLAS's Haswell kernels (numpy's
  OpenBLAS with ``OPENBLAS_CORETYPE=Haswell``: the same AVX2 + FMA code and fixed blocking on Intel and AMD), and
  whatever else still calls MKL (the CPU flash attention's small products, LAPACK) on MKL's ``COMPATIBLE`` branch,
  the one MKL documents to agree between Intel and other processors. One thread per stage. About as fast as
  ``avx2`` (docs/pipeline.md#numerics).
- ``compatible``: ATen and oneDNN on AVX2, every product on MKL's ``COMPATIBLE`` branch (SSE2): agrees across
  vendors by MKL's documentation, about twice as slow.
- ``avx2``: ATen and oneDNN on AVX2, ``MKL_CBWR=AVX2,STRICT``: reproducible among Intel CPUs only (the default
  until the main job's tables were found to differ on an Intel Xeon from an AMD EPYC's; kept to rerun those).
- ``native``: nothing pinned (the environment's own ``OMP_NUM_THREADS``, ``MKL_CBWR``, ... apply); fastest on some
  machines, reproducible only on one kind of CPU.

A leaf: imports nothing but ``os`` at module level; torch, numpy and threadpoolctl only inside :func:`check`.
"""

from __future__ import annotations

import os

#: the environment variable that selects the mode
MODE_VAR = "DDMRL_NUMERICS"
#: the variables each mode sets (overriding the environment's: an inherited MKL_CBWR=AUTO would silently undo it)
MODES: dict[str, dict[str, str]] = {
    "portable": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_CBWR": "COMPATIBLE",
        "OPENBLAS_CORETYPE": "Haswell",
        "OPENBLAS_NUM_THREADS": "1",
    },
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2,STRICT"},
    "compatible": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"},
    "native": {},
}
#: the mode when ``DDMRL_NUMERICS`` is not set
DEFAULT = "portable"
#: the OpenBLAS core whose kernels the portable mode's products run on (AVX2 + FMA; every x86-64 CPU since 2013/2015)
OPENBLAS_CORE = "Haswell"
#: intra-op threads of every stage in the pinned modes (one: every machine has it, and the DAG's jobs run side by side)
THREADS = 1


class NumericsError(RuntimeError):
    """The numerics cannot be pinned as selected (one line: what, and how to fix it)."""


def mode() -> str:
    """The selected mode; an unknown value is refused with the variable's name."""
    value = os.environ.get(MODE_VAR, DEFAULT)
    if value not in MODES:
        raise NumericsError(f"{MODE_VAR}={value!r}: expected one of {', '.join(MODES)}")
    return value


def pin() -> dict[str, str]:
    """Set the selected mode's variables in ``os.environ`` (before torch chooses its kernels); returns them. An
    unknown mode sets nothing here (``import ddmrl`` never fails on it); :func:`check` refuses it."""
    env = MODES.get(os.environ.get(MODE_VAR, DEFAULT), {})
    os.environ.update(env)
    return env


def check() -> None:
    """Apply the thread count (and, in the portable mode, oneDNN off and the products on OpenBLAS), and refuse
    (:class:`NumericsError`) when torch's CPU kernels are not the pinned ones: torch ran a kernel before :func:`pin`,
    e.g. it was imported and used before ``ddmrl`` (likewise numpy, whose OpenBLAS reads its core when it loads)."""
    import torch

    selected = mode()
    if selected == "native":
        if "OMP_NUM_THREADS" in os.environ:  # Snakemake sets it to the rule's threads
            torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))
        return
    torch.set_num_threads(THREADS)
    chosen = torch.backends.cpu.get_cpu_capability()
    allowed = ("AVX2",) if selected == "portable" else ("AVX2", "DEFAULT")  # DEFAULT: no AVX2, scalar kernels
    if chosen not in allowed:
        if chosen == "DEFAULT":
            raise NumericsError(f"{MODE_VAR}=portable needs a CPU with AVX2 and FMA: set {MODE_VAR}=compatible")
        raise NumericsError(
            f"torch chose its {chosen} CPU kernels before ddmrl pinned them ({MODE_VAR}={selected}): import ddmrl "
            f"before running torch code, or set {MODE_VAR}=native"
        )
    if selected == "portable":
        core = openblas_core()
        if core != OPENBLAS_CORE:
            raise NumericsError(
                f"numpy's OpenBLAS runs its {core} kernels, not {OPENBLAS_CORE} ({MODE_VAR}=portable): import ddmrl "
                f"before numpy, or set {MODE_VAR}=compatible"
            )
        torch.backends.mkldnn.enabled = False
        route_products_to_openblas()


def openblas_core() -> str | None:
    """The core whose kernels numpy's OpenBLAS runs (threadpoolctl's ``architecture``), None without OpenBLAS."""
    import numpy  # noqa: F401  (loads its OpenBLAS)
    from threadpoolctl import threadpool_info

    return next((lib.get("architecture") for lib in threadpool_info() if lib["internal_api"] == "openblas"), None)


_ROUTED: list = []  # the torch.library registrations of route_products_to_openblas (once a process)


def route_products_to_openblas() -> None:
    """Register CPU kernels for ``aten::mm``, ``addmm``, ``bmm`` and ``baddbmm`` that compute the product with
    numpy's matmul (OpenBLAS, on the core :func:`pin` chose), overriding MKL's: the same code and blocking on every
    vendor. Autograd's formulas call these ops again, so backward passes take the same route; CUDA is untouched.
    Other ops that call BLAS themselves (the CPU flash attention, ``out=`` variants) stay on MKL's ``COMPATIBLE``
    branch. Idempotent."""
    if _ROUTED:
        return
    import warnings

    import numpy as np
    import torch

    def product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # [..., n, k] @ [..., k, m] -> [..., n, m]
        if a.dtype != b.dtype:
            raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}")
        if a.shape[-1] != b.shape[-2]:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({tuple(a.shape)} and {tuple(b.shape)})")
        if a.dtype in (torch.bfloat16, torch.float16):  # numpy has neither: float32 accumulation, as ATen's
            return product(a.float(), b.float()).to(a.dtype)
        arrays = (t.detach().resolve_conj().resolve_neg().numpy() for t in (a, b))
        return torch.from_numpy(np.matmul(*arrays))

    def addmm(c, a, b, *, beta=1, alpha=1):  # addmm and baddbmm: beta * c + alpha * (a @ b)
        p = product(a, b)
        if alpha != 1:
            p.mul_(alpha)
        return p.add_(c, alpha=beta) if beta != 0 else p

    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": what this is for
        warnings.simplefilter("ignore", UserWarning)
        for name, fn in (("mm", product), ("bmm", product), ("addmm", addmm), ("baddbmm", addmm)):
            lib.impl(name, fn, "CPU")
    _ROUTED.append(lib)
