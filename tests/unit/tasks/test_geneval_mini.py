"""geneval_mini: GenEval's prompts, metadata and rules on hand-made scenes, token layout, sampler, PNG round trip."""

import collections
import itertools
import json
import random

import numpy as np
import pytest

from ddmrl.config import ConfigError
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.rewards.interface import ImageRewardModel
from ddmrl.tasks import TASKS, make_task
from ddmrl.tasks.base import Example, Task
from ddmrl.tasks.geneval_mini import (
    COLORS,
    PALETTE,
    PLACEMENTS,
    SHAPES,
    TAGS,
    GenEvalMini,
    all_metadata,
    detect,
    evaluate,
    make_metadata,
    parse_grid,
    read_png,
    relative_position,
    render_png,
    slot_origins,
)

CODE = {".": 0, **{c[0]: i + 1 for i, c in enumerate(COLORS)}}  # r o y g b p


def grid(*rows: str) -> list[list[int]]:
    """A scene from ASCII rows: ``.`` background, ``r o y g b p`` the six colours."""
    assert all(len(r) == len(rows[0]) for r in rows)
    return [[CODE[ch] for ch in row] for row in rows]


def meta(tag: str, *args) -> dict:
    return make_metadata(tag, args)


@pytest.fixture(scope="module")
def task():
    return GenEvalMini()


@pytest.fixture(scope="module")
def tok(task):
    return build_tokenizer(task.alphabet, task.special_tokens)


def judge(task, g, metadata) -> dict:
    return task.score(task.to_text(g), Example(id=metadata["prompt"], prompt="", answer="", gold=metadata))


# ---------------------------------------------------------------- prompts and metadata: GenEval's exact lines
def test_metadata_lines_match_geneval():
    """make_metadata with COCO names reproduces lines of GenEval's evaluation_metadata.jsonl byte for byte."""
    real = [
        '{"tag": "single_object", "include": [{"class": "elephant", "count": 1}], "prompt": "a photo of an elephant"}',
        '{"tag": "two_object", "include": [{"class": "bench", "count": 1}, {"class": "sports ball", "count": 1}], '
        '"prompt": "a photo of a bench and a sports ball"}',
        '{"tag": "counting", "include": [{"class": "bus", "count": 3}], "exclude": [{"class": "bus", "count": 4}], '
        '"prompt": "a photo of three buses"}',
        '{"tag": "colors", "include": [{"class": "fire hydrant", "count": 1, "color": "blue"}], '
        '"prompt": "a photo of a blue fire hydrant"}',
        '{"tag": "position", "include": [{"class": "teddy bear", "count": 1}, {"class": "dog", "count": 1, '
        '"position": ["right of", 0]}], "prompt": "a photo of a dog right of a teddy bear"}',
        '{"tag": "color_attr", "include": [{"class": "skateboard", "count": 1, "color": "yellow"}, {"class": '
        '"computer mouse", "count": 1, "color": "orange"}], '
        '"prompt": "a photo of a yellow skateboard and an orange computer mouse"}',
    ]
    ours = [
        meta("single_object", "elephant"),
        meta("two_object", "bench", "sports ball"),
        meta("counting", "bus", 3),
        meta("colors", "fire hydrant", "blue"),
        meta("position", "dog", "teddy bear", "right of"),
        meta("color_attr", "skateboard", "computer mouse", "yellow", "orange"),
    ]
    assert [json.dumps(m) for m in ours] == real


def test_all_metadata_counts_and_distinct():
    ms = all_metadata()
    per_tag = {t: sum(m["tag"] == t for m in ms) for t in TAGS}
    assert per_tag == {"single_object": 6, "two_object": 30, "counting": 18, "colors": 36, "position": 120,
                       "color_attr": 900}  # fmt: skip
    assert len({m["prompt"] for m in ms}) == len(ms) == 1110
    assert "a photo of four pluses" in {m["prompt"] for m in ms}  # GenEval's make_plural
    assert "a photo of an orange bar" in {m["prompt"] for m in ms}  # GenEval's with_article


# ---------------------------------------------------------------- token layout
def test_registry_and_layout(task):
    assert TASKS["geneval_mini"] is GenEvalMini and isinstance(make_task("geneval_mini"), GenEvalMini)
    assert task.modality == "image" and Task.modality == "text" and TASKS["sudoku4"].modality == "text"
    assert task.image_tokens == ("<i0>", "<i1>", "<i2>", "<i3>", "<i4>", "<i5>", "<i6>")
    assert task.completion_suffix == ("<eoi>",)
    assert task.completion_length == 64 and GenEvalMini(height=7, width=9).completion_length == 63
    with pytest.raises(ValueError, match="height and width"):
        GenEvalMini(height=5)


