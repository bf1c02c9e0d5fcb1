"""``geneval_mini``: an embedded GenEval-style text-to-image task on a tiny canvas of discrete image codes.

GenEval (Ghosh et al., 2023, djghosh13/geneval) asks a text-to-image model for compositional prompts in six tags
(``single_object``, ``two_object``, ``counting``, ``colors``, ``position``, ``color_attr``), detects objects with
Mask2Former, classifies their colour with CLIP and applies fixed rules. This task keeps the prompts
(``prompts/create_prompts.py``), the metadata schema (``evaluation_metadata.jsonl``) and the rules
(``evaluation/evaluate_images.py``: ``evaluate`` and ``relative_position``) word for word, and replaces the
learned detector by an exact one, so that a tiny model can learn it and the verdict needs no weights:

* a scene is an ``height x width`` grid (default 8x8) of image codes: ``0`` is the background, ``1..6`` the colours
  :data:`COLORS` (the first six of GenEval's ten);
* objects are one-colour *shapes* (:data:`SHAPES`, at most 3x3). Reference scenes put each object at the top-left
  cell of a random *slot* (``placement="slots"``, default): the canvas is cut into 4x4 slots, the four quadrants of
  8x8, so objects never touch. This layout prior is our change to make the benchmark learnable by a model trained for
  minutes on a CPU (measured, same model and 1000 steps: GenEval Overall 0-0.7 % with objects anywhere, 9.4 %
  with slots); ``placement="free"`` puts them anywhere, one background cell apart (also diagonally). Prompts, rules and
  detector are the same for both, and a generated object counts wherever it is drawn;
* the detector (:func:`detect`) takes the 4-connected components of same-colour cells; a component whose shape is
  a class is one detection (score 1.0, colour = its cells' colour, box in cell units), any other is ignored.

The RL reward is GenEval's verdict (or the fraction of its checks passed, ``partial_credit``); with ``reward_models``
it is instead a weighted sum of image reward models (``ddmrl.rewards``, one of a researcher's own included) on the
rendered scenes, as real text-to-image RL scores images (a malformed scene: 0). Evaluation is GenEval's either way.

Sequence layout (MMaDA): prompt words, ``<soi>`` (last prompt token), ``height*width`` code tokens ``<i0>..<i6>``
(the completion), then ``<eoi>`` (:attr:`GenEvalMini.completion_suffix`, appended by the model layout, not
generated). Every word of the prompts is an atomic special token; the tokenizer matches added tokens
leftmost-longest, so ``a``/``an``/``and``/``above`` split as intended (tested). The longest prompt is 20 tokens.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from PIL import Image, UnidentifiedImageError
from pydantic import Field, model_validator

from ddmrl.config._base import Bool, Int, Section, Str, section
from ddmrl.config.tasks import RewardEntry, check_reward_entries
from ddmrl.io import DataError, atomic_path
from ddmrl.rewards.registry import reward_from_params
from ddmrl.tasks.base import Example, Task

__all__ = [
    "COLORS",
    "GENEVAL_COLORS",
    "PALETTE",
    "PLACEMENTS",
    "SHAPES",
    "TAGS",
    "Detection",
    "GenEvalMini",
    "all_metadata",
    "check",
    "detect",
    "evaluate",
    "evaluate_folder",
    "make_metadata",
    "parse_grid",
    "read_png",
    "relative_position",
    "render_png",
    "slot_origins",
    "write_geneval_folder",
]

Grid = list[list[int]]  # [H][W] image codes, 0 = background

TAGS = ("single_object", "two_object", "counting", "colors", "position", "color_attr")
GENEVAL_COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white")
COLORS = GENEVAL_COLORS[:6]  # code k (1..6) is COLORS[k-1]
POSITIONS = ("left of", "right of", "above", "below")
NUMBERS = ("zero", "one", "two", "three", "four")
#: object classes as (row, col) cells, in a fixed orientation
SHAPES: dict[str, frozenset[tuple[int, int]]] = {
    "square": frozenset({(0, 0), (0, 1), (1, 0), (1, 1)}),
    "bar": frozenset({(0, 0), (0, 1), (0, 2)}),
    "pillar": frozenset({(0, 0), (1, 0), (2, 0)}),
    "corner": frozenset({(0, 0), (1, 0), (1, 1)}),
    "tee": frozenset({(0, 0), (0, 1), (0, 2), (1, 1)}),
    "plus": frozenset({(0, 1), (1, 0), (1, 1), (1, 2), (2, 1)}),
}
_CLASS_OF_SHAPE = {cells: name for name, cells in SHAPES.items()}
#: RGB of every GenEval colour name, plus the background (GenEval's crop background ``#999``)
PALETTE: dict[str, tuple[int, int, int]] = {
    "background": (153, 153, 153),
    "red": (220, 30, 30),
    "orange": (255, 140, 0),
    "yellow": (250, 220, 20),
    "green": (40, 160, 50),
    "blue": (30, 80, 220),
    "purple": (140, 50, 180),
    "pink": (255, 150, 200),
    "brown": (130, 80, 30),
    "black": (0, 0, 0),
    "white": (255, 255, 255),
}
CODE_RGB = (PALETTE["background"], *(PALETTE[c] for c in COLORS))  # code -> RGB
# evaluate_images.py defaults: scores > 0.3 (0.9 for counting), at most 16 per class, position_threshold 0.1
MAX_OBJECTS, POSITION_THRESHOLD = 16, 0.1


def with_article(name: str) -> str:
    """GenEval's ``with_article``: ``an`` before a vowel."""
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def make_plural(name: str) -> str:
    """GenEval's ``make_plural``: ``es`` after a final ``s``, else ``s``."""
    return f"{name}es" if name[-1] in "s" else f"{name}s"


