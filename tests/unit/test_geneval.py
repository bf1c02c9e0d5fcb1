"""GenEval formats: folder layout as evaluate_images.py walks it, results rows, summary_scores.py arithmetic."""

import json
import os
import random

import pandas as pd
import pytest

from ddmrl.geneval import RESULT_KEYS, format_summary, summarize
from ddmrl.io import DataError, write_jsonl
from ddmrl.tasks.geneval_mini import (
    GenEvalMini,
    check,
    evaluate_folder,
    make_metadata,
    parse_grid,
    write_geneval_folder,
)


@pytest.fixture(scope="module")
def task():
    return GenEvalMini()


def blank() -> list[list[int]]:
    return [[0] * 8 for _ in range(8)]


def test_layout_is_genevals(tmp_path, task):
    examples = task.generate(3, seed=0)
    metas = [e.gold for e in examples]
    images = [[parse_grid(e.answer)] * k for e, k in zip(examples, (2, 1, 3), strict=True)]
    root = tmp_path / "images"
    write_geneval_folder(root, metas, images, cell_px=4)
    assert sorted(os.listdir(root)) == ["00000", "00001", "00002"]
    for n, meta in enumerate(metas):
        folder = root / f"{n:05d}"
        assert sorted(os.listdir(folder)) == ["metadata.jsonl", "samples"]
        with open(folder / "metadata.jsonl") as fp:
            assert json.load(fp) == meta  # ONE object, read with json.load as evaluate_images.py does
        assert (folder / "metadata.jsonl").read_text() == json.dumps(meta) + "\n"  # GenEval's key order
        assert sorted(os.listdir(folder / "samples")) == [f"{k:04d}.png" for k in range(len(images[n]))]
    with pytest.raises(ValueError, match="2 metadata lines but 1"):
        write_geneval_folder(tmp_path / "bad", metas[:2], images[:1])
    write_geneval_folder(root, metas[:1], images[:1])  # an existing folder is replaced whole
    assert sorted(os.listdir(root)) == ["00000"]


def test_evaluate_folder_rows(tmp_path, task):
    ex = task.generate(4, seed=1)
    right = [parse_grid(e.answer) for e in ex]
    images = [[right[0], blank()], [right[1]], [blank(), blank()], [right[3], right[3]]]
    root = tmp_path / "imgs"
    write_geneval_folder(root, [e.gold for e in ex], images)
    (root / "notes").mkdir()  # not all digits: skipped
    (root / "00001" / "samples" / "grid.png").write_bytes(b"x")  # not \d+\.png: skipped
    (root / "00001" / "samples" / "readme.txt").write_text("x")
    rows = evaluate_folder(root)
    assert len(rows) == 7
    assert all(tuple(r) == RESULT_KEYS for r in rows)
    assert [r["correct"] for r in rows] == [True, False, True, False, False, True, True]
    for r in rows:
        meta = json.loads(r["metadata"])
        assert r["tag"] == meta["tag"] and r["prompt"] == meta["prompt"]
        assert isinstance(json.loads(r["details"]), dict) and r["filename"].endswith(".png")
    assert rows[1]["reason"] == check(blank(), ex[0].gold)[1] != ""
    assert rows[0]["details"] == json.dumps(check(right[0], ex[0].gold)[2])
    bad = tmp_path / "broken"
    (bad / "00000" / "samples").mkdir(parents=True)
    (bad / "00000" / "metadata.jsonl").write_text("{not json")
    with pytest.raises(DataError, match="metadata.jsonl"):
        evaluate_folder(bad)
    with pytest.raises(DataError, match="not a folder"):
        evaluate_folder(tmp_path / "missing")


def _row(tag: str, prompt: str, correct: bool) -> dict:
    meta = {"tag": tag, "include": [], "prompt": prompt}
    return {"filename": "x.png", "tag": tag, "prompt": prompt, "correct": correct, "reason": "",
            "metadata": json.dumps(meta), "details": "{}"}  # fmt: skip


def test_summarize_hand_computed(tmp_path):
    rows = [
        _row("colors", "p1", True), _row("colors", "p1", False),  # prompt p1: correct (any)
        _row("colors", "p2", False), _row("colors", "p2", False),  # p2: not
        _row("position", "p3", True),  # p3: correct
        _row("counting", "p4", False), _row("counting", "p4", True), _row("counting", "p4", True),
    ]  # fmt: skip
    s = summarize(rows)
    assert s["total_images"] == 8 and s["total_prompts"] == 4
    assert s["correct_images"] == pytest.approx(100 * 4 / 8)
    assert s["correct_prompts"] == pytest.approx(100 * 3 / 4)
    assert s["tags"] == {
        "colors": {"accuracy": 25.0, "correct": 1, "total": 4},
        "position": {"accuracy": 100.0, "correct": 1, "total": 1},
        "counting": {"accuracy": pytest.approx(200 / 3), "correct": 2, "total": 3},
    }
    assert s["overall"] == pytest.approx((25 + 100 + 200 / 3) / 3)  # unweighted over tags, not 50 (pooled)
    write_jsonl(tmp_path / "results.jsonl", rows)
    assert summarize(tmp_path / "results.jsonl") == s
    text = format_summary(s)
    assert "Total prompts: 4" in text and f"Overall score (avg. over tasks): {(25 + 100 + 200 / 3) / 300:.5f}" in text
    with pytest.raises(ValueError, match="no results"):
        summarize([])


def test_summarize_equals_summary_scores_pandas(tmp_path):
    """Same numbers as summary_scores.py's pandas code on random rows with unequal tag and prompt counts."""
    rng = random.Random(0)
    tags = ["single_object", "two_object", "counting", "colors", "position", "color_attr"]
    rows = []
    for tag, n_prompts in zip(tags, (2, 5, 3, 7, 11, 4), strict=True):
        for p in range(n_prompts):
            rows += [_row(tag, f"{tag}{p}", rng.random() < 0.4) for _ in range(rng.randint(1, 4))]
    write_jsonl(tmp_path / "r.jsonl", rows)
    df = pd.read_json(tmp_path / "r.jsonl", orient="records", lines=True)
    s = summarize(tmp_path / "r.jsonl")
    assert s["total_images"] == len(df) and s["total_prompts"] == len(df.groupby("metadata"))
    assert s["correct_images"] == pytest.approx(100 * df["correct"].mean())
    assert s["correct_prompts"] == pytest.approx(100 * df.groupby("metadata")["correct"].any().mean())
    task_scores = [g["correct"].mean() for _, g in df.groupby("tag", sort=False)]
    assert list(s["tags"]) == list(df.groupby("tag", sort=False).groups)
    assert s["overall"] == pytest.approx(100 * sum(task_scores) / len(task_scores))
    assert s["overall"] != pytest.approx(s["correct_images"])


def test_end_to_end_reference_scenes_score_100(tmp_path, task):
    rng = random.Random(0)
    metas = [make_metadata("position", ("plus", "bar", rel)) for rel in ("left of", "right of", "above", "below")]
    metas += [e.gold for e in task.generate(8, seed=2)]
    images = [[parse_grid(task.example(m, rng).answer) for _ in range(2)] for m in metas]
    write_geneval_folder(tmp_path / "g", metas, images)
    s = summarize(evaluate_folder(tmp_path / "g"))
    assert s["total_images"] == 24 and s["total_prompts"] == len({m["prompt"] for m in metas}) > 8
    assert s["overall"] == 100.0