def test_tokenization(task, tok):
    """Every prompt tokenizes word by word (leftmost-longest: a/an/and/above), ends in <soi>, fits prompt_length."""
    img_ids = tok.convert_tokens_to_ids(list(task.image_tokens))
    assert img_ids == list(range(img_ids[0], img_ids[0] + len(task.image_tokens)))  # one contiguous range
    assert tok.unk_token_id not in tok.convert_tokens_to_ids(["<soi>", "<eoi>"])
    longest = 0
    for m in all_metadata():
        ids = tok(m["prompt"] + "<soi>", add_special_tokens=False)["input_ids"]
        words = m["prompt"].split(" ")
        expected = [*itertools.chain.from_iterable((w, " ") for w in words)][:-1] + ["<soi>"]
        assert tok.convert_ids_to_tokens(ids) == expected
        longest = max(longest, len(ids))
    assert longest == task.prompt_length == 20
    # leftmost-longest matching of atomic words: "a" never splits "and", "an", "above" or "black"
    words = build_tokenizer(" ", ["a", "an", "and", "above", "black", "bar"])
    pieces = words.convert_ids_to_tokens(words("a black bar and an above a", add_special_tokens=False)["input_ids"])
    assert pieces == ["a", " ", "black", " ", "bar", " ", "and", " ", "an", " ", "above", " ", "a"]


def test_examples(task, tok):
    examples = task.held_out(120, seed=0)
    assert len({e.id for e in examples}) == len(examples) == 70  # 2 + 10 + 6 + 12 + 20 + 20: a third at most
    assert {e.gold["tag"] for e in examples} == set(TAGS)
    img_ids = set(tok.convert_tokens_to_ids(list(task.image_tokens)))
    for e in examples:
        assert e.id == e.gold["prompt"] and e.prompt == e.id + "<soi>"
        ids = tok(e.answer, add_special_tokens=False)["input_ids"]
        assert len(ids) == 64 and set(ids) <= img_ids
        assert tok(e.prompt, add_special_tokens=False)["input_ids"][-1] == tok.convert_tokens_to_ids("<soi>")
    more = task.generate(600, seed=1, exclude={e.id for e in examples})
    assert not {e.id for e in more} & {e.id for e in examples}
    tags = collections.Counter(e.gold["tag"] for e in more)  # tags uniform although small tags lost prompts
    assert set(tags) == set(TAGS) and min(tags.values()) > 70
    assert len({e.answer for e in more if e.gold["tag"] == "single_object"}) > 50  # repeated prompts, new scenes


def test_excluding_a_whole_tag_is_refused(task):
    singles = {m["prompt"] for m in all_metadata() if m["tag"] == "single_object"}
    with pytest.raises(ValueError, match="single_object"):
        task.generate(3, seed=0, exclude=singles)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("seed", range(3))
def test_sampled_answers_pass_their_checker(placement, seed):
    """The reference scene passes GenEval's rules and holds exactly the include objects (no stray detections)."""
    task, rng = GenEvalMini(placement=placement), random.Random(seed)
    for _ in range(150):
        ex = task.sample(rng)
        assert task.reward(ex.answer, ex) == 1.0, ex
        dets = detect(parse_grid(ex.answer))
        assert sorted(d.cls for ds in dets.values() for d in ds) == sorted(
            r["class"] for r in ex.gold["include"] for _ in range(r["count"])
        )


def test_slots_hold_every_object_at_a_slot_origin(task):
    assert slot_origins(8, 8) == [(0, 0), (0, 4), (4, 0), (4, 4)] and len(slot_origins(16, 16)) == 16
    assert slot_origins(7, 9) == [(0, 0), (0, 4), (4, 0), (4, 4)]  # a 3x3 shape needs rows/cols o..o+2
    rng = random.Random(0)
    for _ in range(200):
        ex = task.sample(rng)
        boxes = [d.bbox for ds in detect(parse_grid(ex.answer)).values() for d in ds]
        assert {(y1, x1) for x1, y1, _, _ in boxes} <= set(slot_origins(8, 8)) and len(set(boxes)) == len(boxes)


def test_sampler_varies_scenes():
    m = meta("colors", "square", "red")
    slots = {GenEvalMini().example(m, random.Random(s)).answer for s in range(40)}
    assert len(slots) == 4  # one square, red, in any of the four slots
    free = {GenEvalMini(placement="free").example(m, random.Random(s)).answer for s in range(20)}
    assert len(free) > 10
    with pytest.raises(ValueError, match="placement must be one of slots, free"):
        GenEvalMini(placement="grid")


