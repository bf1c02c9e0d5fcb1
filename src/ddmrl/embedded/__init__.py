"""Base models that come with the package: the embedded default's pre-trained TinyDDMs, one per pre-training seed,
"downloaded" by the download stage as a paper profile downloads LLaDA: found by the recipe that made them, checked
by their sha256 (``download.packaged``). ``profiles/pretrain.yaml`` pre-trains them again from scratch; in the
portable numerics (:mod:`ddmrl.numerics`) it gives the same bytes, which is how they were made (README.md here).

``bases.json`` maps a recipe's fingerprint (:func:`recipe_id`, the download stage's ``recipe`` in its metrics) to
the weights' ``file`` and ``sha256``, the pre-training's ``curve`` and its ``metrics``. ``python -m ddmrl.embedded
data/download/s0 ...`` adds the base models that download stages pre-trained.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ddmrl.errors import DownloadError

if TYPE_CHECKING:
    import torch

    from ddmrl.config import Config

#: the package's index; ``DDMRL_PACKAGED_BASES`` names another (a lab's own packaged base models; the tests')
INDEX = Path(__file__).parent / "bases.json"


def index_path() -> Path:
    return Path(os.environ.get("DDMRL_PACKAGED_BASES") or INDEX)


def recipe_id(cfg: Config, modality: str, seed: int) -> str:
    """The fingerprint of what decides a pre-trained base model's weights (``modality`` text or image): the
    held-out seed (the draws exclude those items), the tasks and their parameters, the model, the download section
    but for where the weights come from (``packaged``) and how many base models the sweep has (``base_per_seed``),
    the pre-training's ``seed``, and the image branch's caption dropout."""
    from ddmrl.training.resume import fingerprint
    from ddmrl.training.tracking import without_trackers

    branch = cfg.image if modality == "image" else cfg
    download = dataclasses.asdict(branch.download) | {"seed": seed}
    kept = {k: v for k, v in download.items() if k not in ("packaged", "base_per_seed")}
    dropout = cfg.image.cond_dropout_prob if modality == "image" else None
    model = dataclasses.asdict(branch.model)
    return fingerprint(
        "download", modality, cfg.seed, branch.tasks, branch.task_params, model, without_trackers(kept), dropout
    )


def index(path: Path) -> dict[str, dict]:
    """The packaged base models by recipe fingerprint (empty when there is no index)."""
    return json.loads(path.read_text()) if path.is_file() else {}


class Packaged(NamedTuple):
    """A packaged base model: its weights file, its pre-training's curve file and its index entry."""

    weights: Path
    curve: Path
    entry: dict


def packaged_base(run_id: str) -> Packaged | None:
    """The base model pre-trained with recipe ``run_id``, its sha256 checked; None when the package has none. A
    file whose digest differs is an error, not a fallback to pre-training."""
    path = index_path()
    entry = index(path).get(run_id)
    if entry is None:
        return None
    weights = path.parent / entry["file"]
    if not weights.is_file():
        raise DownloadError(f"{path}: the packaged base model {entry['file']} of recipe {run_id} is missing")
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    if digest != entry["sha256"]:
        raise DownloadError(f"{weights}: sha256 {digest[:12]}... is not the index's {entry['sha256'][:12]}...")
    return Packaged(weights, path.parent / entry["curve"], entry)


def load_weights(model: torch.nn.Module, weights: Path) -> None:
    """Load a packaged ``model.safetensors`` into a fresh model of its recipe; the keys a save leaves out are the
    tied ones (the output head that shares the input embeddings)."""
    from safetensors.torch import load_file

    missing, unexpected = model.load_state_dict(load_file(weights), strict=False)
    untied = set(missing) - set(getattr(model, "_tied_weights_keys", None) or ())
    if untied or unexpected:
        raise DownloadError(f"{weights}: not this recipe's model (missing {sorted(untied)}, extra {unexpected})")
    model.tie_weights()


def check_saved(model_dir: str | Path, entry: dict) -> None:
    """The saved checkpoint holds the packaged bytes (its sha256 is the index's)."""
    digest = hashlib.sha256((Path(model_dir) / "model.safetensors").read_bytes()).hexdigest()
    if digest != entry["sha256"]:
        raise DownloadError(f"{model_dir}: saved weights differ from the packaged {entry['file']} ({digest[:12]}...)")


def add(download_root: str | Path, path: Path = INDEX) -> str:
    """Package the base model a download stage pre-trained (``download_root``: its metrics.json, curve.csv and
    base/model.safetensors) under ``path``'s folder, indexed by its recipe; returns the recipe."""
    root = Path(download_root)
    metrics = json.loads((root / "metrics.json").read_text())
    if "packaged" in metrics:
        raise DownloadError(f"{root}: this base model came from the package; package a pre-trained one")
    run_id = metrics["recipe"]
    weights, curve = f"bases/{run_id}.safetensors", f"bases/{run_id}.curve.csv"
    (path.parent / "bases").mkdir(parents=True, exist_ok=True)
    (path.parent / weights).write_bytes((root / "base" / "model.safetensors").read_bytes())
    (path.parent / curve).write_text((root / "curve.csv").read_text())
    kept = {k: v for k, v in metrics.items() if k not in ("seconds", "recipe")}
    entry = {"file": weights, "sha256": hashlib.sha256((path.parent / weights).read_bytes()).hexdigest()}
    entries = index(path) | {run_id: entry | {"curve": curve, "metrics": kept}}
    path.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
    return run_id
