"""Fast-dLLM's options of the samplers, measured side by side with the plain sampler in one run (CPU).

    python benchmarks/bench_fast_sampling.py --out benchmarks/results/fast \\
        --sft-model DIR --tasks DIR [--parts embedded,long] [--threads N] [--work DIR] [--quick]

Every option of ``sampler:`` (kv_cache none | prefix | dual; parallel none | threshold | factor, and the pairs that
combine them) against the plain sampler, with the variants' timed calls interleaved (one call of each in turn,
``repeats`` rounds) so that the load of a shared machine hits them alike; medians and ratios to the plain sampler.

  embedded  the SFT model (``--sft-model``, e.g. ``data/sft/model``, with the held-out sets of ``--tasks``, e.g.
            ``data/download/tasks``) on sudoku4 (L = 20) and countdown3 (L = 10) with params.yaml's samplers:
            held-out accuracy with d1's protocol (greedy, ``evaluate.sampler`` plus the option) and its paired
            difference to the plain sampler on the same items (95 % interval); completion tokens per second and
            NFE of a GRPO rollout batch (``grpo.num_prompts`` x ``num_generations`` rows, ``grpo.sampler``: temperature
            1) and of an evaluation batch.
  long      a LLaDA-shaped tiny model (rotary TinyDDM, ``long_model.py``: trained here on echo and cached in
            ``--work``) at completions of 64, 128 and 256 tokens, LLaDA's blocks of 32 and steps = L (one token per
            step, Fast-dLLM's baseline): held-out token accuracy with its paired interval, tokens per second, NFE.

Each variant's matrix-product and attention FLOPs are counted (torch's FlopCounterMode) and reported as a fraction of
the machine's float32 matmul peak, measured in the same run (``common.matmul_peak``) before and after the parts.
Writes ``results.json`` and ``summary.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import flops, interleaved, machine_info, matmul_peak, paired_difference, per_example  # noqa: E402
from long_model import held_out, train_echo_model  # noqa: E402

from ddmrl import config  # noqa: E402
from ddmrl.config import SamplerConfig  # noqa: E402
from ddmrl.evaluation import evaluate  # noqa: E402
from ddmrl.models.checkpoint import load_checkpoint  # noqa: E402
from ddmrl.rollout import rollout  # noqa: E402
from ddmrl.tasks.store import load_task  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

OPTIONS = {
    "plain": {},
    "prefix": {"kv_cache": "prefix"},
    "dual": {"kv_cache": "dual"},
    "threshold": {"parallel": "threshold"},
    "factor": {"parallel": "factor"},
    "prefix+threshold": {"kv_cache": "prefix", "parallel": "threshold"},
    "dual+threshold": {"kv_cache": "dual", "parallel": "threshold"},
    "dual+factor": {"kv_cache": "dual", "parallel": "factor"},
    "threshold/fast_dllm": {"parallel": "threshold", "parallel_floor": "one"},
    "dual+threshold/fast_dllm": {"kv_cache": "dual", "parallel": "threshold", "parallel_floor": "one"},
}
#: whether each option's parallel decoding is Fast-dLLM's rule. ddmrl's default floor (parallel_floor: schedule)
#: commits at least ceil(masked / steps left) per step, which is Fast-dLLM's one token only at steps = L; at the
#: benchmark's steps = L / 2 it commits two tokens a step at least. With parallel_floor one ``steps`` plays no part,
#: so those rows are also Fast-dLLM's own setting (its evaluations' steps = L / block_length). The factor rows apply
#: the bound as stated (factor_rule as_stated), not the release's off-by-one.
FAST_DLLM_RULE = {
    name: "n/a" if "parallel" not in kw else "yes" if kw.get("parallel_floor") == "one" else "no (floor: schedule)"
    for name, kw in OPTIONS.items()
}


@dataclass(frozen=True)
class Plan:
    repeats: int  # interleaved timing rounds
    eval_items: int  # held-out items per embedded task (all of them when larger)
    long_lengths: tuple[int, ...]
    long_items: int  # held-out echo prompts per length (one batch)
    long_batch: int  # rows per timed long-completion call
    echo_steps: tuple[int, ...]  # training steps of the long-completion models (under-trained, converged)
    echo_batch: int


FULL = Plan(5, 512, (64, 128, 256), 64, 16, (120, 300), 8)
QUICK = Plan(1, 16, (64,), 8, 4, (4,), 2)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="embedded,long", help="comma-separated: embedded, long")
    ap.add_argument("--sft-model", help="SFT checkpoint (save_pretrained directory) for the embedded part")
    ap.add_argument("--tasks", help="the download stage's tasks directory (held-out sets) for the embedded part")
    ap.add_argument("--params", default=str(REPO / "params.yaml"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="/tmp/ddmrl-bench", help="cache of the long-completion model")
    ap.add_argument("--quick", action="store_true")
    return ap.parse_args()


def timed_variants(call_for, options: dict[str, dict], repeats: int, rows: int, length: int, peak: float) -> dict:
    """Interleaved timing of ``call_for(option)`` per option: median seconds, tokens/s, NFE, FLOP fraction of peak,
    and the speed-up over ``plain``."""
    calls = {name: call_for(kw) for name, kw in options.items()}
    seconds, outs = interleaved(calls, repeats)
    out = {}
    for name, fn in calls.items():
        best = min(seconds[name])  # other processes only ever add time: the fastest round is the least disturbed
        work, _ = flops(fn)
        out[name] = {
            "seconds": seconds[name],
            "median_s": statistics.median(seconds[name]),
            "best_s": best,
            "tokens_per_s": rows * length / best,
            "nfe": outs[name].nfe,
            "gflop": work / 1e9,
            "fraction_of_peak": work / best / 1e9 / peak,
        }
    for name in out:
        out[name]["speedup"] = out["plain"]["best_s"] / out[name]["best_s"]
        out[name]["speedup_median"] = out["plain"]["median_s"] / out[name]["median_s"]
    return out


def accuracy_rows(model, tok, task, examples, sampler: SamplerConfig, options: dict[str, dict], batch: int) -> dict:
    """Held-out accuracy per option and its paired difference to the plain sampler (same items, 95 % interval)."""
    out, base = {}, None
    for name, kw in options.items():
        metrics, records = evaluate(model, tok, task, examples, replace(sampler, **kw), batch)
        values = per_example(records)
        base = values if base is None else base
        diff, half = paired_difference(base, values)
        out[name] = {"accuracy": metrics["accuracy"], "n": metrics["n"], "nfe": metrics["nfe"],
                     "eval_seconds": metrics["eval_seconds"], "diff": diff, "diff_halfwidth": half}  # fmt: skip
    return out


def embedded(cfg: config.Config, args, plan: Plan, peak: float) -> dict:
    model, tok = load_checkpoint(args.sft_model)
    g = cfg.grpo.defaults
    res = {}
    for name in ("sudoku4", "countdown3"):
        task, examples = load_task(args.tasks, name)
        examples = examples[: plan.eval_items]
        length = task.completion_length
        print(f"embedded {name} (L = {length}): accuracy", flush=True)
        acc = accuracy_rows(model, tok, task, examples, cfg.evaluate.sampler, OPTIONS, cfg.evaluate.batch_size)
        prompts = examples[: g.num_prompts]

        def rollout_call(kw, prompts=prompts, task=task):
            sampler = replace(g.sampler, **kw)
            return lambda: rollout(
                model, tok, task, prompts, g.num_generations, sampler, torch.Generator().manual_seed(0)
            )

        def eval_call(kw, task=task, chunk=examples[: cfg.evaluate.batch_size]):
            sampler = replace(cfg.evaluate.sampler, **kw)
            return lambda: rollout(model, tok, task, chunk, 1, sampler, torch.Generator().manual_seed(0))

        print(f"embedded {name}: rollout batch", flush=True)
        rows = g.num_prompts * g.num_generations
        speed = timed_variants(rollout_call, OPTIONS, plan.repeats, rows, length, peak)
        print(f"embedded {name}: evaluation batch", flush=True)
        eval_rows = min(len(examples), cfg.evaluate.batch_size)
        eval_speed = timed_variants(eval_call, OPTIONS, plan.repeats, eval_rows, length, peak)
        res[name] = {"completion_length": length, "accuracy": acc, "rollout": speed, "evaluation": eval_speed,
                     "rollout_rows": rows, "eval_rows": eval_rows}  # fmt: skip
    return res


def long_completions(args, plan: Plan, peak: float) -> dict:
    """Per echo model (one per training budget) and length: accuracy and speed of every option."""
    res = {}
    for steps in plan.echo_steps:
        model, tok, info = train_echo_model(Path(args.work), (64, 128, 256), steps, plan.echo_batch, 64, 2)
        print(f"long: echo model, {steps} steps ({info['seconds']:.0f} s, loss {info['final_loss']:.3f})", flush=True)
        r = {"model": {**info, "num_parameters": sum(p.numel() for p in model.parameters())}, "lengths": {}}
        for length in plan.long_lengths:
            task, examples = held_out(length, plan.long_items)
            sampler = SamplerConfig(block_length=32, steps=0, temperature=0.0)  # steps 0: L / 2, d1's rule
            print(f"long L = {length}: accuracy", flush=True)
            acc = accuracy_rows(model, tok, task, examples, sampler, OPTIONS, plan.long_items)

            def call(kw, task=task, chunk=examples[: plan.long_batch], sampler=sampler, model=model, tok=tok):
                s = replace(sampler, **kw)
                return lambda: rollout(model, tok, task, chunk, 1, s, torch.Generator().manual_seed(0))

            print(f"long L = {length}: speed", flush=True)
            speed = timed_variants(call, OPTIONS, plan.repeats, min(plan.long_batch, len(examples)), length, peak)
            r["lengths"][str(length)] = {"accuracy": acc, "speed": speed}
        res[str(steps)] = r
    return res


# ------------------------------------------------------------------------------------------------ summary


def option_table(acc: dict, speed: dict, what: str) -> list[str]:
    lines = [
        f"| option | Fast-dLLM's rule | accuracy % | paired diff (95 %) | NFE ({what}) | tokens/s | speed-up (median) "
        "| FLOP % of peak |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in OPTIONS:
        a, s = acc[name], speed[name]
        diff = "" if name == "plain" else f"{a['diff']:+.1f} ± {a['diff_halfwidth']:.1f}"
        lines.append(
            f"| {name} | {FAST_DLLM_RULE[name]} | {a['accuracy']:.1f} | {diff} | {s['nfe']} "
            f"| {s['tokens_per_s']:,.0f} | {s['speedup']:.2f}x ({s['speedup_median']:.2f}x) "
            f"| {100 * s['fraction_of_peak']:.1f} |"
        )
    return lines


def summary_markdown(res: dict) -> str:
    mi = res["machine"]
    peaks = res["peak"]
    out = [
        "# Fast-dLLM options against the plain sampler",
        "",
        f"{mi['date']}, torch {mi['torch']}, {mi['threads']} thread(s) on {mi['cpu_count']} CPUs (load average at "
        f"start {mi['load_average_at_start'][0]:.2f}; the machine was shared, so absolute figures are those of a "
        f"loaded machine: read the ratios). Matmul peak measured in this run: "
        + ", ".join(f"{p['peak']:.1f}" for p in peaks)
        + f" GFLOP/s (fractions use the highest, {res['peak_gflops']:.1f}). Speed: the fastest of "
        f"{res['plan']['repeats']} interleaved rounds (other processes only add time; the speed-up of the medians in "
        "parentheses); accuracy differences are paired (same items), 95 % intervals. Fast-dLLM's rule: whether the "
        "option's parallel decoding is Fast-dLLM's (parallel_floor one, steps ignored: also its own setting, steps = "
        "L / block_length) or ddmrl's default floor, LLaDA's schedule (at this steps = L / 2, two tokens a step at "
        "least)." + (" QUICK run." if res["quick"] else ""),
    ]
    for name, r in res.get("embedded", {}).items():
        L = r["completion_length"]
        out += ["", f"## {name} (L = {L}), SFT model", "",
                f"Accuracy: held-out, greedy (evaluate.sampler + option). Speed: one GRPO rollout batch "
                f"({r['rollout_rows']} rows, grpo.sampler + option, temperature 1).", ""]  # fmt: skip
        out += option_table(r["accuracy"], r["rollout"], "rollout batch")
        out += ["", f"Evaluation batch ({r['eval_rows']} rows, greedy):", "",
                "| option | NFE | tokens/s | speed-up (median) |", "| --- | ---: | ---: | ---: |"]  # fmt: skip
        for opt, s in r["evaluation"].items():
            out.append(
                f"| {opt} | {s['nfe']} | {s['tokens_per_s']:,.0f} | {s['speedup']:.2f}x ({s['speedup_median']:.2f}x) |"
            )
    for steps, part in res.get("long", {}).items():
        m = part["model"]
        out += ["", f"## Long completions, LLaDA-shaped tiny model trained {steps} steps (echo task)", "",
                f"Rotary TinyDDM, {m['layers']} layers x {m['hidden']} wide ({m['num_parameters']:,} parameters), "
                f"trained here for {m['steps']} steps ({m['seconds']:.0f} s, loss {m['final_loss']:.3f}) on echo "
                f"at L in {m['lengths']}; blocks of 32, steps = L / 2 (d1's rule, the project's default), greedy; "
                "accuracy = answer tokens right on held-out prompts; speed on a batch of "
                f"{res['plan']['long_batch']}."]  # fmt: skip
        for length, r in part["lengths"].items():
            out += ["", f"### L = {length}", ""] + option_table(r["accuracy"], r["speed"], "call")
    return "\n".join(out) + "\n"


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    plan = QUICK if args.quick else FULL
    parts = set(args.parts.split(","))
    cfg = config.load(args.params)
    start = time.perf_counter()
    res = {"machine": machine_info(), "quick": args.quick, "plan": dataclasses.asdict(plan), "peak": []}
    res["peak"].append(matmul_peak(args.threads))
    torch.set_num_threads(args.threads)
    peak = res["peak"][0]["peak"]
    if "embedded" in parts:
        if not (args.sft_model and args.tasks):
            raise SystemExit("error: --parts embedded needs --sft-model and --tasks")
        res["embedded"] = embedded(cfg, args, plan, peak)
    if "long" in parts:
        res["long"] = long_completions(args, plan, peak)
    res["peak"].append(matmul_peak(args.threads))
    res["peak_gflops"] = max(p["peak"] for p in res["peak"])
    for part in ("embedded", "long"):  # fractions against the highest peak seen in the run
        for r in _speed_rows(res.get(part, {})):
            r["fraction_of_peak"] = r["gflop"] / r["best_s"] / res["peak_gflops"]
    res["seconds"] = time.perf_counter() - start
    res["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    (out / "summary.md").write_text(summary_markdown(res))
    print(f"wrote {out}/summary.md ({res['seconds']:.0f} s)", flush=True)


def _speed_rows(part: dict):
    """Every timed variant's row in a part's results."""
    for value in part.values():
        if isinstance(value, dict):
            if "best_s" in value and "gflop" in value:
                yield value
            else:
                yield from _speed_rows(value)


if __name__ == "__main__":
    main()
