"""CPU numerics pinned, so that a stage's float results are bit-identical on x86-64 machines, Intel and AMD alike, by
construction in the default mode. What was tried: an Intel Xeon (AVX-512) and two AMD EPYCs (Zen 4, Zen 5); what
each computed, and what it took: docs/pipeline.md, "Numerics".

PyTorch's CPU build picks its kernels by what the processor offers: ATen's vectorised kernels (softmax, layer norm,
reductions) by ``ATEN_CPU_CAPABILITY`` (AVX2 or AVX-512), oneDNN's by ``ONEDNN_MAX_CPU_ISA``, MKL's GEMM and its
vector maths (VML: ATen's ``exp``, ``log``, ``sin``, ``cos``, ``tanh``, ``sqrt``, ... on float tensors) by MKL's own
dispatch, which also looks at the vendor: MKL's conditional numerical reproducibility (``MKL_CBWR``) honours its
branches on Intel processors only (measured: on an AMD EPYC, VML's ``sin`` gives the same floats under every
``MKL_CBWR``, and other floats than an Intel Xeon's under ``COMPATIBLE``). Kernels of different vector widths or
blockings sum or round in another order, so the same training gives other weights on another CPU, and every figure
downstream moves. The thread count changes the order of float sums too (layer norm's backward, GEMM).

:func:`pin` fixes all of these before torch chooses its kernels: ``import ddmrl`` calls it, so a stage script, the
Snakemake workflow (whose jobs inherit the environment), a SLURM job and the tests all get it, and :func:`check`
(called by every stage, ``ddmrl.cli.run_stage``) applies the rest and refuses to run when torch (or numpy) chose its
kernels first. The mode comes from the environment variable ``DDMRL_NUMERICS``:

- ``portable`` (default): no MKL and no kernel that a library picks by vendor or cache size. ATen on its AVX2
  kernels (the same compiled code on every x86-64 CPU with AVX2), oneDNN off (its kernels' blocking follows the
  cache sizes), the matrix products of ``aten::mm``, ``addmm``, ``bmm`` and ``baddbmm`` on OpenBLAS's Haswell kernels
  (numpy's OpenBLAS with ``OPENBLAS_CORETYPE=Haswell``: the same AVX2 + FMA code and fixed blocking on Intel and
  AMD), the elementwise functions that ATen hands to MKL's VML (:data:`ELEMENTWISE`) on numpy's ufuncs pinned to
  their ``X86_V3`` (AVX2 + FMA) build, and, on a machine without CUDA, attention on ATen's composite path (its
  products are ``bmm``) instead of the CPU flash attention, whose per-block products call MKL. One thread per stage.
- ``compatible``: ATen and oneDNN on AVX2, every MKL call on MKL's ``COMPATIBLE`` branch (SSE2): reproducible on
  Intel CPUs among themselves (its VML differs on AMD), about twice as slow.
- ``avx2``: ATen and oneDNN on AVX2, ``MKL_CBWR=AVX2,STRICT``: reproducible among Intel CPUs only (kept to rerun
  the tables made in it).
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
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    },
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2,STRICT"},
    "compatible": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"},
    "native": {},
}
#: the mode when ``DDMRL_NUMERICS`` is not set
DEFAULT = "portable"
#: the OpenBLAS core whose kernels the portable mode's products run on (AVX2 + FMA; every x86-64 CPU since 2013/2015)
OPENBLAS_CORE = "Haswell"
#: numpy's dispatch targets above X86_V3 (AVX2 + FMA), which the portable mode turns off: its ufuncs' AVX-512 builds
#: round some functions otherwise (measured: float32 log2, float64 exp and log)
NUMPY_ABOVE_V3 = ("X86_V4", "AVX512_ICL", "AVX512_SPR")
#: ATen's float functions that torch's CPU build computes with MKL's VML (measured with perf: exp, log, log2, sin,
#: cos, tanh, sqrt; the others for good measure), each with the numpy ufunc the portable mode computes it with
ELEMENTWISE = {
    "exp": "exp",
    "log": "log",
    "log2": "log2",
    "log10": "log10",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "asin": "arcsin",
    "acos": "arccos",
    "atan": "arctan",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "sqrt": "sqrt",
}
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
        above = [f for f in NUMPY_ABOVE_V3 if numpy_features().get(f)]
        if above:
            raise NumericsError(
                f"numpy dispatches to its {above[0]} kernels ({MODE_VAR}=portable): import ddmrl before numpy, or set "
                f"{MODE_VAR}=compatible"
            )
        torch.backends.mkldnn.enabled = False
        route_products_to_openblas()
        route_elementwise_to_numpy()
        if not torch.cuda.is_available():  # the flag is global; GPU runs keep their flash attention
            torch.backends.cuda.enable_flash_sdp(False)


def openblas_core() -> str | None:
    """The core whose kernels numpy's OpenBLAS runs (threadpoolctl's ``architecture``), None without OpenBLAS."""
    import numpy  # noqa: F401  (loads its OpenBLAS)
    from threadpoolctl import threadpool_info

    return next((lib.get("architecture") for lib in threadpool_info() if lib["internal_api"] == "openblas"), None)


def numpy_features() -> dict[str, bool]:
    """The CPU features numpy's ufuncs dispatch on (after ``NPY_DISABLE_CPU_FEATURES``)."""
    from numpy._core._multiarray_umath import __cpu_features__

    return __cpu_features__


_ROUTED: dict = {}  # the torch.library registrations of the route_* functions, by name (once a process)


def route_products_to_openblas() -> None:
    """Register CPU kernels for ``aten::mm``, ``addmm``, ``bmm`` and ``baddbmm`` that compute the product with
    numpy's matmul (OpenBLAS, on the core :func:`pin` chose), overriding MKL's: the same code and blocking on every
    vendor. Autograd's formulas call these ops again, so backward passes take the same route; CUDA is untouched.
    Other ops that call BLAS themselves (the CPU flash attention, ``out=`` variants) stay on MKL's ``COMPATIBLE``
    branch. Idempotent."""
    if "products" in _ROUTED:
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
    _ROUTED["products"] = lib


def route_elementwise_to_numpy() -> None:
    """Register CPU kernels for the :data:`ELEMENTWISE` functions (each op, its in-place and its ``out=`` form) that
    compute them with numpy's ufuncs, overriding MKL's VML: numpy's ``X86_V3`` build is the same code on every vendor
    (:func:`pin` turns its AVX-512 builds off). Integer inputs become the default float dtype and half precision is
    computed in float32, as ATen does; autograd's formulas call these ops again. Idempotent."""
    if "elementwise" in _ROUTED:
        return
    import warnings

    import numpy as np
    import torch

    def kernels(ufunc):
        def compute(x: torch.Tensor) -> torch.Tensor:
            if not (x.is_floating_point() or x.is_complex()):
                x = x.to(torch.get_default_dtype())
            if x.dtype in (torch.bfloat16, torch.float16):
                return compute(x.float()).to(x.dtype)
            a = x.detach().resolve_conj().resolve_neg().numpy()
            return torch.from_numpy(ufunc(a, out=np.empty_like(a)))

        def out(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
            y = compute(x)
            return out.resize_(y.shape).copy_(y)

        return compute, lambda x: x.copy_(compute(x)), out

    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for op, name in ELEMENTWISE.items():
            functional, inplace, out = kernels(getattr(np, name))
            for overload, fn in ((op, functional), (f"{op}_", inplace), (f"{op}.out", out)):
                lib.impl(overload, fn, "CPU")
    _ROUTED["elementwise"] = lib
