"""The validation workspace's rows: each run's gain over its SFT model, paired seed by seed (seed s from base model
s), bootstrapped over base models and items (``ddmrl.tables.seedwise_gain``, the main job's Δ vs start), in greedy
decoding (``data/evaluate``, d1's protocol) and in sampled decoding at temperature 1 (``data/evaluate_t1``, one
sample per item; ``sampled.sh``), and each arm's difference from the main job's settings, paired the same way.

    python docs/validation_run/summary.py > docs/validation_run/summary.md   # in the validation workspace
"""

from pathlib import Path

from ddmrl.tables import cell, display, seedwise_gain, text_scores

TASKS = ["sudoku4", "chain"]
SEEDS = [0, 1, 2]
#: arm: (its rows' name suffix, its methods); "" is the main job's settings (learning rate 1e-4, 160 steps)
ARMS = {
    "main job (1e-4, 160 steps)": ("", ["diffu_grpo", "unigrpo", "maskgrpo", "rebrl"]),
    "learning rate 3e-4": ("_lr3", ["diffu_grpo", "unigrpo", "maskgrpo", "rebrl"]),
    "320 steps": ("_steps320", ["diffu_grpo", "unigrpo"]),
}


def scores(folder: str, name: str, task: str):
    paths = [Path("data") / folder / name.format(s=s) / f"{task}.jsonl" for s in SEEDS]
    return [text_scores(p, task) for p in paths] if all(p.exists() for p in paths) else None


def gain(folder: str, run: str, start: str, task: str) -> str:
    runs, starts = (scores(folder, n, task) for n in (run, start))
    return "—" if runs is None or starts is None else cell(seedwise_gain(runs, starts), signed=True)


head = " | ".join(f"{t}: Δ vs SFT, greedy | {t}: Δ vs SFT, T = 1 | {t}: Δ vs main job, greedy" for t in TASKS)
print(f"| method | arm | {head} |")
print("|---|---|" + "---|---|---|" * len(TASKS))
for arm, (suffix, methods) in ARMS.items():
    for method in methods:
        cells = []
        for task in TASKS:
            run = f"{method}{suffix}_{task}_s{{s}}"
            versus = gain("evaluate", run, f"{method}_{task}_s{{s}}", task) if suffix else "—"
            cells += [gain(folder, run, "sft_s{s}", task) for folder in ("evaluate", "evaluate_t1")] + [versus]
        print(f"| {display(method)} | {arm} | " + " | ".join(cells) + " |")
