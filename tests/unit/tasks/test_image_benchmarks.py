"""The evaluation benchmarks of the image branch (ddmrl.tasks.hps, ddmrl.tasks.dpg on ddmrl.tasks.mmada_images):
held-out prompts only, images written and scored as read back, summaries computed by hand; DPG-Bench's summary of
the task's rows equals the reference aggregation (ddmrl.rewards.dpg.compute_dpg_bench) of the same grids."""

from __future__ import annotations

import json

import pytest
import torch

from ddmrl.config import ConfigError
from ddmrl.io import DataError
from ddmrl.rewards.dpg import compute_dpg_bench, load_dpg_images, load_dpg_questions
from ddmrl.tasks import make_task

COLORS = {0: (0, 0, 0), 1: (255, 255, 255), 2: (255, 0, 0)}  # completion id -> solid colour


def solid(ids: torch.Tensor) -> torch.Tensor:
    """A stand-in decoder: completion ids [N, L] -> [N, 4, 4, 3] images in the colour of each row's first id."""
    return torch.stack([torch.tensor(COLORS[int(row[0])], dtype=torch.uint8).expand(4, 4, 3) for row in ids])


def bound(task):
    task.bind(lambda captions: torch.zeros(len(captions), 3, dtype=torch.long), solid)
    return task


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


class Brightness:
    """A stand-in scorer: the image's mean grey level (0..1) plus the prompt's length / 100."""

    def score(self, images, prompts):
        return [
            sum(im.convert("L").getdata()) / (255 * im.width * im.height) + len(p) / 100
            for im, p in zip(images, prompts, strict=True)
        ]


def test_benchmarks_have_held_out_prompts_only(tmp_path):
    hps = make_task("hps", eval=write_jsonl(tmp_path / "hps.jsonl", [{"caption": "a cat", "prompt_id": 7}]))
    assert hps.evaluation_only and hps.modality == "image" and hps.image_layout == "mmada"
    assert [(ex.id, ex.prompt) for ex in hps.held_out(10, 0)] == [("7", "a cat")]
    for call in (lambda: hps.generate(1, 0), lambda: hps.sample(None), lambda: hps.batch_rewards([], None, [])):
        with pytest.raises(DataError, match="hps is an evaluation benchmark"):
            call()
    with pytest.raises(ValueError, match="eval = ''"):
        make_task("hps")
    with pytest.raises(ValueError, match="questions = ''"):
        make_task("dpg", eval="p.jsonl")
    with pytest.raises(ConfigError, match="scorer.s.model = 'nope'"):
        make_task("hps", eval="p.jsonl", scorer={"s": {"model": "nope"}})
    with pytest.raises(ValueError, match="vqa.model = 'blip'"):
        make_task("dpg", eval="p.jsonl", questions="q.csv", vqa={"model": "blip"})


def test_hps_scores_every_image_as_written_and_averages_per_category(tmp_path):
    rows = [
        {"caption": "ab", "prompt_id": "p0", "category": "Arts"},
        {"caption": "abcd", "prompt_id": "p1", "category": "Plants"},
    ]
    task = bound(make_task("hps", eval=write_jsonl(tmp_path / "hps.jsonl", rows), num_image_tokens=2))
    task.scorer = Brightness()
    examples = task.held_out(2, 0)
    ids = [torch.tensor([[1, 0], [0, 0]]), torch.tensor([[2, 0], [1, 0]])]  # p0: white, black; p1: red, white
    out = task.judge_images(tmp_path / "images", examples, [["x", "y"], ["x", "y"]], ids)
    assert [(r["id"], r["sample"]) for r in out] == [("p0", 0), ("p0", 1), ("p1", 0), ("p1", 1)]
    assert (tmp_path / "images" / "p1" / "1.png").is_file()
    red = round(0.299 * 255) / 255  # PIL's L of pure red
    expected = [1 + 0.02, 0 + 0.02, red + 0.04, 1 + 0.04]
    assert [r["score"] for r in out] == pytest.approx(expected, abs=1e-9)
    summary = task.summarize_images(out)
    assert summary["score"] == pytest.approx(sum(expected) / 4)
    assert summary["per_category"] == pytest.approx({"Arts": 0.52, "Plants": (red + 1) / 2 + 0.04})
    assert summary["n_images"] == 4


HEADER = (
    "item_id,text,keywords,proposition_id,dependency,category_broad,category_detailed,tuple,question_natural_language"
)
QUESTIONS = [
    "a,t,k,1,0,entity,whole,entity - whole (cat),Is it white?",
    'a,t,k,2,1,attribute,color,"attribute - color (cat, red)",Is it red?',
    "b,t,k,1,0,entity,whole,entity - whole (dog),Is it white?",
]


def white_vqa(image, question):
    """Answers 'yes' to 'Is it white?' on a white tile and to 'Is it red?' on a red one."""
    color = image.getpixel((0, 0))
    return "yes" if (question, color) in {("Is it white?", (255, 255, 255)), ("Is it red?", (255, 0, 0))} else "no"


def test_dpg_tiles_four_images_and_summarizes_as_the_reference(tmp_path):
    (tmp_path / "q.csv").write_text("\n".join([HEADER, *QUESTIONS]) + "\n")
    prompts = write_jsonl(
        tmp_path / "dpg.jsonl", [{"item_id": "a", "prompt": "a cat"}, {"item_id": "b", "prompt": "a dog"}]
    )
    task = bound(make_task("dpg", eval=prompts, questions=str(tmp_path / "q.csv"), num_image_tokens=1,
                           vqa={"model": "vqa_server", "url": "http://127.0.0.1:1"}))  # fmt: skip
    task.vqa = white_vqa
    assert task.samples_per_prompt == 4
    examples = task.held_out(5, 0)
    ids = [torch.tensor([[1], [2], [0], [1]]), torch.tensor([[1], [1], [1], [0]])]
    out = task.judge_images(tmp_path / "grids", examples, [["x"] * 4] * 2, ids)
    # a: white (q1 yes, q2 no: 1/2), red (q1 no, q2 yes -> zeroed by its parent: 0), black (0), white (1/2) -> 1/4
    # b: white, white, white (1), black (0) -> 3/4; DPG = (1/4 + 3/4) / 2 x 100 = 50
    assert [r["score"] for r in out] == [0.25, 0.75]
    summary = task.summarize_images(out)
    assert summary["score"] == 50.0
    # categories: the last tile's answers before dependencies: a (white) q1 1, q2 0; b (black) q1 0
    assert summary["l2"] == {"attribute - color": 0.0, "entity - whole": 50.0}
    reference = compute_dpg_bench(
        load_dpg_images(tmp_path / "grids"), load_dpg_questions(tmp_path / "q.csv"), white_vqa, 4
    )
    assert (summary["score"], summary["l1"], summary["l2"]) == (reference.overall, reference.l1, reference.l2)
    with pytest.raises(DataError, match="2 images for item a"):
        task.judge_images(tmp_path / "g2", examples[:1], [["x"] * 2], [ids[0][:2]])