# ---------------------------------------------------------------- detector
def test_detect_shapes_boxes_and_merging():
    g = grid(
        "rr..bbb.",
        "rr......",
        "..g...p.",
        "..gg.ppp",
        "......p.",
        "yyyy....",  # 1x4: no class
        "........",
        "oo......",  # orange 1x2 over a red 1x2: different colours never merge into a square
    ) + [[1, 1, 0, 0, 0, 0, 0, 0]]
    dets = detect(g)
    assert {k: [(d.color, d.bbox) for d in v] for k, v in dets.items()} == {
        "square": [("red", (0, 0, 2, 2))],
        "bar": [("blue", (4, 0, 7, 1))],
        "corner": [("green", (2, 2, 4, 4))],
        "plus": [("purple", (5, 2, 8, 5))],
    }  # the 1x4 bar and the 2-row 2-colour blocks (1x2 each) are not objects
    merged = grid("rr......", "rrrr....", "..rr....", "........", "........", "........", "........", "........")
    assert detect(merged) == {}  # two touching red squares are one 6-cell blob: not a class
    diagonal = grid("rr......", "rr......", "..rr....", "..rr....", "........", "........", "........", "........")
    assert [d.bbox for d in detect(diagonal)["square"]] == [(0, 0, 2, 2), (2, 2, 4, 4)]  # 4-connectivity


# ---------------------------------------------------------------- GenEval's rules, tag by tag
E = "........"


def test_single_and_two_object(task):
    sq = grid("........", ".pp.....", ".pp..yyy", E, E, E, E, E)
    assert judge(task, sq, meta("single_object", "square"))["correct"]
    s = judge(task, sq, meta("single_object", "plus"))
    assert not s["correct"] and s["reason"] == "expected plus>=1, found 0" and s["tag"] == "single_object"
    assert judge(task, sq, meta("two_object", "square", "bar"))["correct"]
    s = judge(task, sq, meta("two_object", "bar", "tee"))
    assert not s["correct"] and s["reason"] == "expected tee>=1, found 0"
    blob = grid("........", ".ppp....", ".ppp....", E, E, E, E, E)  # 3x2 block: matches no class
    assert judge(task, blob, meta("single_object", "square"))["reason"] == "expected square>=1, found 0"


def test_counting_include_and_exclude(task):
    m = meta("counting", "bar", 3)
    three = grid("rrr.bbb.", E, "ggg.....", E, ".....pp.", ".....pp.", E, E)
    assert judge(task, three, m)["correct"]  # a square besides is allowed
    two = grid("rrr.bbb.", E, E, E, E, E, E, E)
    assert judge(task, two, m)["reason"] == "expected bar>=3, found 2"
    four = grid("rrr.bbb.", E, "ggg.yyy.", E, E, E, E, E)
    s = judge(task, four, m)
    assert not s["correct"] and s["reason"] == "expected bar<4, found 4"  # an extra object breaks "exactly 3"
    merged = grid("rrrrrr..", E, "ggg.....", E, E, E, E, E)  # two touching red bars = one 1x6 blob
    assert judge(task, merged, m)["reason"] == "expected bar>=3, found 1"


def test_colors(task):
    g = grid("bb......", "bb......", E, E, E, E, E, E)
    assert judge(task, g, meta("colors", "square", "blue"))["correct"]
    s = judge(task, g, meta("colors", "square", "red"))
    assert not s["correct"] and s["reason"] == "expected red square>=1, found 0 red; and 1 blue"


def test_colors_reads_only_the_top_count_object(task):
    """GenEval checks colour on the top-``count`` detections only; ours are in raster order (documented)."""
    g = grid("bb......", "bb......", E, E, E, "....rr..", "....rr..", E)
    assert not judge(task, g, meta("colors", "square", "red"))["correct"]  # the first (blue) square is judged
    assert judge(task, g, meta("colors", "square", "blue"))["correct"]


def test_color_attr_binding(task):
    m = meta("color_attr", "square", "bar", "red", "blue")
    good = grid("rr......", "rr......", E, "....bbb.", E, E, E, E)
    assert judge(task, good, m)["correct"]
    swapped = grid("bb......", "bb......", E, "....rrr.", E, E, E, E)
    s = judge(task, swapped, m)
    assert not s["correct"]
    assert (
        s["reason"] == "expected red square>=1, found 0 red; and 1 blue\nexpected blue bar>=1, found 0 blue; and 1 red"
    )
    half = grid("rr......", "rr......", E, "....rrr.", E, E, E, E)
    assert judge(task, half, m)["reason"] == "expected blue bar>=1, found 0 blue; and 1 red"


