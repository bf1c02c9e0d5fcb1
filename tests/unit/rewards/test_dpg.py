"""DPG-Bench aggregation on hand-made questions with a fake VQA; every expected number is computed by hand below."""

import sys
import types

import pytest
from PIL import Image

from ddmrl.io import DataError
from ddmrl.rewards.dpg import (
    MPLUGVQA,
    category_of,
    compute_dpg_bench,
    load_dpg_images,
    load_dpg_questions,
    score_dpg_image,
    split_grid,
    tile_grid,
)
from ddmrl.rewards.interface import RewardSetupError

RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)
R = 8  # crop resolution

HEADER = (
    "item_id,text,keywords,proposition_id,dependency,category_broad,category_detailed,tuple,question_natural_language"
)
# item a: q1 cat (root), q2 black <- q1, q3 on mat <- q2 (a chain), q4 mat (root); item b: two roots
ROWS = [
    "a,t,k,1,0,entity,whole,entity - whole (cat),Is there a cat?",
    'a,t,k,2,1,attribute,color,"attribute - color (cat, black)",Is the cat black?',
    'a,t,k,3,2,relation,spatial,"relation - spatial (cat, mat, on)",Is the cat on a mat?',
    "a,t,k,4,0,entity,whole,entity - whole (mat),Is there a mat?",
    "b,t,k,1,0,global,,global - (photo),Is this a photo?",
    "b,t,k,2,0,entity,whole,entity - whole (dog),Is there a dog?",
]

# answers per crop colour; anything not listed is "no"
ANSWERS = {
    RED: {
        "Is there a cat?": "yes",
        "Is the cat black?": "yes",
        "Is the cat on a mat?": "yes",
        "Is there a mat?": "yes",
        "Is this a photo?": "yes",
    },
    GREEN: {
        "Is the cat black?": "yes",
        "Is the cat on a mat?": "yes",
        "Is there a mat?": "yes",
        "Is this a photo?": "yes",
        "Is there a dog?": "yes",
    },
    BLUE: {"Is there a cat?": "yes", "Is the cat on a mat?": "Yes", "Is there a mat?": "yes"},  # "Yes" != "yes"
    WHITE: {"Is the cat black?": "yes", "Is the cat on a mat?": "yes"},
}


def fake_vqa(calls=None):
    def vqa(image, question):
        assert image.size == (R, R)
        if calls is not None:
            calls.append(question)
        return ANSWERS[image.getpixel((0, 0))].get(question, "no")

    return vqa


def grid(*colors):
    return tile_grid([Image.new("RGB", (R, R), c) for c in colors])


@pytest.fixture
def csv_path(tmp_path):
    p = tmp_path / "dpg_bench.csv"
    p.write_text("\n".join([HEADER, *ROWS]) + "\n")
    return p


# Hand computation
# item a, crops TL red, TR green, BL blue, BR white (questions q1..q4):
#   red   raw 1 1 1 1 -> no zeroing                               -> 4/4 = 1
#   green raw 0 1 1 1 -> q2 (parent q1=0) -> 0, q3 (parent q2 now 0) -> 0 (transitive, in place) -> 1/4
#   blue  raw 1 0 0 1 ("Yes" is not "yes") -> q3 already 0         -> 2/4
#   white raw 0 1 1 0 -> q2 -> 0, q3 -> 0                          -> 0/4
#   image a = (1 + 0.25 + 0.5 + 0) / 4 = 0.4375; last crop (white) pre-dependency: q1 0, q2 1, q3 1, q4 0
# item b, crops red, red, red, green (q1 photo, q2 dog): red 1/2 x3, green 2/2 -> (1.5 + 1) / 4 = 0.625;
#   last crop (green) pre-dependency: q1 1, q2 1
# DPG = (0.4375 + 0.625) / 2 * 100 = 53.125
# L2 (last crop, pre-dependency): entity - whole: a.q1 0, a.q4 0, b.q2 1 -> 33.33; attribute - color: a.q2 1 -> 100;
#   relation - spatial: a.q3 1 -> 100; global -: b.q1 1 -> 100. L1 the same per prefix.
IMAGES = {"a": (RED, GREEN, BLUE, WHITE), "b": (RED, RED, RED, GREEN)}


