"""DPG-Bench scoring (Hu et al. 2024, ELLA; TencentQQGYLab/ELLA ``dpg_bench/compute_dpg_bench.py``).

The aggregation of the reference script, with the VQA model passed in as a callable ``vqa(image, question) ->
answer`` (the reference uses ModelScope's mPLUG-large, :class:`MPLUGVQA`):

1. Each generated image is a 2x2 grid of ``resolution``-px samples named ``<item_id>.png``; the first ``pic_num``
   crops (top-left, top-right, bottom-left, bottom-right) are scored (``dist_eval.sh``: ``PIC_NUM=4``).
2. Per crop, every question of the item is asked; exactly ``"yes"`` scores 1, anything else 0.
3. Dependencies: walking the questions in CSV order, a question with a parent (id != 0) whose *current* score is 0
   is set to 0. Scores are zeroed in place, so zeroing is transitive when parents precede children (as in the CSV).
4. Crop score = mean over questions; image score = mean over crops; DPG score = mean over images x 100.
5. Category scores (x 100) pool per-question scores over images by the ``tuple`` column's prefix: L2 is the text
   before ``(`` (e.g. ``entity - whole``), L1 the text before the first ``-`` (``entity``). QUIRK, kept: they use
   the **pre-dependency** scores of the **last crop only** (the reference returns ``qid2scores_orig`` of the last
   loop iteration).

The reference's ``prepare_dpg_data`` skips DataFrame row 0 (``if i == 0: continue``), dropping the first question
of the first item; here that happens only with ``legacy_skip_first_question=True`` (default: fixed). In legacy
mode a dependency on the dropped question raises ``KeyError`` in the reference, which then skips the whole image;
``on_error="skip"`` reproduces that skip (default ``"raise"``).
"""

from __future__ import annotations

import csv
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from ddmrl.io import DataError
from ddmrl.rewards.interface import default_device, require_module, require_path
from ddmrl.rewards.remote import encode_image, http_post

log = logging.getLogger(__name__)

VQA = Callable[[Image.Image, str], str]
CSV_COLUMNS = ("item_id", "proposition_id", "dependency", "tuple", "question_natural_language")


@dataclass
class DPGItem:
    """The questions of one prompt, keyed by ``proposition_id`` in CSV order."""

    questions: dict[int, str] = field(default_factory=dict)
    dependencies: dict[int, list[int]] = field(default_factory=dict)
    tuples: dict[int, str] = field(default_factory=dict)