# ----------------------------------------------------------------------------------------------- detector + rules
@dataclass(frozen=True)
class Detection:
    """One detected object: class, colour name, its cells (row, col) and its box ``(x1, y1, x2, y2)`` in cells."""

    cls: str
    color: str
    cells: tuple[tuple[int, int], ...]
    bbox: tuple[int, int, int, int]  # x2/y2 exclusive, so x2 - x1 is the width in cells, like a pixel box


def detect(grid: Grid) -> dict[str, list[Detection]]:
    """Detections per class: 4-connected components of one colour whose shape (up to translation) is a class.

    Stands in for Mask2Former + CLIP colour. Detections of a class are in raster order of their first cell (the
    "score order" GenEval's rules read top-``count`` from), at most :data:`MAX_OBJECTS` per class.
    """
    h, w = len(grid), len(grid[0])
    seen: set[tuple[int, int]] = set()
    found: dict[str, list[Detection]] = {}
    for r0, c0 in itertools.product(range(h), range(w)):
        code = grid[r0][c0]
        if code == 0 or (r0, c0) in seen:
            continue
        comp, stack = [], [(r0, c0)]
        seen.add((r0, c0))
        while stack:  # flood fill over 4-neighbours of the same code
            r, c = stack.pop()
            comp.append((r, c))
            for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
                if 0 <= rr < h and 0 <= cc < w and (rr, cc) not in seen and grid[rr][cc] == code:
                    seen.add((rr, cc))
                    stack.append((rr, cc))
        top, left = min(r for r, _ in comp), min(c for _, c in comp)
        cls = _CLASS_OF_SHAPE.get(frozenset((r - top, c - left) for r, c in comp))
        if cls is not None and len(found.get(cls, [])) < MAX_OBJECTS:
            bottom, right = max(r for r, _ in comp) + 1, max(c for _, c in comp) + 1
            det = Detection(cls, COLORS[code - 1], tuple(sorted(comp)), (left, top, right, bottom))
            found.setdefault(cls, []).append(det)
    return found


