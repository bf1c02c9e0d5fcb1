"""Speed benchmark of the samplers and of one GRPO rollout batch per method, on the embedded TinyDDM (CPU).

    python benchmarks/bench_samplers_grpo.py --out benchmarks/results [--quick] [--threads N] [--model PATH]

Three measurements, each the median of ``repeats`` timed calls (``time.perf_counter``) after one warm-up call of
the same configuration:

  a. samplers (LLaDA low-confidence and random, LLaDA with cfg_scale 1, MaskGIT, emerge, and block diffusion's on
     the same weights as a TinyBlockDDM, with its exact cache and without it): completion tokens per second and
     model evaluations (nfe) per call, batch 64, completion length L in {16, 32, 64}, steps = L / 2 (d1's rule,
     ``ddmrl.rollout.sampler_steps``), LLaDA blocks of 4, temperature 1 as in GRPO rollouts;
  b. one GRPO rollout batch per method (``ddmrl.methods.METHODS``) on sudoku4 with ``max_steps = num_iterations``:
     the loop's own phase split (``Timing.gen``, ``Timing.old_ref_logp``, ``Timing.update``) and per-step totals;
  c. the same for diffu_grpo and rebrl, one factor at a time around (G, mu) = (8, 4): num_generations G in
     {4, 8, 16} and num_iterations mu in {1, 2, 4, 8}, 8 prompts. Scaling with L is part a's job: sudoku's
     completion length is fixed at 20.

The model is a random-init TinyDDM with params.yaml's ``model:`` section and the sudoku4 tokenizer (speed does not
depend on the weights; a random model's sudoku reward is 0 everywhere, which GRPO's timing does not notice), or a
trained checkpoint with ``--model``. ``--quick`` shrinks every size and repeats once (a smoke run, < 30 s).

Writes ``results.json`` (every raw number, the plan and the machine) and ``summary.md`` (tables and the trends
read off them) to ``--out``. The numbers belong to the machine that produced them; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import functools
import io
import json
import math
import resource
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import flops, interleaved, machine_info, matmul_peak  # noqa: E402

from ddmrl import config  # noqa: E402
from ddmrl.config import GRPOConfig, SamplerConfig  # noqa: E402
from ddmrl.likelihood import token_logps  # noqa: E402
from ddmrl.masking import view_sampler  # noqa: E402
from ddmrl.methods import METHODS  # noqa: E402
from ddmrl.models.checkpoint import load_checkpoint  # noqa: E402
from ddmrl.models.tiny import new_tiny_model  # noqa: E402
from ddmrl.models.tiny_block import from_tiny  # noqa: E402
from ddmrl.models.tokenizer import build_tokenizer  # noqa: E402
from ddmrl.rollout import sampler_kwargs  # noqa: E402
from ddmrl.samplers import SAMPLERS  # noqa: E402
from ddmrl.tasks import make_task  # noqa: E402
from ddmrl.tasks.encoding import encode_prompts, prompt_length  # noqa: E402
from ddmrl.training import grpo  # noqa: E402
from ddmrl.training.grpo import train_grpo  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PHASES = ("gen", "old_ref_logp", "update")


@dataclass(frozen=True)
class Plan:
    """Sizes of one benchmark run."""

    repeats: int  # timed calls per configuration (after one warm-up call)
    batch: int  # sampler batch (part a)
    lengths: tuple[int, ...]  # completion lengths L (part a)
    num_prompts: int  # GRPO prompts per rollout batch (parts b, c)
    center: tuple[int, int]  # (G, mu) of part b, and the point part c varies one factor around
    generations: tuple[int, ...]  # G values of part c
    iterations: tuple[int, ...]  # mu values of part c
    completions: tuple[int, ...]  # completion lengths L of part c (sudoku's answer padded with EOS)


FULL = Plan(3, 64, (16, 32, 64), 8, (8, 4), (4, 8, 16), (1, 2, 4, 8), (20, 40, 80))
QUICK = Plan(1, 8, (8, 16), 2, (4, 2), (4, 8), (1, 2), (20, 40))
SCALING_METHODS = ("diffu_grpo", "rebrl")
#: the methods of part b: those that train the model alone (Co-GRPO and the unmasking policy add an auxiliary policy;
#: IGPO's rollout augmenter needs a task with reasoning traces, which sudoku4 has not)
TEXT_METHODS = tuple(m for m in METHODS if METHODS[m].params().aux_policy.kind == "none" and not METHODS[m].augmenter)

# part a: label -> sampler settings (steps 0 = L / 2); temperature 1 as in GRPO rollouts
SAMPLER_CASES = {
    "llada_low_confidence": SamplerConfig(name="llada", temperature=1.0, remasking="low_confidence"),
    "llada_random": SamplerConfig(name="llada", temperature=1.0, remasking="random"),
    "llada_cfg1": SamplerConfig(name="llada", temperature=1.0, remasking="low_confidence", cfg_scale=1.0),
    "maskgit": SamplerConfig(name="maskgit", temperature=1.0),
    "emerge": SamplerConfig(name="emerge", temperature=1.0),
    "block": SamplerConfig(name="block", temperature=1.0),  # on a TinyBlockDDM with the same weights
    "block_recompute": SamplerConfig(name="block", temperature=1.0),  # without its cache (kv_cache=False)
}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for results.json and summary.md")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repeat (smoke run)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--params", default=str(REPO / "params.yaml"), help="params file (model: and grpo: sections)")
    ap.add_argument("--model", help="a trained checkpoint (save_pretrained directory) instead of a random init")
    return ap.parse_args()


def build_model(cfg: config.Config, task, max_length: int, path: str | None):
    """(model, tokenizer, source): a checkpoint, or a random TinyDDM over the task's tokenizer."""
    if path:
        model, tok = load_checkpoint(path)
        return model, tok, str(path)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    torch.manual_seed(cfg.seed)
    model = new_tiny_model(cfg.model, tok, max_length)
    return model.eval(), tok, "random init (params.yaml model:)"


