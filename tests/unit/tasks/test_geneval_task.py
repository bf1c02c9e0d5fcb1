"""The GenEval task for real text-to-image models (ddmrl.tasks.geneval): lazy sources, held-out prompts in GenEval's
schema, training prompts that never repeat a held-out prompt, binding to a model's layout and decoder, rewards of
decoded images."""

from __future__ import annotations

import json

import pytest
import torch

from ddmrl.config import ConfigError
from ddmrl.io import DataError
from ddmrl.tasks import make_task

LINES = [
    {"tag": "single_object", "include": [{"class": "bench", "count": 1}], "prompt": "a photo of a bench"},
    {"tag": "colors", "include": [{"class": "cow", "count": 1, "color": "red"}], "prompt": "a photo of a red cow"},
]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(m) + "\n" for m in LINES))
    train = [{**LINES[0]}, {"tag": "single_object", "include": [{"class": "dog", "count": 1}], "prompt": "a dog"}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(m) + "\n" for m in train))
    return str(tmp_path / "eval.jsonl"), str(tmp_path / "train.jsonl")


def test_building_reads_nothing_and_checks_the_reward_section(tmp_path):
    task = make_task("geneval", eval=str(tmp_path / "missing.jsonl"), num_image_tokens=16, max_seq_length=8)
    assert (task.completion_length, task.prompt_length, task.modality) == (16, 10, "image")
    with pytest.raises(DataError, match="missing.jsonl"):
        task.held_out(1, 0)
    with pytest.raises(ValueError, match="eval = ''"):
        make_task("geneval")
    with pytest.raises(ConfigError, match="reward_models.r.model = 'nope'"):
        make_task("geneval", eval="x.jsonl", reward_models={"r": {"model": "nope"}})


def test_held_out_prompts_keep_genevals_lines_and_training_never_repeats_them(files):
    eval_file, train_file = files
    task = make_task("geneval", eval=eval_file, train=train_file)
    held = task.held_out(10, 0)
    assert [ex.id for ex in held] == ["test-0", "test-1"] and held[1].gold["metadata"] == LINES[1]
    assert task.generate(1, 0)[0].prompt == "a dog"  # the bench prompt of the training file is held out
    with pytest.raises(DataError, match="1 training prompts outside the held-out ones, 2 needed"):
        task.generate(2, 0)
    with pytest.raises(DataError, match="train is not set"):
        make_task("geneval", eval=eval_file).generate(1, 0)


def test_prompts_and_rewards_come_from_the_bound_model(files):
    task = make_task("geneval", eval=files[0], train=files[1], num_image_tokens=4)
    held = task.held_out(2, 0)
    with pytest.raises(RuntimeError, match="not bound to a model"):
        task.encode_prompts(None, held)
    lengths = lambda captions: torch.tensor([[len(c)] for c in captions])  # noqa: E731  (a prompt layout)
    grey = lambda ids: ids[:, :, None, None].expand(-1, -1, 2, 3).to(torch.uint8)  # noqa: E731  ([N, H=L, W=2, 3])
    task.bind(lengths, grey)
    assert task.encode_prompts(None, held).tolist() == [[18], [20]]
    ids = torch.tensor([[1, 2, 3, 4], [9, 9, 9, 9]])
    assert task.decode(None, ids) == ["1 2 3 4", "9 9 9 9"]
    images = task.images(ids)
    assert images[0].size == (2, 4) and images[1].getpixel((0, 0)) == (9, 9, 9)

    class Brightness:
        def score(self, images, prompts):
            return [sum(im.convert("L").getdata()) / len(prompts[i]) for i, im in enumerate(images)]

    task.reward_model = Brightness()
    assert task.batch_rewards(task.decode(None, ids), ids, held) == pytest.approx([(1 + 2 + 3 + 4) * 2 / 18, 72 / 20])