def test_hand_computed_scores(csv_path):
    questions = load_dpg_questions(csv_path)
    assert list(questions["a"].questions) == [1, 2, 3, 4] and questions["a"].dependencies[3] == [2]
    calls = []
    res = compute_dpg_bench({k: grid(*v) for k, v in IMAGES.items()}, questions, fake_vqa(calls), resolution=R)
    assert res.per_image["a"].crop_scores == [1.0, 0.25, 0.5, 0.0]
    assert res.per_image["a"].score == 0.4375 and res.per_image["b"].score == 0.625
    assert res.per_image["a"].last_crop_raw == {1: 0.0, 2: 1.0, 3: 1.0, 4: 0.0}
    assert res.overall == pytest.approx(53.125)
    assert res.l2 == pytest.approx(
        {"entity - whole": 100 / 3, "attribute - color": 100.0, "relation - spatial": 100.0, "global -": 100.0}
    )
    assert res.l1 == pytest.approx({"entity": 100 / 3, "attribute": 100.0, "relation": 100.0, "global": 100.0})
    assert len(calls) == 4 * 4 + 4 * 2  # every question on every crop
    d = res.to_dict()
    assert d["dpg_score"] == pytest.approx(53.125) and d["n_images"] == 2 and d["skipped"] == []


def test_pic_num_one_scores_only_the_top_left_crop(csv_path):
    questions = load_dpg_questions(csv_path)
    res = compute_dpg_bench({"b": grid(*IMAGES["b"])}, questions, fake_vqa(), resolution=R, pic_num=1)
    assert res.per_image["b"].crop_scores == [0.5] and res.overall == pytest.approx(50.0)


def test_dependency_order_matters_as_in_the_reference():
    """A child listed before its parent is checked against the parent's score before the parent is zeroed."""
    from ddmrl.rewards.dpg import DPGItem

    item = DPGItem(
        questions={3: "Is the cat on a mat?", 2: "Is the cat black?", 1: "Is there a cat?"},
        dependencies={3: [2], 2: [1], 1: [0]},
        tuples={3: "relation - spatial", 2: "attribute - color", 1: "entity - whole"},
    )
    # green: cat no, black yes, on yes -> q3 checks q2 (still 1) and stays; q2 zeroed by q1 -> 1/3
    out = score_dpg_image(grid(GREEN, GREEN, GREEN, GREEN), item, fake_vqa(), R, pic_num=1)
    assert out.score == pytest.approx(1 / 3)


def test_legacy_row0_skip(csv_path):
    fixed = load_dpg_questions(csv_path)
    legacy = load_dpg_questions(csv_path, legacy_skip_first_question=True)
    assert list(fixed["a"].questions) == [1, 2, 3, 4] and list(legacy["a"].questions) == [2, 3, 4]
    images = {k: grid(*v) for k, v in IMAGES.items()}
    # q2 depends on the dropped q1: the reference hits KeyError and skips the whole image
    res = compute_dpg_bench(images, legacy, fake_vqa(), resolution=R, on_error="skip")
    assert list(res.per_image) == ["b"] and res.overall == pytest.approx(62.5)
    assert res.skipped[0][0] == "a" and "KeyError" in res.skipped[0][1]
    with pytest.raises(ValueError, match="DPG-Bench image a: KeyError"):
        compute_dpg_bench(images, legacy, fake_vqa(), resolution=R)


def test_legacy_grouping_keeps_only_the_last_consecutive_block(tmp_path):
    p = tmp_path / "q.csv"
    p.write_text("\n".join([HEADER, ROWS[4], ROWS[0], ROWS[5], ROWS[3]]) + "\n")  # b, a, b, a
    legacy = load_dpg_questions(p, legacy_skip_first_question=True)  # skips b.q1; a's later block replaces q1
    assert list(legacy["a"].questions) == [4] and list(legacy["b"].questions) == [2]
    fixed = load_dpg_questions(p)
    assert list(fixed["a"].questions) == [1, 4] and list(fixed["b"].questions) == [1, 2]


def test_missing_item_is_error_or_skip(csv_path):
    questions = load_dpg_questions(csv_path)
    images = {"zzz": grid(*IMAGES["b"]), "b": grid(*IMAGES["b"])}
    with pytest.raises(ValueError, match="image zzz: KeyError: \"no questions for item 'zzz'\""):
        compute_dpg_bench(images, questions, fake_vqa(), resolution=R)
    res = compute_dpg_bench(images, questions, fake_vqa(), resolution=R, on_error="skip")
    assert [s[0] for s in res.skipped] == ["zzz"] and res.overall == pytest.approx(62.5)


