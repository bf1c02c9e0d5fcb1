"""Smoke test of benchmarks/bench_samplers_grpo.py: its --quick mode runs and covers every sampler and method.

Speed itself is measured and reported by the benchmark, never asserted here (timings are machine-specific).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddmrl.methods import METHODS
from ddmrl.samplers import SAMPLERS

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_samplers_grpo.py"
SAMPLER_CASES = {"llada_low_confidence", "llada_random", "llada_cfg1", "maskgit", "emerge", "block", "block_recompute"}


@pytest.mark.slow
def test_quick_benchmark_covers_every_sampler_and_method(tmp_path):
    """One thread: a 2-thread team on a busy 2-core machine can stall for seconds at each barrier."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--quick", "--threads", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert {r["sampler"] for r in results["samplers"]} == SAMPLER_CASES
    # every sampler of the tiny model's family; Dream's reads Dream's shifted logits (not benchmarked yet)
    assert {r["name"] for r in results["samplers"]} == set(SAMPLERS) - {"dream"}
    assert all(r["tokens_per_s"] > 0 and min(r["nfe"]) >= 1 for r in results["samplers"])
    plain = {m for m in METHODS if METHODS[m].params().aux_policy.kind == "none" and not METHODS[m].augmenter}
    assert set(results["methods"]) == plain
    assert all(r["median"]["total"] > 0 for r in results["methods"].values())
    assert {r["method"] for r in results["scaling"]} == {"diffu_grpo", "rebrl"}
    assert {"torch", "threads", "cpu_count", "date"} <= set(results["machine"])
    assert (tmp_path / "summary.md").read_text().startswith("# Sampler and GRPO speed")
    assert results["peak_gflops"] > 0
    assert all(r["gflop"]["update"] > 0 and r["gflop"]["old_ref_logp"] >= 0 for r in results["methods"].values())


FAST = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_fast_sampling.py"


@pytest.mark.slow
def test_quick_fast_sampling_benchmark_covers_every_option(tmp_path):
    """The long-completion part (its model trained for a few steps in ``--work``): every option of the sampler,
    timed against the plain one, with accuracy, NFE and a FLOP fraction."""
    proc = subprocess.run(
        [sys.executable, str(FAST), "--out", str(tmp_path / "out"), "--quick", "--threads", "1", "--parts", "long",
         "--work", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    (part,) = results["long"].values()
    rows = part["lengths"]["64"]
    assert set(rows["speed"]) == set(rows["accuracy"]) and "plain" in rows["speed"]
    assert all(r["nfe"] >= 1 and r["tokens_per_s"] > 0 and r["gflop"] > 0 for r in rows["speed"].values())
    assert rows["speed"]["plain"]["speedup"] == 1.0
    assert (tmp_path / "out" / "summary.md").read_text().startswith("# Fast-dLLM options")