def timed(fn, repeats: int) -> tuple[list[float], list]:
    """Seconds and return values of ``repeats`` calls of ``fn``, after one untimed warm-up call."""
    fn()
    seconds, values = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        values.append(fn())
        seconds.append(time.perf_counter() - t0)
    return seconds, values


# ------------------------------------------------------------------------------------------------ a. samplers


def sample(model, prompts: torch.Tensor, length: int, name: str, mask_id: int, kw: dict):
    """One sampler call from a fresh seed (every timed call draws the same noise)."""
    return SAMPLERS[name](model, prompts, length, mask_id=mask_id, generator=torch.Generator().manual_seed(0), **kw)


def bench_samplers(model, tok, task, plan: Plan) -> list[dict]:
    """One row per (sampler, L): seconds per call, nfe, completion tokens per second."""
    prompts = encode_prompts(tok, task, task.generate(plan.batch, seed=1))  # [B, P]
    block = from_tiny(model)  # the block sampler needs the block-diffusion protocol (ddmrl.samplers.block)
    rows = []
    for label, sampler in SAMPLER_CASES.items():
        for length in plan.lengths:
            if prompts.shape[1] + length > model.config.max_position_embeddings:
                print(f"  {label} L={length}: skipped (prompt + L > max_position_embeddings)", flush=True)
                continue
            kw = sampler_kwargs(sampler, length) | ({"kv_cache": False} if label == "block_recompute" else {})
            runs = block if sampler.name == "block" else model
            call = functools.partial(sample, runs, prompts, length, sampler.name, tok.mask_token_id, kw)
            seconds, outs = timed(call, plan.repeats)
            median = statistics.median(seconds)
            nfe = statistics.median(o.nfe for o in outs)
            rows.append(
                {
                    "sampler": label,
                    "name": sampler.name,
                    "settings": dataclasses.asdict(sampler),
                    "batch": plan.batch,
                    "completion_length": length,
                    "steps": kw["steps"],
                    "seconds": seconds,
                    "nfe": [o.nfe for o in outs],
                    "median_s": median,
                    "tokens_per_s": plan.batch * length / median,
                    "ms_per_eval": 1000 * median / nfe,
                }
            )
            print(f"  {label:22s} L={length:3d}  {median:7.3f} s  {rows[-1]['tokens_per_s']:9.0f} tok/s", flush=True)
    return rows


# ------------------------------------------------------------------------------------------------ b, c. GRPO


