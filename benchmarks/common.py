"""Shared pieces of the benchmarks: the machine's matmul peak, FLOP counts, timing, paired accuracy intervals."""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

import torch
from torch.utils.flop_counter import FlopCounterMode

import ddmrl


def matmul_peak(threads: int, sizes: tuple[int, ...] = (1024, 2048), repeats: int = 5) -> dict:
    """The machine's float32 matmul rate (GFLOP/s) at ``threads``: the best of ``repeats`` square products per size
    (the peak this process can reach now, on a loaded machine too). Returns {size: GFLOP/s, "peak": max}."""
    torch.set_num_threads(threads)
    out = {}
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b  # warm-up
        best = min(_seconds(lambda a=a, b=b: a @ b) for _ in range(repeats))
        out[str(n)] = 2 * n**3 / best / 1e9
    out["peak"] = max(out.values())
    return out


def _seconds(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def flops(fn: Callable[[], object]) -> tuple[int, object]:
    """FLOPs of the matrix products and attention that ``fn`` runs (torch's FlopCounterMode; forward and backward),
    and its return value."""
    counter = FlopCounterMode(display=False)
    with counter:
        value = fn()
    return counter.get_total_flops(), value


def interleaved(calls: dict[str, Callable[[], object]], repeats: int) -> tuple[dict[str, list[float]], dict]:
    """Seconds of every call in ``calls``, run in turn ``repeats`` times (after one untimed warm-up round), so that
    a change of load hits every variant alike; and each call's last return value."""
    seconds, values = {k: [] for k in calls}, {}
    for k, fn in calls.items():
        values[k] = fn()
    for _ in range(repeats):
        for k, fn in calls.items():
            t0 = time.perf_counter()
            values[k] = fn()
            seconds[k].append(time.perf_counter() - t0)
    return seconds, values


def per_example(scores: list[dict]) -> list[float]:
    """Each example's share of the task's pooled accuracy: sudoku's cells right / cells empty, echo's tokens right /
    tokens, otherwise 1 for correct."""
    if scores and "cells_empty" in scores[0]:
        return [s["cells_correct"] / max(s["cells_empty"], 1) for s in scores]
    if scores and "total" in scores[0]:
        return [s["right"] / max(s["total"], 1) for s in scores]
    return [float(bool(s["correct"])) for s in scores]


def mean_interval(xs: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its normal 95 % interval (1.96 standard errors), in percent."""
    n = len(xs)
    m = statistics.fmean(xs)
    sd = statistics.stdev(xs) if n > 1 else 0.0
    return 100 * m, 100 * 1.96 * sd / math.sqrt(n)


def paired_difference(a: list[float], b: list[float]) -> tuple[float, float]:
    """Mean of b - a over the same examples and its 95 % half-width, in points."""
    return mean_interval([y - x for x, y in zip(a, b, strict=True)])


def t_interval(xs: list[float]) -> tuple[float, float]:
    """Mean and the half-width of Student's 95 % interval (for a handful of seeds)."""
    t95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
    n = len(xs)
    if n < 2:
        return xs[0], float("nan")
    return statistics.fmean(xs), t95.get(n - 1, 2.0) * statistics.stdev(xs) / math.sqrt(n)


def machine_info() -> dict:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "ddmrl": ddmrl.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "load_average_at_start": os.getloadavg(),
        "device": "cpu",
    }
