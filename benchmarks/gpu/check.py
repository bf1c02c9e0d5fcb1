"""The one-call GPU check: a LLaDA-8B-sized model (the real ``LLaDAModelLM``, random bf16 weights) through ddmrl's
sampler and the GRPO phases of the paper profile, with peak memory, time and tokens/s beside the planner's
prediction (``ddmrl.plan``) and Fast-dLLM's published throughput. Written for an H100 / H200 host with no network
and PyTorch installed; it finishes in a few minutes.

    python benchmarks/gpu/check.py --model-code DIR --out OUT            # on the GPU
    python benchmarks/gpu/check.py --model-code DIR --plan-only          # here: the planner's predictions (CPU)
    python benchmarks/gpu/check.py --model-code DIR --out OUT --dry-run  # a tiny config on the CPU (the tests)
    python benchmarks/gpu/check.py --model-code DIR --out OUT --report   # OUT/summary.md again, from its results

``--model-code``: a directory holding LLaDA's ``modeling_llada.py`` and ``configuration_llada.py`` (a
GSAI-ML/LLaDA-8B-Instruct download, or ``models/`` of a Gen-Verse/MMaDA checkout). The sizes are
``llada_8b_config.json`` beside this file. What it measures (benchmarks/gpu/README.md):

* sampler: one prompt of ``--prompt`` tokens, completions of 256 and 512 tokens, blocks of 32, steps = length
  (Fast-dLLM's setting): plain, prefix cache, dual cache, threshold 0.9, dual cache + threshold;
* the paper profile's GRPO phases per process (profiles/paper_llada_math.yaml: 2 prompts x G 6, gradient
  accumulation 2, prompt 256 + completion 256, LoRA r 128 on every block projection, bf16): its rollout call, the
  old-policy log-probs of one view, and one training micro-step (forward, float32 log-softmax, backward, AdamW),
  with and without gradient checkpointing.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from ddmrl import plan
from ddmrl.config import LoraConfig, ModelSpec
from ddmrl.samplers.llada import generate
from ddmrl.training.distributed import prepare_model

HERE = Path(__file__).resolve().parent
GIB = 2**30
#: Fast-dLLM's README (NVlabs/Fast-dLLM, LLaDA-8B-Instruct, GSM8K 5-shot, block 32, batch 1, A100 80GB): tokens/s
FAST_DLLM = {256: {"plain": 6.7, "dual+threshold": 54.4}, 512: {"plain": 3.2, "dual+threshold": 35.3}}
SAMPLERS = {
    "plain": {},
    "prefix": {"kv_cache": "prefix"},
    "dual": {"kv_cache": "dual"},
    "threshold": {"parallel": "threshold", "threshold": 0.9},
    "dual+threshold": {"kv_cache": "dual", "parallel": "threshold", "threshold": 0.9},
}
#: the paper profile's LoRA targets (profiles/paper_llada_math.yaml)
LORA = LoraConfig(
    r=128,
    alpha=64.0,
    dropout=0.05,
    target_modules=r".*\.blocks\.\d+\.(q_proj|k_proj|v_proj|attn_out|ff_proj|up_proj|ff_out)",
)
PAPER = {"rollout_rows": 12, "micro_rows": 6, "prompt": 256, "completion": 256, "steps": 128, "block": 32}
DRY = {"d_model": 64, "n_layers": 2, "mlp_hidden_size": 128, "n_heads": 4, "n_kv_heads": 4, "vocab_size": 1024,
       "embedding_size": 1024, "mask_token_id": 1000, "eos_token_id": 1001, "pad_token_id": 1001}  # fmt: skip


def model_dir(code: Path, dry_run: bool) -> Path:
    """A checkpoint directory without weights: the sizes' config.json (and ``auto_map``) beside LLaDA's code."""
    missing = [n for n in ("modeling_llada.py", "configuration_llada.py") if not (code / n).is_file()]
    if missing:
        raise SystemExit(f"--model-code {code}: no {', '.join(missing)} (LLaDA's remote code)")
    out = Path(tempfile.mkdtemp(prefix="llada-"))
    for name in ("modeling_llada.py", "configuration_llada.py"):
        shutil.copyfile(code / name, out / name)
    config = json.loads((HERE / "llada_8b_config.json").read_text()) | (DRY if dry_run else {})
    (out / "config.json").write_text(json.dumps(config))
    return out


def sizes(dry_run: bool) -> dict:
    if dry_run:
        return {"lengths": (16, 32), "prompt": 8, "block": 8, "paper": PAPER | {"rollout_rows": 4, "micro_rows": 2,
                "prompt": 8, "completion": 16, "steps": 8, "block": 8}}  # fmt: skip
    return {"lengths": (256, 512), "prompt": None, "block": 32, "paper": PAPER}


def cases(args) -> list[dict]:
    """Every measurement, as the planner and the GPU both see it."""
    s, p = sizes(args.dry_run), sizes(args.dry_run)["paper"]
    prompt = s["prompt"] or args.prompt
    out = [
        {"part": "sampler", "name": name, "rows": 1, "prompt": prompt, "completion": length,
         "kwargs": {"steps": length, "block_length": s["block"], "temperature": 0.0} | kw}
        for length in s["lengths"] for name, kw in SAMPLERS.items()
    ]  # fmt: skip
    rollout = {"steps": p["steps"], "block_length": p["block"], "temperature": 0.9, "kv_cache": "prefix"}
    out.append({"part": "rollout", "name": "paper rollout (prefix cache)", "rows": p["rollout_rows"],
                "prompt": p["prompt"], "completion": p["completion"], "kwargs": rollout})  # fmt: skip
    out.append({"part": "logps", "name": "old log-probs, one view", "rows": p["rollout_rows"], "prompt": p["prompt"],
                "completion": p["completion"]})  # fmt: skip
    for ckpt in (False, True):
        out.append({"part": "train", "name": f"micro-step, LoRA r 128, checkpointing {'on' if ckpt else 'off'}",
                    "rows": p["micro_rows"], "prompt": p["prompt"], "completion": p["completion"],
                    "checkpointing": ckpt})  # fmt: skip
    return out


def lora_policy(model, checkpointing: bool):
    return prepare_model(model, "bf16", checkpointing, LORA)


def run_case(case: dict, model, mask_id: int, vocab: int, planning: bool, count: bool = True) -> dict:
    """Plan (``planning``, on fake tensors) or run one case: its peak bytes over the weights (``count``), its FLOPs
    and (sampler) model evaluations. A sampler runs as configured, and is planned with the FLOPs shortcut."""
    rows, prompt, length = case["rows"], case["prompt"], case["completion"]
    if case["part"] in ("sampler", "rollout"):
        t = plan.trace_sampling(model, rows, prompt, length, mask_id, case["kwargs"], vocab, planning, count)
        return {"bytes": t.peak, "flops": t.flops, "nfe": t.nfe}
    if case["part"] == "logps":
        return {"bytes": plan.trace_logps(model, 1, rows, prompt, length, "bf16", vocab, count)}
    t = plan.trace_training(model, rows, prompt, length, "bf16", vocab, count=count)
    # gradients and activations in the backward pass, then gradients, AdamW's new states and its step's temporaries
    return {"bytes": t.gradients + max(t.activations, t.optimizer + t.optimizer_step), "flops": t.flops}


def planned(args, build, mask_id: int) -> list[dict]:
    """The planner's bytes and FLOPs of every case (fake tensors, no GPU)."""
    rows = []
    for case in cases(args):
        model = plan.on_meta(build)
        if case["part"] == "train":
            model = lora_policy(model, case["checkpointing"])
        with plan.fake_tensors():
            vocab = model.get_input_embeddings().num_embeddings
            rows.append(case | run_case(case, plan.to_fake(model), mask_id, vocab, True))
        print(f"planned {case['name']} ({case['completion']} tokens): {rows[-1]['bytes'] / GIB:.2f} GiB", flush=True)
    return rows


