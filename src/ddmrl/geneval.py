"""GenEval's on-disk formats: the image folder layout, the per-image results rows and the summary scores.

Mirrors djghosh13/geneval:

* layout (what ``evaluation/evaluate_images.py`` walks): ``<root>/<NNNNN>/metadata.jsonl`` holding ONE JSON object
  (the N-th line of ``evaluation_metadata.jsonl``, read with ``json.load``) and ``<root>/<NNNNN>/samples/<kkkk>.png``;
* results rows: ``filename, tag, prompt, correct, reason, metadata`` (JSON string), ``details`` (JSON string of the
  kept boxes per class);
* summary (``evaluation/summary_scores.py``): images, prompts (grouped by the metadata string), % correct images,
  % correct prompts (any image correct), per-tag accuracy over images, and Overall = the unweighted mean of the
  tag accuracies. GenEval prints Overall as a fraction; here every figure is a percentage.

``geneval_mini`` writes this layout and judges its PNGs with its exact detector and rules (CPU, no weights;
:func:`ddmrl.tasks.geneval_mini.evaluate_folder`); the real GenEval (Mask2Former + CLIP) writes the same rows, so
:func:`summarize` reads either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddmrl.io import read_jsonl

__all__ = ["format_summary", "summarize"]

RESULT_KEYS = ("filename", "tag", "prompt", "correct", "reason", "metadata", "details")


def summarize(results: list[dict[str, Any]] | str | Path) -> dict[str, Any]:
    """``summary_scores.py`` on results rows (or a results JSONL path), every score in percent.

    Returns ``{"total_images", "total_prompts", "correct_images", "correct_prompts", "tags": {tag: {"accuracy",
    "correct", "total"}} (in order of first appearance), "overall"}``.
    """
    rows = read_jsonl(results, required=("tag", "correct", "metadata")) if isinstance(results, str | Path) else results
    if not rows:
        raise ValueError("summarize: no results rows")
    by_prompt: dict[str, bool] = {}
    by_tag: dict[str, list[bool]] = {}
    for row in rows:
        by_prompt[row["metadata"]] = by_prompt.get(row["metadata"], False) or bool(row["correct"])
        by_tag.setdefault(row["tag"], []).append(bool(row["correct"]))
    tags = {t: {"accuracy": 100.0 * sum(v) / len(v), "correct": sum(v), "total": len(v)} for t, v in by_tag.items()}
    return {
        "total_images": len(rows),
        "total_prompts": len(by_prompt),
        "correct_images": 100.0 * sum(bool(r["correct"]) for r in rows) / len(rows),
        "correct_prompts": 100.0 * sum(by_prompt.values()) / len(by_prompt),
        "tags": tags,
        "overall": sum(t["accuracy"] for t in tags.values()) / len(tags),
    }


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as ``summary_scores.py`` prints it (Overall as a fraction, like GenEval)."""
    lines = [
        "Summary",
        "=======",
        f"Total images: {summary['total_images']}",
        f"Total prompts: {summary['total_prompts']}",
        f"% correct images: {summary['correct_images']:.2f}%",
        f"% correct prompts: {summary['correct_prompts']:.2f}%",
        "",
        "Task breakdown",
        "==============",
    ]
    for tag, t in summary["tags"].items():
        lines.append(f"{tag:<16} = {t['accuracy']:.2f}% ({t['correct']} / {t['total']})")
    return "\n".join([*lines, "", f"Overall score (avg. over tasks): {summary['overall'] / 100:.5f}"])
