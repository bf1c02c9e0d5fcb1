"""ddmrl.numerics: the CPU numerics every stage runs on (its effect on weights: tests/stages/
test_reproducible_weights.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from ddmrl import numerics

PROBE = "import torch; torch.zeros(2).sum(); print(torch.backends.cpu.get_cpu_capability())"


PINNED = {var for env in numerics.MODES.values() for var in env}


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what ``import ddmrl`` set in it."""
    return {k: v for k, v in os.environ.items() if k not in PINNED} | extra


def run(code: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(**extra))


NATIVE = run(PROBE).stdout.strip()
needs_avx2 = pytest.mark.skipif(NATIVE not in ("AVX2", "AVX512"), reason=f"this CPU's kernels are {NATIVE}")


@needs_avx2
def test_importing_ddmrl_first_pins_torchs_kernels_to_avx2():
    assert run("import ddmrl; " + PROBE).stdout.strip() == "AVX2"


@needs_avx2
def test_native_mode_leaves_the_machines_kernels():
    assert run("import ddmrl; " + PROBE, DDMRL_NUMERICS="native").stdout.strip() == NATIVE


@pytest.mark.parametrize("mode", list(numerics.MODES))
def test_each_mode_sets_its_variables_and_overrides_the_environments(monkeypatch, mode):
    monkeypatch.setenv(numerics.MODE_VAR, mode)
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    assert numerics.pin() == numerics.MODES[mode]
    assert os.environ["MKL_CBWR"] == numerics.MODES[mode].get("MKL_CBWR", "AUTO")


def test_an_unknown_mode_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(numerics.MODE_VAR, "fast")
    assert numerics.pin() == {}  # import ddmrl never fails on it
    with pytest.raises(
        numerics.NumericsError, match="DDMRL_NUMERICS='fast': expected one of portable, avx2, compatible, native"
    ):
        numerics.check()


def test_check_runs_one_thread_in_the_pinned_modes(monkeypatch):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # what Snakemake sets: ignored, the count is part of the numerics
        numerics.check()
        assert torch.get_num_threads() == numerics.THREADS == 1
        monkeypatch.setenv(numerics.MODE_VAR, "native")
        numerics.check()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(NATIVE != "AVX512", reason="needs a CPU whose native kernels are wider than AVX2")
def test_a_stage_refuses_to_run_when_torch_chose_its_kernels_first(tmp_path):
    """torch used before ddmrl: a stage would compute on the AVX-512 kernels, so it stops with one line."""
    code = "import torch; torch.zeros(2).sum(); from ddmrl.cli import run_stage; run_stage(lambda: print('ran'))"
    out = run(code)
    assert out.returncode == 2 and "ran" not in out.stdout
    assert out.stderr.strip().splitlines() == [
        "error: torch chose its AVX512 CPU kernels before ddmrl pinned them (DDMRL_NUMERICS=portable): import ddmrl "
        "before running torch code, or set DDMRL_NUMERICS=native"
    ]


NATIVE_OPENBLAS = run("import numpy, threadpoolctl; print(threadpoolctl.threadpool_info()[0]['architecture'])").stdout
portable = pytest.mark.skipif(numerics.mode() != "portable", reason="the tests run in another numerics mode")

#: a TinyDDM training step, a forward pass and a draw, for the kernel census below
STEP = """
import ddmrl, torch
ddmrl.numerics.check()
from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM
torch.manual_seed(0)
m = TinyDDMForMaskedLM(TinyDDMConfig(vocab_size=35, max_position_embeddings=64, position_embedding="rope"))
x = torch.randint(0, 35, (8, 48))
m(x, labels=x).loss.backward()
torch.optim.AdamW(m.parameters()).step()
with torch.no_grad():
    torch.multinomial(m(x).logits.softmax(-1).flatten(0, 1), 1)
"""


def test_the_portable_mode_runs_no_kernel_that_a_library_picks_by_vendor():
    """What makes it portable, counted by MKL's and oneDNN's own logs: no oneDNN primitive and no MKL product runs
    (the model's products are on OpenBLAS, attention on ATen's composite path; MKL's VML, which MKL_VERBOSE does not
    log, is replaced op by op: test_the_routed_elementwise_functions_are_numpys_ufuncs)."""
    out = run(STEP, DDMRL_NUMERICS="portable", MKL_VERBOSE="1", ONEDNN_VERBOSE="1")
    assert out.returncode == 0, out.stderr[-2000:]
    log = out.stdout + out.stderr
    assert "primitive,exec" not in log
    assert "MKL_VERBOSE SGEMM" not in log and "MKL_VERBOSE SGEMV" not in log
    compatible = run(STEP, DDMRL_NUMERICS="compatible", MKL_VERBOSE="1")  # the census sees MKL where it runs
    assert "MKL_VERBOSE SGEMM" in compatible.stdout + compatible.stderr