def grpo_config(cfg: config.Config, method: str, num_prompts: int, g: int, mu: int) -> GRPOConfig:
    """params.yaml's run config of ``method`` (its grpo: defaults plus the method's own) at the given sizes,
    with ``max_steps = mu`` so that one rollout batch is trained on."""
    shared = dict(cfg.raw.get("grpo") or {})
    own = METHODS[method].params()
    if own.sampler != GRPOConfig().sampler:  # a method with its own sampler (JustGRPO: left to right) keeps it
        shared.pop("sampler", None)
    if (
        view_sampler(own.remasking).states or own.remasking == "tree"
    ):  # the sampler's stored or resumed states: the plain sampler
        shared["sampler"] = {**shared.get("sampler", {}), "kv_cache": "none", "parallel": "none"}
    if method in cfg.methods:
        base = cfg.methods[method]
    else:  # d-TreeRPO's tree must fit the benchmark's G: trees of 2 x 2 leaves
        base = config.method_config(method, shared, **({"tree_branch_factor": 2} if method == "treerpo" else {}))
    return replace(base, num_prompts=num_prompts, num_generations=g, num_iterations=mu, max_steps=mu)


def phase_flops(model, tok, task, gcfg: GRPOConfig, examples) -> dict[str, float]:
    """FLOPs (matrix products and attention, forward and backward) of each phase of one ``train_grpo`` call: the
    rollouts (``grpo.rollout``) and the old/reference log-probs (``grpo.view_logps``) counted where the loop calls
    them, the update as the rest."""
    counts = {"gen": 0, "old_ref_logp": 0}

    def counted(phase, fn):
        def wrapper(*args, **kwargs):
            work, value = flops(lambda: fn(*args, **kwargs))
            counts[phase] += work
            return value

        return wrapper

    ref = copy.deepcopy(model).requires_grad_(False)
    saved = grpo.rollout, grpo.view_logps
    grpo.rollout, grpo.view_logps = counted("gen", grpo.rollout), counted("old_ref_logp", grpo.view_logps)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            total, _ = flops(lambda: train_grpo(copy.deepcopy(model), ref, tok, task, lambda it: examples, gcfg, 0))
    finally:
        grpo.rollout, grpo.view_logps = saved
    return {**counts, "update": total - counts["gen"] - counts["old_ref_logp"], "total": total}


def bench_grpo(model, tok, task, gcfg: GRPOConfig, repeats: int) -> dict:
    """Phase seconds of ``train_grpo`` (its own Timing) and its wall time, over ``repeats`` calls after a
    warm-up; every call starts from the same weights. Also each phase's FLOPs (one more, untimed call)."""
    examples = task.generate(gcfg.num_prompts, seed=2)
    ref = copy.deepcopy(model).requires_grad_(False)
    runs = []
    for _ in range(repeats + 1):
        policy = copy.deepcopy(model)
        with contextlib.redirect_stderr(io.StringIO()):  # train_grpo's progress bar
            t0 = time.perf_counter()
            curve, timing = train_grpo(policy, ref, tok, task, lambda it: examples, gcfg, seed=0)
            wall = time.perf_counter() - t0
        runs.append({**dataclasses.asdict(timing), "wall": wall, "batches": len(curve), "steps": curve[-1]["step"]})
    runs = runs[1:]  # drop the warm-up
    median = {k: statistics.median(r[k] for r in runs) for k in (*PHASES, "wall")}
    median["total"] = sum(median[p] for p in PHASES)
    steps = runs[-1]["steps"]
    return {
        "completion_length": task.completion_length,
        "gflop": {k: v / 1e9 for k, v in phase_flops(model, tok, task, gcfg, examples).items()},
        "num_prompts": gcfg.num_prompts,
        "num_generations": gcfg.num_generations,
        "num_iterations": gcfg.num_iterations,
        "beta": gcfg.beta,
        "kl_target": gcfg.kl_target,
        "ref_pass": bool(gcfg.beta) and gcfg.kl_target == "ref",
        "rollout_batches": runs[-1]["batches"],
        "optimiser_steps": steps,
        "runs": runs,
        "median": median,
        "per_step": {k: v / steps for k, v in median.items()},
    }