def test_position(task):
    m = meta("position", "square", "bar", "left of")  # "a photo of a square left of a bar"
    assert m["include"] == [{"class": "bar", "count": 1}, {"class": "square", "count": 1, "position": ["left of", 0]}]
    left = grid(E, "rr...bbb", "rr......", E, E, E, E, E)
    assert judge(task, left, m)["correct"]
    right = grid(E, "bbb..rr.", ".....rr.", E, E, E, E, E)
    s = judge(task, right, m)
    assert not s["correct"] and s["reason"] == "expected square left of target, found right of target"
    diagonal = grid("rr......", "rr......", E, E, E, ".....bbb", E, E)  # left of AND above: accepted
    assert judge(task, diagonal, m)["correct"]
    stacked = grid(".rr.....", ".rr.....", E, "bbb.....", E, E, E, E)  # directly above: not left of
    assert judge(task, stacked, m)["reason"] == "expected square left of target, found above target"
    assert judge(task, stacked, meta("position", "square", "bar", "above"))["correct"]
    assert judge(task, stacked, meta("position", "bar", "square", "below"))["correct"]
    no_target = grid("rr......", "rr......", E, E, E, E, E, E)
    assert judge(task, no_target, m)["reason"] == "expected bar>=1, found 0\nno target for square to be left of"
    close = grid("rr......", "rr.bbb..", E, E, E, E, E, E)  # centres 2.5 apart in x, 1 in y: "left of" holds
    assert relative_position((0, 0, 2, 2), (3, 1, 6, 2)) == {"left of"}
    assert judge(task, close, m)["correct"]


def _geneval_relative_position(box_a, box_b):
    """GenEval's numpy code (evaluation/evaluate_images.py), transcribed for comparison."""
    boxes = np.array([box_a, box_b], dtype=float)[:, :4].reshape(2, 2, 2)
    center_a, center_b = boxes.mean(axis=-2)
    dim_a, dim_b = np.abs(np.diff(boxes, axis=-2))[..., 0, :]
    offset = center_a - center_b
    revised_offset = np.maximum(np.abs(offset) - 0.1 * (dim_a + dim_b), 0) * np.sign(offset)
    if np.all(np.abs(revised_offset) < 1e-3):
        return set()
    dx, dy = revised_offset / np.linalg.norm(offset)
    rels = set()
    if dx < -0.5:
        rels.add("left of")
    if dx > 0.5:
        rels.add("right of")
    if dy < -0.5:
        rels.add("above")
    if dy > 0.5:
        rels.add("below")
    return rels


def test_relative_position_matches_geneval():
    dog, bear = (275, 75, 325, 125), (75, 75, 125, 125)  # centres (300, 100) and (100, 100), 50 px wide
    assert relative_position(dog, bear) == {"right of"} and relative_position(bear, dog) == {"left of"}
    assert relative_position((0, 0, 10, 10), (1, 0, 11, 10)) == set()  # offset 1 < 0.1 * 20: no relation
    rng = random.Random(0)
    for _ in range(2000):
        a = [rng.randint(0, 8) for _ in range(2)]
        b = [rng.randint(0, 8) for _ in range(2)]
        box_a = (a[0], a[1], a[0] + rng.randint(1, 3), a[1] + rng.randint(1, 3))
        box_b = (b[0], b[1], b[0] + rng.randint(1, 3), b[1] + rng.randint(1, 3))
        assert relative_position(box_a, box_b) == _geneval_relative_position(box_a, box_b), (box_a, box_b)


def test_evaluate_with_synthetic_detections():
    """The rules also run on any detections (e.g. a real detector's boxes), no grid needed."""
    from ddmrl.tasks.geneval_mini import Detection

    dog = Detection("dog", "red", (), (275, 75, 325, 125))
    bear = Detection("teddy bear", "blue", (), (75, 75, 125, 125))
    m = meta("position", "dog", "teddy bear", "right of")
    assert evaluate({"dog": [dog], "teddy bear": [bear]}, m) == (True, "", [True, True, True])
    assert evaluate({"dog": [bear], "teddy bear": [dog]}, m)[:2] == (
        False,
        "expected dog right of target, found left of target",
    )