@portable
def test_the_routed_elementwise_functions_are_numpys_ufuncs():
    """Every ELEMENTWISE function, functional, in place and out=, is numpy's ufunc bit for bit (float32 and float64),
    with ATen's dtype rules (integers to float32, bfloat16 through float32), on strided and 0-d inputs; autograd's
    formulas take the same route (sin's gradient is the routed cos); numpy runs no build above X86_V3; on a machine
    without CUDA the CPU flash attention is off."""
    import numpy as np

    assert not any(numerics.numpy_features().get(f) for f in numerics.NUMPY_ABOVE_V3)
    g = torch.Generator().manual_seed(0)
    for op, name in numerics.ELEMENTWISE.items():
        ufunc = getattr(np, name)
        for dtype in (torch.float32, torch.float64):
            x = torch.rand(37, 11, generator=g, dtype=dtype) * 0.9 + 0.05  # inside every function's domain
            want = torch.from_numpy(ufunc(x.numpy()))
            assert torch.equal(getattr(torch, op)(x), want), op
            assert torch.equal(getattr(torch, op)(x.T), want.T), op  # strided
            assert torch.equal(getattr(x.clone(), f"{op}_")(), want), op
            out = torch.empty(0, dtype=dtype)
            assert torch.equal(getattr(torch, op)(x, out=out), want) and torch.equal(out, want), op
        assert getattr(torch, op)(torch.tensor(0.5)).shape == ()
    assert torch.exp(torch.tensor([1, 2])).dtype == torch.float32
    half = torch.rand(5, generator=g).bfloat16()
    assert torch.equal(torch.exp(half), torch.exp(half.float()).bfloat16())
    w = torch.rand(6, generator=g, requires_grad=True)
    w.sin().sum().backward()
    assert torch.equal(w.grad, torch.from_numpy(np.cos(w.detach().numpy())))
    if not torch.cuda.is_available():
        assert not torch.backends.cuda.flash_sdp_enabled()


@portable
def test_the_routed_products_are_openblas_haswell_kernels_with_atens_semantics():
    """mm, addmm, bmm and baddbmm on CPU are numpy's matmul bit for bit, with ATen's beta/alpha, broadcasting, dtype
    rules and errors; autograd's formulas take the same route."""
    assert numerics.openblas_core() == numerics.OPENBLAS_CORE
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(*s, generator=g) for s in ((37, 19), (19, 23), (23,)))
    assert torch.equal(torch.mm(a, b), torch.from_numpy(a.numpy() @ b.numpy()))
    assert torch.equal(torch.mm(a, b.T.contiguous().T), torch.mm(a, b))  # a transposed view: the same product
    assert torch.equal(torch.addmm(c, a, b, beta=0.5, alpha=2.0), torch.mm(a, b) * 2.0 + c * 0.5)
    assert torch.equal(torch.addmm(torch.full((23,), float("nan")), a, b, beta=0), torch.mm(a, b))
    x, y = torch.randn(4, 5, 6, generator=g), torch.randn(4, 6, 3, generator=g)
    assert torch.equal(torch.bmm(x, y), torch.from_numpy(x.numpy() @ y.numpy()))
    assert torch.equal(torch.baddbmm(torch.ones(3), x, y, alpha=3.0), torch.bmm(x, y) * 3.0 + 1)
    assert torch.equal(
        torch.mm(a.bfloat16(), b.bfloat16()), torch.mm(a.bfloat16().float(), b.bfloat16().float()).bfloat16()
    )
    ints = torch.randint(-9, 9, (5, 7), generator=g)
    assert torch.equal(ints @ ints.T, torch.from_numpy(ints.numpy() @ ints.numpy().T))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.mm(a, b.double())
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.mm(a, a)
    w = b.double().requires_grad_()
    (a.double() @ w).sum().backward()  # d/dw sum(a @ w) = a^T 1: each row of the gradient is a column sum of a
    assert torch.allclose(w.grad, a.double().sum(0)[:, None].expand(19, 23), rtol=1e-12, atol=0)


@pytest.mark.skipif(NATIVE_OPENBLAS.strip() == numerics.OPENBLAS_CORE, reason="numpy's own OpenBLAS core is Haswell")
def test_a_stage_refuses_to_run_when_numpy_loaded_its_openblas_first():
    """numpy imported before ddmrl: its OpenBLAS chose this CPU's own core, so a stage stops with one line."""
    code = "import numpy; from ddmrl.cli import run_stage; run_stage(lambda: print('ran'))"
    out = run(code, DDMRL_NUMERICS="portable")
    assert out.returncode == 2 and "ran" not in out.stdout
    assert out.stderr.strip().splitlines() == [
        f"error: numpy's OpenBLAS runs its {NATIVE_OPENBLAS.strip()} kernels, not Haswell (DDMRL_NUMERICS=portable): "
        "import ddmrl before numpy, or set DDMRL_NUMERICS=compatible"
    ]


@pytest.mark.skipif(
    not run("import numpy; print(numpy._core._multiarray_umath.__cpu_features__['X86_V4'])").stdout.startswith("True"),
    reason="numpy's widest build here is X86_V3",
)
def test_a_stage_refuses_to_run_when_numpy_chose_its_avx512_ufuncs_first():
    """numpy imported before ddmrl (with OpenBLAS's core already pinned by the environment): its ufuncs dispatch to
    their AVX-512 build, so a stage stops with one line."""
    code = "import numpy; from ddmrl.cli import run_stage; run_stage(lambda: print('ran'))"
    out = run(code, DDMRL_NUMERICS="portable", OPENBLAS_CORETYPE="Haswell")
    assert out.returncode == 2 and "ran" not in out.stdout
    assert out.stderr.strip().splitlines() == [
        "error: numpy dispatches to its X86_V4 kernels (DDMRL_NUMERICS=portable): import ddmrl before numpy, or set "
        "DDMRL_NUMERICS=compatible"
    ]


def test_every_stage_script_imports_ddmrl_before_anything_that_loads_numpy():
    """A stage run by hand (``python stages/tables.py ...``, no engine's environment) pins the numerics only if ddmrl
    comes before numpy, pandas or torch: its first import outside the standard library is ddmrl
    (the engines' processes had imported ddmrl, so their jobs inherited the variables and hid a late import)."""
    import ast
    from pathlib import Path

    late = []
    for script in sorted((Path(__file__).resolve().parents[2] / "stages").glob("*.py")):
        for node in ast.parse(script.read_text()).body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                top = (node.names[0].name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
                if top != "__future__" and top not in sys.stdlib_module_names:
                    late += [] if top == "ddmrl" else [f"{script.name}: {top}"]
                    break
    assert late == []