def bench_methods(cfg, model, tok, task, plan: Plan) -> dict[str, dict]:
    g, mu = plan.center
    out = {}
    for method in TEXT_METHODS:
        out[method] = bench_grpo(model, tok, task, grpo_config(cfg, method, plan.num_prompts, g, mu), plan.repeats)
        m = out[method]["median"]
        print(
            f"  {method:11s} gen {m['gen']:.3f}  old_ref {m['old_ref_logp']:.3f}  update {m['update']:.3f}", flush=True
        )
    return out


def bench_scaling(cfg, model, tok, task, plan: Plan, methods: dict[str, dict]) -> list[dict]:
    """One factor at a time around plan.center (G, mu) and sudoku's L = 20; the center is part b's measurement.
    Longer completions pad sudoku's answer with more EOS tokens (``completion_length`` of a copy of the task)."""
    g0, mu0 = plan.center
    points = [(g, mu0, 20) for g in plan.generations] + [(g0, mu, 20) for mu in plan.iterations if mu != mu0]
    points += [(g0, mu0, length) for length in plan.completions if length != 20]
    rows = []
    for method in SCALING_METHODS:
        for g, mu, length in points:
            if (g, mu, length) == (g0, mu0, 20):
                result = methods[method]
            else:
                padded = copy.copy(task)
                padded.completion_length = length
                gcfg = grpo_config(cfg, method, plan.num_prompts, g, mu)
                result = bench_grpo(model, tok, padded, gcfg, plan.repeats)
            rows.append({"method": method, **result})
            print(f"  {method:11s} G={g:2d} mu={mu} L={length}  total {result['median']['total']:.3f} s", flush=True)
    return rows


def bench_view_logps(model, tok, task, plan: Plan) -> dict:
    """Old/reference log-probs of mu views of a rollout batch: one batched pass (``view_logps``) against one pass
    per view (its body before batching), interleaved; the fastest of 2 * repeats + 1 rounds of each."""
    g, mu = plan.center
    n = plan.num_prompts * g
    gen = torch.Generator().manual_seed(0)
    prompts = encode_prompts(tok, task, task.generate(n, seed=3))
    completion = torch.randint(4, len(tok), (n, task.completion_length), generator=gen)
    clean = torch.cat([prompts, completion], 1)
    masks = torch.rand((mu, *clean.shape), generator=gen) < torch.linspace(0.2, 1.0, mu)[:, None, None]
    masks[:, :, : prompts.shape[1]] = False
    inputs = clean.masked_fill(masks, tok.mask_token_id)  # [mu, N, P + L]

    def per_view():
        return torch.stack([token_logps(model, x, completion) for x in inputs])

    with torch.no_grad():
        seconds, values = interleaved(
            {"per_view": per_view, "batched": lambda: grpo.view_logps(model, inputs, completion)}, 2 * plan.repeats + 1
        )
    best = {k: min(v) for k, v in seconds.items()}
    return {"views": mu, "rows": n, "seconds": seconds, "best_s": best, "speedup": best["per_view"] / best["batched"],
            "max_abs_diff": float((values["per_view"] - values["batched"]).abs().max())}  # fmt: skip


# ------------------------------------------------------------------------------------------------ reading


def fit(xs: list[float], ys: list[float], log: bool) -> float:
    """Least-squares slope of y on x, or of log y on log x (then y grows as x^slope)."""
    if log:
        xs, ys = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def growth(xs: list[float], ys: list[float], per: str = "") -> str:
    """'grows ~linearly (x^0.97)', with the marginal seconds per unit of x when ``per`` names it."""
    b = fit(xs, ys, log=True)
    if abs(b) < 0.25:
        shape = "stays roughly flat"
    elif abs(b - 1) < 0.2:
        shape = "grows ~linearly"
    elif abs(b - 2) < 0.2:
        shape = "grows ~quadratically"
    else:
        shape = "grows sublinearly" if b < 1 else "grows superlinearly"
    marginal = f", {fit(xs, ys, log=False):+.3f} s per {per}" if per else ""
    return f"{shape} (x^{b:.2f}{marginal})"