def random_model(build, device: torch.device):
    """The model on ``device`` with random weights (LLaDA's init scale: normal, std 0.02), without a CPU copy."""
    model = plan.on_meta(build).to_empty(device=device)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    return model.eval()


def measure(args, build, mask_id: int, device: torch.device) -> list[dict]:
    """Every case on ``device``, timed once, uncounted, after a warm-up (one short sampler call; a training case's
    own first step): seconds and the CUDA allocator's peak over what was allocated before. On the CPU (no allocator)
    the live tensors' peak comes from a second, counted run (``plan.LiveBytes``)."""
    rows = []
    base = random_model(build, device)
    vocab = base.get_input_embeddings().num_embeddings
    warm = torch.randint(0, vocab, (1, 16), device=device)
    generate(base, warm, 32, mask_id=mask_id, block_length=32, steps=32)
    for case in cases(args):
        model = lora_policy(base, case["checkpointing"]) if case["part"] == "train" else base
        if case["part"] == "train":
            run_case(case, model, mask_id, vocab, False, count=False)
            model.zero_grad(set_to_none=True)  # the warm-up's gradients, not counted in "before"
        sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        start = time.perf_counter()
        out = run_case(case, model, mask_id, vocab, False, count=False)
        sync(device)
        row = case | {"seconds": time.perf_counter() - start, "nfe": out.get("nfe")}
        row["allocator_bytes"] = torch.cuda.max_memory_allocated() - before if device.type == "cuda" else None
        row["live_bytes"] = None if device.type == "cuda" else run_case(case, model, mask_id, vocab, False)["bytes"]
        if case["part"] in ("sampler", "rollout"):
            row["tokens_per_s"] = case["rows"] * case["completion"] / row["seconds"]
        if case["part"] == "train":  # back to the plain model for the next case
            base = model.unload()
            base.model.set_activation_checkpointing(None)
        rows.append(row)
        print(f"measured {case['name']} ({case['completion']} tokens): {row['seconds']:.2f} s", flush=True)
    return rows


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def summary(measured: list[dict], predicted: list[dict], machine: dict, unit: str = "GiB") -> str:
    """The report: one table, every number from this run's rows (and the planner's)."""
    size = {"GiB": GIB, "MiB": 2**20}[unit]
    lines = [f"# GPU check: {machine['device']}", "", f"torch {machine['torch']}, {machine['when']}", ""]
    header = [
        "part",
        "case",
        "tokens",
        "NFE",
        "seconds",
        "tokens/s",
        "Fast-dLLM tokens/s (A100)",
        f"peak {unit} (allocator)",
        f"peak {unit} (live tensors)",
        f"planned {unit}",
        "planned / allocator",
    ]
    lines += ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for m, p in zip(measured, predicted, strict=True):
        alloc, live, planned_bytes = m["allocator_bytes"], m["live_bytes"], p["bytes"]
        published = FAST_DLLM.get(m["completion"], {}).get(m["name"], "") if m["part"] == "sampler" else ""
        cells = [m["part"], m["name"], m["completion"], m["nfe"] or "", f"{m['seconds']:.3f}",
                 f"{m['tokens_per_s']:.1f}" if "tokens_per_s" in m else "", published,
                 "" if alloc is None else f"{alloc / size:.2f}", "" if live is None else f"{live / size:.2f}",
                 f"{planned_bytes / size:.2f}", f"{planned_bytes / alloc:.3f}" if alloc else ""]  # fmt: skip
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += ["", "Peaks are over the model's weights (the training step's: its gradients, activations and the AdamW "
              "states it makes). Random weights: threshold decoding commits one token per step (no token reaches "
              "confidence 0.9), so its NFE equals the plain sampler's; Fast-dLLM's speed-ups from parallel decoding "
              "need a trained model."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-code", type=Path, required=True)
    p.add_argument("--out", type=Path, default=Path("benchmarks/gpu/results"))
    p.add_argument("--prompt", type=int, default=512, help="sampler prompt tokens (a 5-shot GSM8K prompt is longer)")
    p.add_argument("--plan-only", action="store_true", help="write the planner's predictions (plan.json) and stop")
    p.add_argument("--dry-run", action="store_true", help="a tiny config on the CPU")
    p.add_argument("--report", action="store_true", help="rewrite OUT/summary.md from OUT/results.json and plan.json")
    args = p.parse_args()

    spec = ModelSpec(kind="llada", path_or_id=str(model_dir(args.model_code, args.dry_run)), trust_remote_code=True,
                     dtype="bfloat16")  # fmt: skip
    build, mask_id = plan.model_builder(spec)
    plan_file = args.out / "plan.json" if args.dry_run else HERE / "plan.json"
    key = {"dry_run": args.dry_run, "prompt": args.prompt, "cases": len(cases(args))}
    if args.plan_only or args.dry_run or not plan_file.exists():
        predicted = planned(args, build, mask_id)
        plan_file.parent.mkdir(parents=True, exist_ok=True)
        plan_file.write_text(json.dumps({"key": key, "rows": predicted}, indent=1))
    saved = json.loads(plan_file.read_text())
    if saved["key"] != key:
        raise SystemExit(f"{plan_file}: planned for {saved['key']}, this run is {key}; rerun with --plan-only")
    if args.plan_only:
        return 0
    if args.report:
        run = json.loads((args.out / "results.json").read_text())
        (args.out / "summary.md").write_text(summary(run["rows"], saved["rows"], run["machine"]))
        print((args.out / "summary.md").read_text())
        return 0
    device = torch.device("cuda" if torch.cuda.is_available() and not args.dry_run else "cpu")
    machine = {"device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
               "torch": torch.__version__, "when": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
    measured = measure(args, build, mask_id, device)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"machine": machine, "rows": measured}, indent=1))
    (args.out / "summary.md").write_text(summary(measured, saved["rows"], machine, "MiB" if args.dry_run else "GiB"))
    print((args.out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