def load_dpg_questions(path: str | Path, legacy_skip_first_question: bool = False) -> dict[str, DPGItem]:
    """``dpg_bench.csv`` as ``{item_id: DPGItem}``.

    Fixed mode (default) reads every row, merges an item's rows wherever they are, and refuses duplicate
    question ids and dependencies on ids the item does not have (one DataError line naming file and line).
    ``legacy_skip_first_question=True`` reproduces ``prepare_dpg_data``: data row 0 is skipped, an item's rows are
    grouped only while consecutive (a later block of the same item replaces the earlier one) and nothing is checked.
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise DataError(f"{path}: missing column(s) {', '.join(missing)}")
            rows = list(reader)
    except FileNotFoundError:
        raise DataError(
            f"{path}: file not found (dpg_bench.csv from TencentQQGYLab/ELLA dpg_bench/, fetched separately)"
        ) from None
    items: dict[str, DPGItem] = {}
    lines: dict[tuple[str, int], int] = {}
    previous = None
    for i, row in enumerate(rows):
        line = i + 2  # header is line 1
        if legacy_skip_first_question and i == 0:
            continue
        item_id = row["item_id"]
        try:
            qid = int(row["proposition_id"])
            deps = [int(d.strip()) for d in row["dependency"].split(",")]
        except (ValueError, AttributeError):
            raise DataError(
                f"{path} line {line}: proposition_id {row['proposition_id']!r} / dependency {row['dependency']!r} "
                "must be integers (dependency: comma-separated, 0 = none)"
            ) from None
        if legacy_skip_first_question:
            if item_id != previous:
                items[item_id] = DPGItem()
            previous = item_id
        else:
            if (item_id, qid) in lines:
                raise DataError(
                    f"{path} line {line}: item {item_id} repeats proposition_id {qid} "
                    f"(first on line {lines[item_id, qid]})"
                )
            lines[item_id, qid] = line
            items.setdefault(item_id, DPGItem())
        item = items[item_id]
        item.questions[qid] = row["question_natural_language"]
        item.dependencies[qid] = deps
        item.tuples[qid] = row["tuple"]
    if not legacy_skip_first_question:
        for item_id, item in items.items():
            for qid, deps in item.dependencies.items():
                for d in deps:
                    if d != 0 and d not in item.questions:
                        raise DataError(
                            f"{path} line {lines[item_id, qid]}: item {item_id} question {qid} depends on "
                            f"proposition_id {d}, which the item does not have"
                        )
    return items


def split_grid(image: Image.Image, resolution: int, pic_num: int = 4) -> list[Image.Image]:
    """The first ``pic_num`` crops of a 2x2 grid of ``resolution``-px tiles (TL, TR, BL, BR; the reference order)."""
    if not 1 <= pic_num <= 4:
        raise ValueError(f"pic_num = {pic_num}: must be in 1..4 (a 2x2 grid)")
    r = resolution
    boxes = [(0, 0, r, r), (r, 0, 2 * r, r), (0, r, r, 2 * r), (r, r, 2 * r, 2 * r)][:pic_num]
    need_w, need_h = max(b[2] for b in boxes), max(b[3] for b in boxes)
    if image.width < need_w or image.height < need_h:
        raise ValueError(
            f"DPG image is {image.width}x{image.height} px, too small for {pic_num} crop(s) of {r} px (a 2x2 grid)"
        )
    return [image.crop(b) for b in boxes]


def tile_grid(images: list[Image.Image]) -> Image.Image:
    """Four equal-size images tiled 2x2 (TL, TR, BL, BR), the layout DPG-Bench's README asks for."""
    if len(images) != 4 or len({im.size for im in images}) != 1:
        raise ValueError("tile_grid: needs exactly 4 images of one size")
    w, h = images[0].size
    grid = Image.new("RGB", (2 * w, 2 * h))
    for k, im in enumerate(images):
        grid.paste(im.convert("RGB"), ((k % 2) * w, (k // 2) * h))
    return grid


@dataclass
class DPGImageScore:
    """One image: ``score`` (mean over crops, in [0, 1]), ``crop_scores`` and the last crop's pre-dependency
    per-question scores (what the category scores use)."""

    score: float
    crop_scores: list[float]
    last_crop_raw: dict[int, float]


def score_dpg_image(image: Image.Image, item: DPGItem, vqa: VQA, resolution: int, pic_num: int = 4) -> DPGImageScore:
    """``compute_dpg_one_sample`` for one grid image."""
    if not item.questions:
        raise ValueError("DPG item has no questions")
    crop_scores: list[float] = []
    scores: dict[int, float] = {}
    raw: dict[int, float] = {}
    for crop in split_grid(image, resolution, pic_num):
        for qid, question in item.questions.items():
            scores[qid] = float(vqa(crop, question) == "yes")
        raw = dict(scores)  # pre-dependency copy (the reference's qid2scores_orig)
        for qid, parents in item.dependencies.items():
            if any(p != 0 and scores[p] == 0 for p in parents):  # in place, CSV order
                scores[qid] = 0.0
        crop_scores.append(sum(scores.values()) / len(scores))
    return DPGImageScore(sum(crop_scores) / len(crop_scores), crop_scores, raw)


@dataclass
class DPGResult:
    """DPG-Bench scores x 100: ``overall`` (mean image score), ``l1`` / ``l2`` category scores; ``per_image``
    scores in [0, 1]; ``skipped`` lists ``(item_id, reason)`` of images left out with ``on_error="skip"``."""

    overall: float
    l1: dict[str, float]
    l2: dict[str, float]
    per_image: dict[str, DPGImageScore]
    skipped: list[tuple[str, str]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "dpg_score": self.overall,
            "l1": self.l1,
            "l2": self.l2,
            "n_images": len(self.per_image),
            "skipped": [list(s) for s in self.skipped],
            "per_image": {k: {"score": v.score, "crop_scores": v.crop_scores} for k, v in self.per_image.items()},
        }


def category_of(tuple_text: str) -> tuple[str, str]:
    """(L1, L2) of a ``tuple`` cell: ``"entity - whole (bicycle)"`` -> ``("entity", "entity - whole")``."""
    l2 = tuple_text.split("(")[0].strip()
    return l2.split("-")[0].strip(), l2


def compute_dpg_bench(
    images: Mapping[str, Image.Image],
    questions: Mapping[str, DPGItem],
    vqa: VQA,
    resolution: int,
    pic_num: int = 4,
    on_error: str = "raise",
) -> DPGResult:
    """Score ``images`` (``{item_id: 2x2 grid}``) with ``vqa``; see the module docstring for the aggregation.

    ``on_error="skip"`` leaves out (and records) an image whose item has no questions or whose scoring fails, as
    the reference's ``try/except`` does; ``"raise"`` stops with the error.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error = {on_error!r}: must be 'raise' or 'skip'")
    if not images:
        raise ValueError("DPG-Bench: no images to score")
    per_image: dict[str, DPGImageScore] = {}
    skipped: list[tuple[str, str]] = []
    l2_scores: dict[str, list[float]] = defaultdict(list)
    for item_id, image in images.items():
        try:
            if item_id not in questions:
                raise KeyError(f"no questions for item {item_id!r}")
            item = questions[item_id]
            result = score_dpg_image(image, item, vqa, resolution, pic_num)
        except (KeyError, ValueError) as e:
            if on_error == "raise":
                raise ValueError(f"DPG-Bench image {item_id}: {type(e).__name__}: {e}") from None
            log.warning("DPG-Bench: skipped image %s (%s: %s)", item_id, type(e).__name__, e)
            skipped.append((item_id, f"{type(e).__name__}: {e}"))
            continue
        per_image[item_id] = result
        for qid, value in result.last_crop_raw.items():
            l2_scores[category_of(item.tuples[qid])[1]].append(value)
    if not per_image:
        raise ValueError(f"DPG-Bench: every image was skipped ({len(skipped)})")
    l1_scores: dict[str, list[float]] = defaultdict(list)
    for l2, values in l2_scores.items():
        l1_scores[l2.split("-")[0].strip()].extend(values)

    def mean100(values: list[float]) -> float:
        return 100.0 * math.fsum(values) / len(values)

    return DPGResult(
        overall=mean100([r.score for r in per_image.values()]),
        l1={k: mean100(v) for k, v in l1_scores.items()},
        l2={k: mean100(v) for k, v in sorted(l2_scores.items())},
        per_image=per_image,
        skipped=skipped,
    )


def load_dpg_images(folder: str | Path) -> dict[str, Image.Image]:
    """``{item_id: image}`` for ``folder/<item_id>.png`` (or .jpg); the key is the name before the first dot, as
    the reference's ``basename.split('.')[0]``. (The reference lists every file, including its own results txt,
    which then fails and is skipped; only image files are read here.)"""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: DPG image folder not found")
    out: dict[str, Image.Image] = {}
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.suffix.lower() in (".png", ".jpg", ".jpeg"):
            key = p.name.split(".")[0]
            if key in out:
                raise DataError(f"{p}: a second image for item {key}")
            with Image.open(p) as im:
                out[key] = im.copy()
    if not out:
        raise DataError(f"{folder}: no .png/.jpg images")
    return out


class MPLUGVQA:
    """The reference VQA backend: ModelScope ``visual_question_answering`` pipeline with mPLUG-large
    (``damo/mplug_visual-question-answering_coco_large_en``), loaded lazily from a local model folder.
    ``vqa(image, question)`` returns the pipeline's ``text``."""

    SOURCE = (
        "download the ModelScope model damo/mplug_visual-question-answering_coco_large_en "
        "(`modelscope download --model damo/mplug_visual-question-answering_coco_large_en --local_dir DIR`) "
        "and set model_dir: DIR"
    )

    def __init__(self, model_dir: str | Path | None = None, device: str | None = None) -> None:
        self.model_dir, self.device = model_dir, device
        self.pipeline: Any = None

    def _load(self) -> None:
        pipelines = require_module(
            "modelscope.pipelines", "modelscope fairseq librosa==0.10.1 'rouge_score<=0.0.4'", "dpg_vqa"
        )
        constant = require_module("modelscope.utils.constant", "modelscope", "dpg_vqa")
        root = require_path(self.model_dir, "dpg_vqa", "model_dir", self.SOURCE, is_dir=True)
        device = "gpu" if default_device(self.device).startswith("cuda") else "cpu"
        self.pipeline = pipelines.pipeline(constant.Tasks.visual_question_answering, model=str(root), device=device)

    def __call__(self, image: Image.Image, question: str) -> str:
        if self.pipeline is None:
            self._load()
        return self.pipeline({"image": image, "question": question})["text"]


class VQAServerClient:
    """A VQA model behind a local HTTP server (mPLUG in its own environment, as ModelScope's pins clash with
    ddmrl's): POST JSON ``{"image": <base64 PNG>, "question": ...}`` to ``url``, reply JSON ``{"answer": ...}``.
    Timeouts and retries are bounded (:func:`ddmrl.rewards.remote.http_post`)."""

    def __init__(self, url: str, timeout_s: float = 60.0, max_retries: int = 3, backoff_s: float = 1.0) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url = {url!r}: must be an http(s) URL of the VQA server")
        self.url, self.timeout_s, self.max_retries, self.backoff_s = url, timeout_s, max_retries, backoff_s

    def __call__(self, image: Image.Image, question: str) -> str:
        import base64
        import json

        body = {"image": base64.b64encode(encode_image(image, "PNG")).decode("ascii"), "question": question}
        raw = http_post(self.url, json.dumps(body).encode(), headers={"Content-Type": "application/json"},
                        timeout_s=self.timeout_s, max_retries=self.max_retries, backoff_s=self.backoff_s,
                        scorer="dpg vqa_server", hint="start the VQA server first and set vqa.url")  # fmt: skip
        try:
            return str(json.loads(raw)["answer"])
        except (ValueError, KeyError, TypeError) as e:
            raise RuntimeError(
                f"dpg vqa_server: {self.url} did not reply {{'answer': ...}} ({type(e).__name__})"
            ) from None


VQA_MODELS: dict[str, Callable[..., VQA]] = {"mplug": MPLUGVQA, "vqa_server": VQAServerClient}


def vqa_from_params(spec: Mapping[str, Any]) -> VQA:
    """The VQA model of a params entry ``{model: mplug | vqa_server, **options}`` (nothing loaded yet); options set
    to None are left out."""
    options = {k: v for k, v in spec.items() if v is not None}
    model = options.pop("model", None)
    if model not in VQA_MODELS:
        raise ValueError(f"vqa.model = {model!r}: choose one of {', '.join(VQA_MODELS)}")
    try:
        return VQA_MODELS[model](**options)
    except TypeError as e:
        raise ValueError(f"vqa: {e}") from None