def readings(
    samplers: list[dict], methods: dict[str, dict], scaling: list[dict], plan: Plan, peak: float
) -> list[str]:
    """One line per trend, computed from the measured medians."""
    lines = []
    for label in SAMPLER_CASES:
        rows = [r for r in samplers if r["sampler"] == label]
        if len(rows) > 1:
            xs = [r["completion_length"] for r in rows]
            lines.append(f"{label}: time per call {growth(xs, [r['median_s'] for r in rows])} in L (steps = L/2)")
    by_case = {(r["sampler"], r["completion_length"]): r["median_s"] for r in samplers}
    longest = max(r["completion_length"] for r in samplers)
    if ("llada_cfg1", longest) in by_case and ("llada_low_confidence", longest) in by_case:
        ratio = by_case["llada_cfg1", longest] / by_case["llada_low_confidence", longest]
        lines.append(f"cfg_scale 1 doubles the model evaluations; at L={longest} it costs {ratio:.2f}x the time")
    share = {m: r["median"]["gen"] / r["median"]["total"] for m, r in methods.items()}
    heaviest = max(methods, key=lambda m: methods[m]["median"]["update"])
    lines.append(
        f"rollout generation is {100 * min(share.values()):.0f}-{100 * max(share.values()):.0f}% of a rollout "
        f"batch's time across methods; the costliest update is {heaviest} "
        f"({methods[heaviest]['median']['update']:.3f} s for {methods[heaviest]['optimiser_steps']} steps)"
    )
    g0, mu0 = plan.center
    center = {"num_generations": g0, "num_iterations": mu0, "completion_length": 20}
    for method in SCALING_METHODS:
        for factor, key in (("G", "num_generations"), ("mu", "num_iterations"), ("L", "completion_length")):
            held = {k: v for k, v in center.items() if k != key}
            rows = [r for r in scaling if r["method"] == method and all(r[k] == v for k, v in held.items())]
            rows = sorted(rows, key=lambda r: r[key])
            if len(rows) < 2:
                continue
            xs = [r[key] for r in rows]
            parts = [f"{p} {growth(xs, [r['median'][p] for r in rows], factor)}" for p in PHASES]
            lines.append(f"{method}, {factor} {xs[0]}..{xs[-1]}: " + "; ".join(parts))
    for method, r in methods.items():
        f = {p: 100 * r["gflop"][p] / r["median"][p] / peak for p in PHASES if r["median"][p] > 0}
        low = min(f, key=f.get)
        lines.append(
            f"{method}: phases at " + ", ".join(f"{p} {v:.0f}%" for p, v in f.items()) + f" of the matmul peak "
            f"({peak:.1f} GFLOP/s); lowest: {low}"
        )
    return lines


# ------------------------------------------------------------------------------------------------ outputs


def peak_fractions(r: dict, peak: float) -> dict[str, float]:
    """Each phase's achieved GFLOP/s as a percentage of the matmul peak."""
    return {p: 100 * r["gflop"][p] / r["median"][p] / peak if r["median"][p] else 0.0 for p in PHASES}