def relative_position(box_a: tuple[float, ...], box_b: tuple[float, ...]) -> set[str]:
    """Relations of box A to box B, GenEval's ``relative_position`` (boxes ``x1, y1, x2, y2``, y grows down).

    The centre offset A - B is shrunk per axis by ``0.1 * (size_A + size_B)`` (clamped at 0, sign kept), divided
    by the norm of the original offset and thresholded at 0.5; both shrunk components under 1e-3 gives no relation.
    """
    offset = ((box_a[0] + box_a[2] - box_b[0] - box_b[2]) / 2, (box_a[1] + box_a[3] - box_b[1] - box_b[3]) / 2)
    sizes = (box_a[2] - box_a[0] + box_b[2] - box_b[0], box_a[3] - box_a[1] + box_b[3] - box_b[1])  # widths, heights
    rx, ry = (math.copysign(max(abs(o) - POSITION_THRESHOLD * s, 0.0), o) for o, s in zip(offset, sizes, strict=True))
    if abs(rx) < 1e-3 and abs(ry) < 1e-3:
        return set()
    norm = math.hypot(*offset)  # of the original offset
    dx, dy = rx / norm, ry / norm
    hits = (dx < -0.5, dx > 0.5, dy < -0.5, dy > 0.5)
    return {rel for rel, hit in zip(POSITIONS, hits, strict=True) if hit}


def evaluate(objects: dict[str, list[Detection]], metadata: dict[str, Any]) -> tuple[bool, str, list[bool]]:
    """GenEval's ``evaluate`` on detections: ``(correct, reason, checks)``.

    Include clauses are ANDed: the top-``count`` detections of the class must exist; with ``color``, at least
    ``count`` of them must have it; with ``position: [rel, i]``, every (object, object of matched include ``i``)
    pair must have ``rel``. Exclude clauses are ORed: ``count`` or more detections of the class fail the image.
    ``checks`` lists one bool per check (count, colour, position per include; one per exclude), a check that
    GenEval skips after an earlier failure counting as failed; it feeds the ``partial_credit`` reward.
    """
    correct, reason, checks, matched_groups = True, [], [], []
    for req in metadata.get("include", []):
        cls, count = req["class"], req["count"]
        found = objects.get(cls, [])[:count]
        matched = len(found) >= count
        checks.append(matched)
        if not matched:
            reason.append(f"expected {cls}>={count}, found {len(found)}")
        if "color" in req:
            colors = [d.color for d in found]
            ok = matched and colors.count(req["color"]) >= count
            if matched and not ok:
                reason.append(
                    f"expected {req['color']} {cls}>={count}, found {colors.count(req['color'])} {req['color']}; and "
                    + ", ".join(f"{colors.count(c)} {c}" for c in GENEVAL_COLORS if c in colors)
                )
            matched = ok
            checks.append(ok)
        if "position" in req:
            expected_rel, target_group = req["position"]
            ok = matched
            if matched and matched_groups[target_group] is None:
                ok = False
                reason.append(f"no target for {cls} to be {expected_rel}")
            elif matched:
                for obj, target in itertools.product(found, matched_groups[target_group]):
                    true_rels = relative_position(obj.bbox, target.bbox)
                    if expected_rel not in true_rels:
                        ok = False
                        reason.append(f"expected {cls} {expected_rel} target, found {' and '.join(true_rels)} target")
                        break
            matched = ok
            checks.append(ok)
        correct = correct and matched
        matched_groups.append(found if matched else None)
    for req in metadata.get("exclude", []):
        n = len(objects.get(req["class"], []))
        checks.append(n < req["count"])
        if n >= req["count"]:
            correct = False
            reason.append(f"expected {req['class']}<{req['count']}, found {n}")
    return correct, "\n".join(reason), checks


def check(grid: Grid, metadata: dict[str, Any]) -> tuple[bool, str, dict[str, list[list[float]]]]:
    """``(correct, reason, details)`` of one scene, ``details`` = kept boxes per class ``[x1, y1, x2, y2, score]``
    as in GenEval's results rows."""
    objects = detect(grid)
    correct, reason, _ = evaluate(objects, metadata)
    return correct, reason, {cls: [[*d.bbox, 1.0] for d in dets] for cls, dets in objects.items()}


# ----------------------------------------------------------------------------------------------- prompts + scenes
def _metadata(tag: str, include: list[dict[str, Any]], prompt: str, exclude: list | None = None) -> dict[str, Any]:
    """A GenEval metadata line, keys in the order of ``evaluation_metadata.jsonl``."""
    return {"tag": tag, "include": include, **({"exclude": exclude} if exclude else {}), "prompt": prompt}


