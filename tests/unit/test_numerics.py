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


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what ``import ddmrl`` set in it."""
    return {k: v for k, v in os.environ.items() if k not in numerics.MODES["avx2"]} | extra


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
    with pytest.raises(numerics.NumericsError, match="DDMRL_NUMERICS='fast': expected one of avx2, compatible"):
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
        "error: torch chose its AVX512 CPU kernels before ddmrl pinned them (DDMRL_NUMERICS=avx2): import ddmrl "
        "before running torch code, or set DDMRL_NUMERICS=native"
    ]