def summary_markdown(res: dict) -> str:
    plan, mi = res["plan"], res["machine"]
    g0, mu0 = plan["center"]
    out = [
        "# Sampler and GRPO speed",
        "",
        f"{mi['date']}, torch {mi['torch']}, {mi['threads']} threads on {mi['cpu_count']} CPUs "
        f"(load average at start {mi['load_average_at_start'][0]:.2f}), model: {res['model']['source']} "
        f"({res['model']['num_parameters']:,} parameters){', QUICK run' if res['quick'] else ''}. "
        f"Medians of {plan['repeats']} timed call(s) after one warm-up; machine-specific. Float32 matmul peak "
        f"measured in this run: {', '.join(f'{p:.1f}' for p in res['peaks'])} GFLOP/s; phases are reported as a "
        f"fraction of the highest, {res['peak_gflops']:.1f} (FLOPs of matrix products and attention, counted by "
        "torch's FlopCounterMode, forward and backward).",
        "",
        f"## Samplers (batch {plan['batch']}, temperature 1, steps = L/2, LLaDA blocks of 4)",
        "",
        "| sampler | L | steps | nfe | s/call | tokens/s | ms/eval |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in res["samplers"]:
        out.append(
            f"| {r['sampler']} | {r['completion_length']} | {r['steps']} | {statistics.median(r['nfe']):g} "
            f"| {r['median_s']:.3f} | {r['tokens_per_s']:,.0f} | {r['ms_per_eval']:.1f} |"
        )
    out += [
        "",
        f"## GRPO phase split per method (sudoku4, {plan['num_prompts']} prompts x G={g0}, mu={mu0}, max_steps = mu)",
        "",
        "| method | ref pass | batches | steps | gen s | old+ref logp s | update s | total s | s/step | gen % "
        "| gen % peak | logp % peak | update % peak |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in res["methods"].items():
        m, f = r["median"], peak_fractions(r, res["peak_gflops"])
        out.append(
            f"| {name} | {'yes' if r['ref_pass'] else 'no'} | {r['rollout_batches']} | {r['optimiser_steps']} "
            f"| {m['gen']:.3f} | {m['old_ref_logp']:.3f} | {m['update']:.3f} | {m['total']:.3f} "
            f"| {r['per_step']['total']:.3f} | {100 * m['gen'] / m['total']:.0f} "
            f"| {f['gen']:.0f} | {f['old_ref_logp']:.0f} | {f['update']:.0f} |"
        )
    out += [
        "",
        f"## GRPO scaling with G, mu and L ({plan['num_prompts']} prompts, one factor at a time around G={g0}, "
        f"mu={mu0}, L=20; longer L pads sudoku's answer with EOS)",
        "",
        "| method | G | mu | L | gen s | old+ref logp s | update s | total s | s/step | gen % peak | logp % peak "
        "| update % peak |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in res["scaling"]:
        m, f = r["median"], peak_fractions(r, res["peak_gflops"])
        out.append(
            f"| {r['method']} | {r['num_generations']} | {r['num_iterations']} | {r['completion_length']} "
            f"| {m['gen']:.3f} | {m['old_ref_logp']:.3f} | {m['update']:.3f} | {m['total']:.3f} "
            f"| {r['per_step']['total']:.3f} | {f['gen']:.0f} | {f['old_ref_logp']:.0f} | {f['update']:.0f} |"
        )
    v = res["view_logps"]
    best = v["best_s"]
    out += [
        "",
        f"## Old/reference log-probs of {v['views']} views x {v['rows']} rows: batched against one pass per view",
        "",
        f"Fastest of {len(v['seconds']['batched'])} interleaved rounds: one pass per view {best['per_view']:.3f} s, "
        f"batched {best['batched']:.3f} s ({v['speedup']:.2f}x); largest difference {v['max_abs_diff']:.1e}.",
    ]
    out += ["", "## Reading", ""] + [f"- {line}" for line in res["readings"]]
    return "\n".join(out) + "\n"


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    plan = QUICK if args.quick else FULL
    cfg = config.load(args.params)
    task = make_task("sudoku4", **cfg.task_params.get("sudoku4", {}))
    longest = max(*FULL.lengths, *FULL.completions)
    model, tok, source = build_model(cfg, task, prompt_length(task) + longest, args.model)
    start = time.perf_counter()
    info = machine_info()
    peaks = [matmul_peak(args.threads)["peak"]]
    torch.set_num_threads(args.threads)

    print("a. samplers", flush=True)
    samplers = bench_samplers(model, tok, task, plan)
    print("b. GRPO phase split per method", flush=True)
    methods = bench_methods(cfg, model, tok, task, plan)
    print("c. GRPO scaling with G and mu", flush=True)
    scaling = bench_scaling(cfg, model, tok, task, plan, methods)
    print("d. old/reference log-probs: batched views against one pass per view", flush=True)
    logps = bench_view_logps(model, tok, task, plan)
    peaks.append(matmul_peak(args.threads)["peak"])

    results = {
        "machine": info,
        "quick": args.quick,
        "plan": dataclasses.asdict(plan),
        "model": {
            "source": source,
            "num_parameters": sum(p.numel() for p in model.parameters()),
            "config": model.config.to_dict(),
        },
        "samplers": samplers,
        "methods": methods,
        "scaling": scaling,
        "view_logps": logps,
        "peaks": peaks,
        "peak_gflops": max(peaks),
        "readings": readings(samplers, methods, scaling, plan, max(peaks)),
        "seconds": time.perf_counter() - start,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / "summary.md").write_text(summary_markdown(results))
    print(f"wrote {out / 'results.json'} and {out / 'summary.md'} ({results['seconds']:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