def make_metadata(tag: str, args: tuple) -> dict[str, Any]:
    """The GenEval metadata line of a tag and its arguments, built as ``prompts/create_prompts.py`` does:
    ``(cls,)``, ``(cls_a, cls_b)``, ``(cls, n)``, ``(cls, color)``, ``(cls_a, cls_b, relation)`` for "a photo of
    a A relation a B", ``(cls_a, cls_b, color_a, color_b)``."""
    if tag == "single_object":
        (a,) = args
        return _metadata(tag, [{"class": a, "count": 1}], f"a photo of {with_article(a)}")
    if tag == "two_object":
        a, b = args
        return _metadata(
            tag,
            [{"class": a, "count": 1}, {"class": b, "count": 1}],
            f"a photo of {with_article(a)} and {with_article(b)}",
        )
    if tag == "counting":
        a, n = args
        return _metadata(
            tag,
            [{"class": a, "count": n}],
            f"a photo of {NUMBERS[n]} {make_plural(a)}",
            exclude=[{"class": a, "count": n + 1}],
        )
    if tag == "colors":
        a, c = args
        return _metadata(tag, [{"class": a, "count": 1, "color": c}], f"a photo of {with_article(c)} {a}")
    if tag == "position":  # "a photo of a A rel a B": include[0] = B, include[1] = A positioned relative to it
        a, b, rel = args
        return _metadata(
            tag,
            [{"class": b, "count": 1}, {"class": a, "count": 1, "position": [rel, 0]}],
            f"a photo of {with_article(a)} {rel} {with_article(b)}",
        )
    a, b, ca, cb = args  # color_attr
    return _metadata(
        tag,
        [{"class": a, "count": 1, "color": ca}, {"class": b, "count": 1, "color": cb}],
        f"a photo of {with_article(ca)} {a} and {with_article(cb)} {b}",
    )


@cache
def _choices(tag: str) -> tuple[tuple, ...]:
    """Every argument tuple of a tag (distinct classes, distinct colours in ``color_attr``, as GenEval)."""
    pairs = list(itertools.permutations(SHAPES, 2))
    return tuple(
        {
            "single_object": [(a,) for a in SHAPES],
            "two_object": pairs,
            "counting": [(a, n) for a in SHAPES for n in (2, 3, 4)],
            "colors": [(a, c) for a in SHAPES for c in COLORS],
            "position": [(a, b, rel) for a, b in pairs for rel in POSITIONS],
            "color_attr": [(a, b, ca, cb) for a, b in pairs for ca, cb in itertools.permutations(COLORS, 2)],
        }[tag]
    )


@cache
def _prompts(tag: str) -> tuple[str, ...]:
    """The prompt of every argument tuple of ``_choices(tag)``, in the same order (built once per tag)."""
    return tuple(make_metadata(tag, args)["prompt"] for args in _choices(tag))


def all_metadata() -> list[dict[str, Any]]:
    """Every prompt of the task as GenEval metadata (6 + 30 + 18 + 36 + 120 + 900 = 1110), tag by tag."""
    return [make_metadata(tag, args) for tag in TAGS for args in _choices(tag)]


WORDS = tuple(dict.fromkeys(w for m in all_metadata() for w in m["prompt"].split(" ")))  # first-appearance order


PLACEMENTS = ("slots", "free")
SLOT = 4  # slot pitch in cells: a shape (at most 3x3) and one background row and column


def slot_origins(height: int, width: int) -> list[tuple[int, int]]:
    """Top-left cells of the ``placement="slots"`` slots: every 4th row and column that still holds a 3x3 shape
    (the four quadrants of an 8x8 canvas)."""
    return [(r, c) for r in range(0, height - 2, SLOT) for c in range(0, width - 2, SLOT)]


def _free_origins(rng: random.Random, classes: list[str], height: int, width: int) -> list[tuple[int, int]] | None:
    """Random top-left cells for ``classes`` anywhere on the canvas, one background cell apart (also diagonally);
    None when one no longer fits."""
    origins, blocked = [], set()
    for cls in classes:
        cells = SHAPES[cls]
        spots = [
            (r0, c0)
            for r0 in range(height - max(r for r, _ in cells))
            for c0 in range(width - max(c for _, c in cells))
            if not any((r0 + r, c0 + c) in blocked for r, c in cells)
        ]
        if not spots:
            return None
        r0, c0 = rng.choice(spots)
        origins.append((r0, c0))
        blocked |= {(r0 + r + dr, c0 + c + dc) for r, c in cells for dr in (-1, 0, 1) for dc in (-1, 0, 1)}
    return origins


