"""The tasks directory written by the download stage: per task, its generator parameters and held-out set.

    <tasks dir>/<task>/task.json   {"name": ..., "params": {...}}
    <tasks dir>/<task>/eval.jsonl  one Example record per line

Training data is not stored: every stage draws fresh examples from the generator, excluding the held-out ids.
"""

from __future__ import annotations

from pathlib import Path

from ddmrl.io import DataError, read_json, read_jsonl, write_json, write_jsonl
from ddmrl.seeding import derive_seed
from ddmrl.tasks import make_task
from ddmrl.tasks.base import Example, Task


def write_task(root: str | Path, task: Task, params: dict, eval_examples: list[Example]) -> None:
    write_json(Path(root) / task.name / "task.json", {"name": task.name, "params": params})
    write_jsonl(Path(root) / task.name / "eval.jsonl", [ex.to_record() for ex in eval_examples])


def load_task(root: str | Path, name: str) -> tuple[Task, list[Example]]:
    """(task, held-out examples) from a tasks directory."""
    path = Path(root) / name / "task.json"
    meta = read_json(path)
    if not isinstance(meta, dict) or meta.get("name") != name:
        found = meta.get("name") if isinstance(meta, dict) else meta
        raise DataError(f"{path}: names task {found!r}, expected {name!r}")
    params = meta.get("params", {})
    try:
        task = make_task(name, **(params if isinstance(params, dict) else {"params": params}))
    except (TypeError, ValueError) as e:
        raise DataError(f"{path}: cannot build task {name!r} with params {params!r} ({e})") from None
    records = read_jsonl(Path(root) / name / "eval.jsonl", required=("id", "prompt", "answer", "gold"))
    return task, [Example.from_record(r) for r in records]


def training_draw(task: Task, held_out: list[Example], seed: int, purpose: str, n: int):
    """A function ``i -> n`` fresh training examples, disjoint from ``held_out``, seeded by (seed, purpose, i)."""
    exclude = {ex.id for ex in held_out}
    return lambda i: task.generate(n, derive_seed(seed, purpose, task.name, i), exclude=exclude)
