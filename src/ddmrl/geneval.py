"""GenEval's on-disk formats: the image folder layout, the per-image results rows and the summary scores.

Mirrors djghosh13/geneval:

* layout (what ``evaluation/evaluate_images.py`` walks): ``<root>/<NNNNN>/metadata.jsonl`` holding ONE JSON object
  (the N-th line of ``evaluation_metadata.jsonl``, read with ``json.load``) and ``<root>/<NNNNN>/samples/<kkkk>.png``;
* results rows: ``filename, tag, prompt, correct, reason, metadata`` (JSON string), ``details`` (JSON string of the
  kept boxes per class);
* summary (``evaluation/summary_scores.py``): images, prompts (grouped by the metadata string), % correct images,
  % correct prompts (any image correct), per-tag accuracy over images, and Overall = the unweighted mean of the
  tag accuracies. GenEval prints Overall as a fraction; here every figure is a percentage.

:func:`evaluate_folder` judges the PNGs with ``geneval_mini``'s exact detector and rules (CPU, no weights); the
real GenEval (Mask2Former + CLIP) writes the same rows, so :func:`summarize` reads either.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ddmrl.io import DataError, atomic_path, read_jsonl
from ddmrl.tasks.geneval_mini import Grid, check, read_png, render_png

__all__ = ["evaluate_folder", "format_summary", "summarize", "write_geneval_folder"]

RESULT_KEYS = ("filename", "tag", "prompt", "correct", "reason", "metadata", "details")


def write_geneval_folder(
    root: str | Path, metadata: list[dict[str, Any]], images: list[list[Grid]], cell_px: int = 16
) -> None:
    """Write ``images[n][k]`` as ``<root>/<n:05d>/samples/<k:04d>.png`` next to ``<root>/<n:05d>/metadata.jsonl``.

    The whole folder is built aside and renamed into place (an existing ``root`` is replaced).
    """
    if len(metadata) != len(images):
        raise ValueError(f"write_geneval_folder: {len(metadata)} metadata lines but {len(images)} image lists")
    with atomic_path(root) as tmp:
        tmp.mkdir()
        for n, (meta, grids) in enumerate(zip(metadata, images, strict=True)):
            folder = tmp / f"{n:05d}"
            (folder / "samples").mkdir(parents=True)
            (folder / "metadata.jsonl").write_text(json.dumps(meta) + "\n")  # key order kept, as GenEval writes it
            for k, grid in enumerate(grids):
                render_png(grid, folder / "samples" / f"{k:04d}.png", cell_px=cell_px)


def evaluate_folder(root: str | Path, height: int = 8, width: int = 8) -> list[dict[str, Any]]:
    """One GenEval results row per image of a GenEval layout folder, judged with ``geneval_mini``'s rules.

    Walks like ``evaluate_images.py``: all-digit subfolders only, images whose name matches ``\\d+\\.png``
    (``re.match``); sorted here so that the rows come in a fixed order.
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: not a folder of GenEval images")
    rows = []
    for sub in sorted(os.listdir(root)):
        folder = root / sub
        if not folder.is_dir() or not sub.isdigit():
            continue
        try:
            with open(folder / "metadata.jsonl") as fp:
                metadata = json.load(fp)
        except (OSError, json.JSONDecodeError) as e:
            raise DataError(f"{folder / 'metadata.jsonl'}: cannot read one JSON object ({e})") from None
        for name in sorted(os.listdir(folder / "samples")):
            path = folder / "samples" / name
            if not path.is_file() or not re.match(r"\d+\.png", name):
                continue
            correct, reason, details = check(read_png(path, height, width), metadata)
            rows.append(
                {
                    "filename": str(path),
                    "tag": metadata["tag"],
                    "prompt": metadata["prompt"],
                    "correct": correct,
                    "reason": reason,
                    "metadata": json.dumps(metadata),
                    "details": json.dumps(details),
                }
            )
    return rows


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