@pytest.mark.parametrize(
    "rows,match",
    [
        ([ROWS[0], ROWS[0]], "line 3: item a repeats proposition_id 1 \\(first on line 2\\)"),
        ([ROWS[1]], "line 2: item a question 2 depends on proposition_id 1, which the item does not have"),
        (["a,t,k,x,0,e,w,tup,q?"], "line 2: proposition_id 'x'"),
    ],
)
def test_fixed_loader_validates(tmp_path, rows, match):
    p = tmp_path / "q.csv"
    p.write_text("\n".join([HEADER, *rows]) + "\n")
    with pytest.raises(DataError, match=match):
        load_dpg_questions(p)


def test_loader_file_errors(tmp_path):
    with pytest.raises(DataError, match="file not found .*TencentQQGYLab/ELLA"):
        load_dpg_questions(tmp_path / "absent.csv")
    p = tmp_path / "q.csv"
    p.write_text("item_id,proposition_id\na,1\n")
    with pytest.raises(DataError, match="missing column\\(s\\) dependency, tuple, question_natural_language"):
        load_dpg_questions(p)


def test_grid_helpers(tmp_path):
    g = grid(RED, GREEN, BLUE, WHITE)
    assert g.size == (2 * R, 2 * R)
    assert [c.getpixel((0, 0)) for c in split_grid(g, R)] == [RED, GREEN, BLUE, WHITE]
    with pytest.raises(ValueError, match="too small"):
        split_grid(g, R + 1)
    with pytest.raises(ValueError, match="pic_num = 5"):
        split_grid(g, R, 5)
    assert category_of("entity - whole (bicycle)") == ("entity", "entity - whole")
    g.save(tmp_path / "a.png")
    (tmp_path / "dpg-bench_results.txt").write_text("not an image")
    loaded = load_dpg_images(tmp_path)
    assert list(loaded) == ["a"] and loaded["a"].getpixel((R, R)) == WHITE


def test_mplug_vqa_backend(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "modelscope.pipelines", None)
    with pytest.raises(RewardSetupError, match="pip install modelscope"):
        MPLUGVQA(model_dir=tmp_path)(Image.new("RGB", (4, 4)), "q?")
    made = []
    pipelines, constant = types.ModuleType("modelscope.pipelines"), types.ModuleType("modelscope.utils.constant")
    constant.Tasks = types.SimpleNamespace(visual_question_answering="visual-question-answering")

    def pipeline(task, model, device):
        made.append((task, model, device))
        return lambda inputs: {"text": "yes" if inputs["question"] == "q?" else "no"}

    pipelines.pipeline = pipeline
    monkeypatch.setitem(sys.modules, "modelscope", types.ModuleType("modelscope"))
    monkeypatch.setitem(sys.modules, "modelscope.utils", types.ModuleType("modelscope.utils"))
    monkeypatch.setitem(sys.modules, "modelscope.pipelines", pipelines)
    monkeypatch.setitem(sys.modules, "modelscope.utils.constant", constant)
    vqa = MPLUGVQA(model_dir=tmp_path, device="cpu")
    assert vqa(Image.new("RGB", (4, 4)), "q?") == "yes" and vqa(Image.new("RGB", (4, 4)), "r?") == "no"
    assert made == [("visual-question-answering", str(tmp_path), "cpu")]
    with pytest.raises(RewardSetupError, match="model_dir directory .* not found"):
        MPLUGVQA(model_dir=tmp_path / "absent")(Image.new("RGB", (4, 4)), "q?")


def test_vqa_server_client_round_trip_and_errors():
    import base64
    import io
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from ddmrl.rewards.dpg import VQAServerClient, vqa_from_params

    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            image = Image.open(io.BytesIO(base64.b64decode(body["image"])))
            seen.append((image.size, image.getpixel((0, 0)), body["question"]))
            reply = json.dumps({"answer": "yes"} if "cat" in body["question"] else {"wrong": 1}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        vqa = vqa_from_params({"model": "vqa_server", "url": f"http://127.0.0.1:{httpd.server_address[1]}"})
        assert isinstance(vqa, VQAServerClient)
        assert vqa(Image.new("RGB", (R, R), RED), "Is there a cat?") == "yes"
        assert seen == [((R, R), RED, "Is there a cat?")]  # the PNG arrives lossless
        with pytest.raises(RuntimeError, match="did not reply"):
            vqa(Image.new("RGB", (R, R), RED), "Is there a dog?")
    finally:
        httpd.shutdown()
    with pytest.raises(ValueError, match="url = 'ftp://x'"):
        vqa_from_params({"model": "vqa_server", "url": "ftp://x"})
    with pytest.raises(ValueError, match="vqa: .*unexpected keyword"):
        vqa_from_params({"model": "mplug", "url": "http://127.0.0.1:1"})
