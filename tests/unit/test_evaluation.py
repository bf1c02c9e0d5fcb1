"""Held-out evaluation of a text-to-image task (ddmrl.evaluation.evaluate_images): GenEval's protocol end to end."""

from __future__ import annotations

import json

import pytest

from ddmrl.config import EvaluateConfig, SamplerConfig
from ddmrl.evaluation import evaluate_images
from ddmrl.geneval import summarize
from ddmrl.models.layout import for_task
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.tasks import make_task
from ddmrl.tasks.encoding import prompt_length
from ddmrl.tasks.geneval_mini import check, parse_grid, read_png


@pytest.fixture(scope="module")
def task():
    return make_task("geneval_mini")


def test_images_are_written_in_geneval_layout_and_judged_from_the_pngs(task, make_model, tmp_path):
    tok = build_tokenizer([task.alphabet], task.special_tokens)
    model = for_task(make_model(max_positions=prompt_length(task) + 65, tokenizer=tok), tok, task)
    held_out = task.held_out(12, seed=0)  # two prompts per tag
    cfg = EvaluateConfig(samples_per_prompt=2, batch_size=6, sampler=SamplerConfig(name="maskgit", steps=4))
    metrics, records, rows = evaluate_images(model, tok, task, held_out, cfg, tmp_path / "images", seed=3)

    assert len(records) == len(rows) == 2 * len(held_out) == metrics["n_samples"]
    assert metrics["nfe"] == 4 * 4  # 4 steps in each of 4 chunks of 6 samples (3 prompts x 2)
    for n, ex in enumerate(held_out):
        folder = tmp_path / "images" / f"{n:05d}"
        assert json.loads((folder / "metadata.jsonl").read_text()) == ex.gold
        for k in range(2):
            png = folder / "samples" / f"{k:04d}.png"
            grid = parse_grid(records[2 * n + k]["generation"])
            assert read_png(png) == grid  # the PNG holds exactly the generated image
            row = next(r for r in rows if r["filename"] == str(png))
            assert row["correct"] == check(grid, ex.gold)[0] == (records[2 * n + k]["reward"] == 1.0)
    summary = summarize(rows)
    assert metrics["accuracy"] == metrics["overall"] == summary["overall"]
    assert metrics["tags"] == summary["tags"] and set(summary["tags"]) == {ex.gold["tag"] for ex in held_out}

    again, _, _ = evaluate_images(model, tok, task, held_out, cfg, tmp_path / "again", seed=3)
    assert [p.read_bytes() for p in sorted((tmp_path / "again").rglob("*.png"))] == [
        p.read_bytes() for p in sorted((tmp_path / "images").rglob("*.png"))
    ]  # seeded: a rerun draws the same images


def test_min_images_per_tag_raises_the_samples_of_small_tags(task, make_model, tmp_path):
    """A tag with 1 held-out prompt gets 6 samples, a tag with 3 gets 2 (ceil(6 / 3)), never fewer than
    samples_per_prompt; the folders, records and results follow, and every tag reaches the minimum."""
    from collections import Counter

    from ddmrl.evaluation import samples_per_item

    tok = build_tokenizer([task.alphabet], task.special_tokens)
    model = for_task(make_model(max_positions=prompt_length(task) + 65, tokenizer=tok), tok, task)
    held_out = task.held_out(12, seed=0)
    held_out = [ex for ex in held_out if ex.gold["tag"] != "single_object"] + task.held_out(18, seed=1)[:1]
    tags = Counter(ex.gold["tag"] for ex in held_out)
    cfg = EvaluateConfig(
        samples_per_prompt=2, min_images_per_tag=5, batch_size=6, sampler=SamplerConfig(name="maskgit", steps=2)
    )
    counts = samples_per_item(held_out, cfg)
    assert counts == [max(2, -(-5 // tags[ex.gold["tag"]])) for ex in held_out] and 5 in counts
    metrics, records, rows = evaluate_images(model, tok, task, held_out, cfg, tmp_path / "images", seed=3)
    assert metrics["n_samples"] == len(records) == len(rows) == sum(counts)
    for n, k in enumerate(counts):
        assert len(list((tmp_path / "images" / f"{n:05d}" / "samples").glob("*.png"))) == k
    per_tag = Counter(r["tag"] for r in rows)
    assert all(v >= 5 for v in per_tag.values())
    assert [r["sample"] for r in records] == [k for c in counts for k in range(c)]