# ---------------------------------------------------------------- reward, score, accuracy
def test_partial_credit_and_malformed(task):
    dense = GenEvalMini(partial_credit=True)
    m = meta("color_attr", "square", "bar", "red", "blue")
    half = grid("rr......", "rr......", E, "....rrr.", E, E, E, E)
    ex = Example(id=m["prompt"], prompt="", answer="", gold=m)
    assert task.reward(task.to_text(half), ex) == 0.0 and dense.reward(task.to_text(half), ex) == 0.75
    mc = meta("counting", "bar", 3)
    four = grid("rrr.bbb.", E, "ggg.yyy.", E, E, E, E, E)
    assert dense.reward(task.to_text(four), Example(id="", prompt="", answer="", gold=mc)) == 0.5
    good = grid("rr......", "rr......", E, "....bbb.", E, E, E, E)
    assert dense.reward(task.to_text(good), ex) == 1.0 == task.reward(task.to_text(good) + "<eoi>", ex)
    for bad in ["", "<i0>" * 63, "<i0>" * 65, "<i0>" * 63 + "<i7>", "<i0>" * 63 + "x", "<soi>" + "<i0>" * 64]:
        s = task.score(bad, ex)
        assert not s["correct"] and s["reason"].startswith("malformed: ") and s["tag"] == "color_attr"
        assert task.reward(bad, ex) == 0.0 == dense.reward(bad, ex)


class BlueShare(ImageRewardModel):
    """A reward model of this test's own (named by import path): the share of blue pixels, times ``scale``."""

    name = "blue_share"

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale

    def _load(self) -> None:
        pass

    def _score(self, images, prompts):
        blue = PALETTE["blue"]
        return [self.scale * sum(p == blue for p in im.getdata()) / (im.width * im.height) for im in images]


def test_reward_models_score_the_rendered_scenes(task):
    """With reward_models the RL reward is their weighted sum on the rendered scenes (GenEval's verdict without)."""
    mine = f"{__name__}:BlueShare"
    scored = make_task("geneval_mini", reward_models={"b": {"model": mine, "weight": 2.0, "scale": 0.5}})
    ex = Example(id="", prompt="", answer="", gold=meta("colors", "square", "blue"))
    square = grid("bb......", "bb......", E, E, E, E, E, E)  # 4 of 64 cells blue
    texts = [task.to_text(square), "<i0>" * 63, task.to_text(grid(*[E] * 8))]  # the second is malformed
    assert scored.batch_rewards(texts, None, [ex] * 3) == pytest.approx([2.0 * 0.5 * 4 / 64, 0.0, 0.0])
    assert task.batch_rewards(texts, None, [ex] * 3) == [1.0, 0.0, 0.0]
    with pytest.raises(ConfigError, match=r"reward_models\.b\.model = 'nope:X': cannot be imported"):
        make_task("geneval_mini", reward_models={"b": {"model": "nope:X"}})
    with pytest.raises(ConfigError, match=r"reward_models\.b\.scales: not an option of reward model"):
        make_task("geneval_mini", reward_models={"b": {"model": mine, "scales": 2}})


def test_accuracy_is_unweighted_mean_over_tags(task):
    scores = [{"tag": "colors", "correct": c} for c in (True, True, True, False)]  # 75 %
    scores += [{"tag": "position", "correct": False}]  # 0 %
    scores += [{"tag": "counting", "correct": c} for c in (True, False)]  # 50 %
    assert task.accuracy(scores) == pytest.approx((75 + 0 + 50) / 3)
    assert task.accuracy(scores) != pytest.approx(100 * 4 / 7)  # not the pooled mean
    assert task.accuracy([]) == 0.0


# ---------------------------------------------------------------- PNG
def test_png_round_trip(tmp_path, task):
    from PIL import Image

    g = parse_grid(task.sample(random.Random(3)).answer)
    path = tmp_path / "sub" / "0000.png"
    render_png(g, path, cell_px=5)
    with Image.open(path) as im:
        assert im.size == (40, 40) and im.mode == "RGB"
        assert im.getpixel((0, 0)) in (PALETTE["background"], *(PALETTE[c] for c in COLORS))
    assert read_png(path) == g
    wide = [[(r * 9 + c) % 7 for c in range(9)] for r in range(7)]
    render_png(wide, tmp_path / "w.png", cell_px=3)
    assert read_png(tmp_path / "w.png", height=7, width=9) == wide
    (tmp_path / "junk.png").write_text("not a png")
    with pytest.raises(ValueError, match="junk.png"):
        read_png(tmp_path / "junk.png")


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_shapes_fit_in_the_smallest_canvas(placement):
    small = GenEvalMini(height=7, width=7, placement=placement)
    for n in (2, 3, 4):
        for cls in SHAPES:
            ex = small.example(meta("counting", cls, n), random.Random(n))
            assert small.reward(ex.answer, ex) == 1.0