def sample_scene(
    rng: random.Random, metadata: dict[str, Any], height: int = 8, width: int = 8, placement: str = "slots"
) -> Grid:
    """A random scene that passes ``metadata``: the include objects (uncoloured ones in random colours), each at the
    top-left of a random slot (:func:`slot_origins`, ``placement="slots"``) or anywhere one background cell apart
    (``"free"``); placements are redrawn until :func:`check` accepts (e.g. the relation)."""
    include = metadata["include"]
    for _ in range(1000):
        objs = [(r["class"], r.get("color") or rng.choice(COLORS)) for r in include for _ in range(r["count"])]
        if placement == "slots":
            origins = rng.sample(slot_origins(height, width), len(objs))
        else:
            origins = _free_origins(rng, [cls for cls, _ in objs], height, width)
            if origins is None:
                continue
        grid = [[0] * width for _ in range(height)]
        for (cls, color), (r0, c0) in zip(objs, origins, strict=True):
            for r, c in SHAPES[cls]:
                grid[r0 + r][c0 + c] = COLORS.index(color) + 1
        if check(grid, metadata)[0]:
            return grid
    raise RuntimeError(f"geneval_mini: no {height}x{width} scene found for {metadata['prompt']!r}")


# ----------------------------------------------------------------------------------------------- the task


@section
class Params(Section):
    """geneval-mini (``ddmrl.tasks.geneval_mini``): GenEval's tags, prompts and rules on a small canvas of colour
    codes, judged by an exact detector."""

    height: Int = Field(8, ge=7, le=16, description="Canvas rows (7 holds four plus shapes).")
    width: Int = Field(8, ge=7, le=16, description="Canvas columns.")
    partial_credit: Bool = Field(
        False, description="Reward the fraction of GenEval's checks passed (1 exactly when GenEval says correct)."
    )
    placement: Literal["slots", "free"] = Field(
        "slots", description="Reference scenes put objects in the canvas's quadrants (slots) or anywhere (free)."
    )
    reward_models: Annotated[dict[Str, RewardEntry], Field(min_length=1)] | None = Field(
        None,
        description="The RL reward as a weighted sum of image reward models on the rendered scenes, {entry: {model, "
        "weight, ...}} (ddmrl.rewards; null: GenEval's rules).",
    )

    @model_validator(mode="after")
    def _check(self) -> Params:
        check_reward_entries(self.reward_models, "reward_models")
        return self


class GenEvalMini(Task):
    """GenEval-style text-to-image on a ``height x width`` canvas; reward = GenEval's per-image verdict.

    ``partial_credit=True`` makes the reward denser: the fraction of :func:`evaluate`'s checks passed (count,
    colour and position per include clause, one per exclude clause), still 1.0 exactly when GenEval says correct.
    ``placement`` (``slots`` or ``free``) chooses where reference scenes put objects (:func:`sample_scene`).
    ``reward_models`` (a ``ddmrl.rewards.registry.reward_from_params`` section) replaces the rules' reward by reward
    models' scores of the rendered scenes.
    """

    params = Params  # its section, task_params.<name> (ddmrl.config validates it)

    name = "geneval_mini"
    modality = "image"
    image_tokens = tuple(f"<i{k}>" for k in range(len(COLORS) + 1))  # code order; <i0> = background
    special_tokens = ("<soi>", "<eoi>", *image_tokens, *WORDS)  # image codes: one contiguous id range
    completion_suffix = ("<eoi>",)
    alphabet = " "
    prompt_length = 20  # longest prompt: color_attr, 10 words + 9 spaces + <soi>

    def __init__(
        self,
        height: int = 8,
        width: int = 8,
        partial_credit: bool = False,
        placement: str = "slots",
        reward_models: dict[str, Any] | None = None,
    ) -> None:
        if not (7 <= height <= 16 and 7 <= width <= 16):  # 7x7 is the least that holds four pluses
            raise ValueError(f"geneval_mini: height and width must be in [7, 16], got {height}x{width}")
        if placement not in PLACEMENTS:
            raise ValueError(f"geneval_mini: placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
        self.height, self.width, self.partial_credit, self.placement = height, width, partial_credit, placement
        self.completion_length = height * width
        self.reward_model = reward_from_params(reward_models) if reward_models else None  # nothing loaded yet

    def sample(self, rng: random.Random) -> Example:
        tag = rng.choice(TAGS)
        metadata = make_metadata(tag, rng.choice(_choices(tag)))
        return self.example(metadata, rng)

    def generate(self, n: int, seed: int, exclude: set[str] | None = None) -> list[Example]:
        """``n`` training examples drawn with ``seed``: a tag uniformly, then one of its prompts not in ``exclude``.
        Unlike text tasks, a prompt may repeat (with another scene): the small tags have only a handful of prompts,
        and a batch of distinct prompts would under-represent them."""
        rng, exclude = random.Random(seed), exclude or set()
        allowed = {t: [a for a, p in zip(_choices(t), _prompts(t), strict=True) if p not in exclude] for t in TAGS}
        if not all(allowed.values()):
            empty = [t for t, v in allowed.items() if not v]
            raise ValueError(f"{self.name}: every prompt of tag(s) {', '.join(empty)} is excluded")
        draws = []
        for _ in range(n):
            tag = rng.choice(TAGS)
            draws.append(self.example(make_metadata(tag, rng.choice(allowed[tag])), rng))
        return draws

    def held_out(self, n: int, seed: int) -> list[Example]:
        """GenEval-style held-out prompts, stratified by tag: ceil(n / 6) prompts per tag, but never more than a
        third of a tag's prompts (at least one), so that every tag keeps prompts for training (single_object has
        only 6). Training draws exclude these prompts: held-out prompts are novel compositions, as in GenEval."""
        rng, out = random.Random(seed), []
        for tag in TAGS:
            choices = _choices(tag)
            quota = min(math.ceil(n / len(TAGS)), max(1, len(choices) // 3))
            out += [self.example(make_metadata(tag, args), rng) for args in rng.sample(choices, quota)]
        return out

    def example(self, metadata: dict[str, Any], rng: random.Random) -> Example:
        """The Example of a metadata line, with a random scene satisfying it as the reference answer."""
        grid = sample_scene(rng, metadata, self.height, self.width, self.placement)
        return Example(
            id=metadata["prompt"], prompt=metadata["prompt"] + "<soi>", answer=self.to_text(grid), gold=metadata
        )

    def to_text(self, grid: Grid) -> str:
        """The completion text of a grid: ``height*width`` code tokens, row by row."""
        return "".join(self.image_tokens[code] for row in grid for code in row)

    def _judge(self, completion: str, example: Example) -> dict[str, Any]:
        try:
            grid = parse_grid(completion, self.height, self.width)
        except ValueError as e:
            return {"correct": False, "reason": f"malformed: {e}", "tag": example.gold["tag"], "fraction": 0.0}
        objects = detect(grid)
        correct, reason, checks = evaluate(objects, example.gold)
        details = {cls: [[*d.bbox, 1.0] for d in dets] for cls, dets in objects.items()}
        return {
            "correct": correct,
            "reason": reason,
            "tag": example.gold["tag"],
            "fraction": sum(checks) / max(len(checks), 1),
            "details": details,
        }

    def reward(self, completion: str, example: Example) -> float:
        """1.0 if GenEval's rules accept the scene, else 0.0 (``partial_credit``: the fraction of checks passed)."""
        s = self._judge(completion, example)
        return float(s["fraction"]) if self.partial_credit else float(s["correct"])

    def batch_rewards(self, completions: list[str], completion_ids: Any, examples: list[Example]) -> list[float]:
        """:meth:`reward` of each completion, or with ``reward_models`` their scores of the rendered scenes for the
        prompts (a malformed scene scores 0)."""
        if self.reward_model is None:
            return super().batch_rewards(completions, completion_ids, examples)
        grids = {}
        for i, completion in enumerate(completions):
            try:
                grids[i] = parse_grid(completion, self.height, self.width)
            except ValueError:
                continue
        images = [render_image(grid) for grid in grids.values()]
        scores = self.reward_model.score(images, [examples[i].gold["prompt"] for i in grids])
        out = [0.0] * len(completions)
        for i, value in zip(grids, scores, strict=True):
            out[i] = value
        return out

    def score(self, completion: str, example: Example) -> dict[str, Any]:
        """``{"correct", "reason", "tag", "fraction", "details"}``; a malformed completion is incorrect."""
        return self._judge(completion, example)

    def judge_images(
        self, folder: str | Path, examples: list[Example], texts: list[list[str]], completion_ids: list[Any]
    ) -> list[dict[str, Any]]:
        """Render each example's completions (``texts[i]``) as PNGs in GenEval's folder layout under ``folder``, then
        judge the PNGs read back from disk as GenEval's evaluator judges a folder; its results rows."""
        grids = [[parse_grid(text, self.height, self.width) for text in sample] for sample in texts]
        write_geneval_folder(folder, [ex.gold for ex in examples], grids)
        return evaluate_folder(folder, self.height, self.width)

    def accuracy(self, scores: list[dict[str, Any]]) -> float:
        """GenEval Overall in percent: the unweighted mean over tags of the per-tag mean of ``correct``."""
        by_tag: dict[str, list[bool]] = {}
        for s in scores:
            by_tag.setdefault(s["tag"], []).append(bool(s["correct"]))
        return 100.0 * sum(sum(v) / len(v) for v in by_tag.values()) / max(len(by_tag), 1)


_CODE = re.compile(r"<i(\d+)>")


def parse_grid(completion: str, height: int = 8, width: int = 8) -> Grid:
    """The grid of a completion of ``height*width`` code tokens (one trailing ``<eoi>`` allowed); ValueError else."""
    text = completion.removesuffix("<eoi>")
    codes = [int(m.group(1)) for m in _CODE.finditer(text)]
    if "".join(f"<i{k}>" for k in codes) != text:
        raise ValueError(f"not only image tokens: {text[:60]!r}")
    if len(codes) != height * width:
        raise ValueError(f"{len(codes)} image tokens, expected {height}x{width}={height * width}")
    if any(k > len(COLORS) for k in codes):
        raise ValueError(f"unknown image code <i{max(codes)}> (codes are <i0>..<i{len(COLORS)}>)")
    return [codes[r * width : (r + 1) * width] for r in range(height)]


# ----------------------------------------------------------------------------------------------- PNG images
def render_image(grid: Grid, cell_px: int = 16) -> Image.Image:
    """``grid`` as an RGB image, each cell a ``cell_px`` square in its :data:`PALETTE` colour."""
    h, w = len(grid), len(grid[0])
    img = Image.new("RGB", (w, h))
    img.putdata([CODE_RGB[code] for row in grid for code in row])
    return img.resize((w * cell_px, h * cell_px), Image.NEAREST)


def render_png(grid: Grid, path: str | Path, cell_px: int = 16) -> None:
    """Write ``grid`` as an RGB PNG (:func:`render_image`; atomic write)."""
    with atomic_path(path) as tmp:
        render_image(grid, cell_px).save(tmp, format="PNG")


def _distance(p: tuple[int, ...], q: tuple[int, ...]) -> int:
    return sum((a - b) ** 2 for a, b in zip(p, q, strict=True))


def read_png(path: str | Path, height: int = 8, width: int = 8) -> Grid:
    """Decode a rendered scene: the nearest code colour (RGB distance) at the centre of each of the cells."""
    try:
        with Image.open(path) as im:
            img = im.convert("RGB")
    except (OSError, UnidentifiedImageError) as e:
        raise DataError(f"{path}: cannot be read as an image ({e})") from None
    cw, ch = img.width / width, img.height / height
    grid = []
    for r in range(height):
        row = []
        for c in range(width):
            px = img.getpixel((int((c + 0.5) * cw), int((r + 0.5) * ch)))
            row.append(min(range(len(CODE_RGB)), key=lambda k: _distance(px, CODE_RGB[k])))
        grid.append(row)
    return grid


# ----------------------------------------------------------------------------------------------- GenEval's folders
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
