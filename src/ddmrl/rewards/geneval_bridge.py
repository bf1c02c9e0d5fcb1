"""GenEval (Ghosh et al. 2023) through the OFFICIAL evaluator, never a re-implementation of its detector.

``djghosh13/geneval``'s ``evaluation/evaluate_images.py`` needs its own old environment (python 3.9, torch 1.12 +
cu113, mmcv-full 1.7.1, mmdet 2.27.0, open-clip-torch 2.20, clip-benchmark; docs/rewards.md), a CUDA GPU
(it asserts one) and the Mask2Former checkpoint. This module:

- writes generated images in GenEval's folder layout (:func:`write_geneval_layout`);
- runs the evaluator as a subprocess with that environment's python, exactly as the README does
  (``python evaluation/evaluate_images.py IMAGEDIR --outfile OUT --model-path MODELDIR``, from the repo root),
  and reads its JSONL back (:func:`run_geneval`);
- leaves the summary (``evaluation/summary_scores.py``) to ``ddmrl.geneval.summarize``, which reads these rows and
  geneval-mini's alike: per-tag accuracy is the mean of ``correct`` over that tag's images, and the overall score
  is the unweighted mean of the tag accuracies;
- talks to a reward-server GenEval endpoint (:class:`GenEvalServerClient`, the Flow-GRPO / MaskGRPO
  ``geneval_score`` protocol) for RL-time scoring.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from ddmrl.io import DataError, atomic_path, read_jsonl
from ddmrl.rewards.interface import RewardSetupError
from ddmrl.rewards.remote import check_loopback, encode_image, post_pickle

#: default detector of evaluate_images.py (``--options model=...`` changes it); its checkpoint is MODEL_PATH/<name>.pth
DETECTOR_NAME = "mask2former_swin-s-p4-w7-224_lsj_8x2_50e_coco"
DETECTOR_URL = (
    "https://download.openmmlab.com/mmdetection/v3.0/mask2former/mask2former_swin-s-p4-w7-224_8xb2-lsj-50e_coco/"
    "mask2former_swin-s-p4-w7-224_8xb2-lsj-50e_coco_20220504_001756-c9d0c4f2.pth"
)
#: keys of one evaluator output row (evaluate_image's return value)
RESULT_KEYS = ("filename", "tag", "prompt", "correct", "reason", "metadata", "details")
#: the ``--options key=value`` names evaluate_images.py reads (any other key would be silently ignored by it)
EVALUATOR_OPTIONS = frozenset(
    {
        "model",
        "clip_model",
        "bgcolor",
        "crop",
        "threshold",
        "counting_threshold",
        "max_objects",
        "max_overlap",
        "position_threshold",
    }
)
GENEVAL_TAGS = ("single_object", "two_object", "counting", "colors", "position", "color_attr")
_SETUP = "see docs/rewards.md (GenEval environment)"


# ------------------------------------------------------------------------------------------------ layout


def write_geneval_layout(root: str | Path, items: Sequence[tuple[Mapping[str, Any], Sequence[Image.Image]]]) -> Path:
    """Write ``items`` (metadata line, images) as ``root/<NNNNN>/metadata.jsonl`` + ``samples/<kkkk>.png``.

    ``metadata.jsonl`` holds the one JSON object (the prompt's line of ``evaluation_metadata.jsonl``) that the
    evaluator reads with ``json.load``. The folder is written atomically (replaced as a whole).
    """
    root = Path(root)
    with atomic_path(root) as tmp:
        tmp.mkdir()
        for n, (meta, images) in enumerate(items):
            for k in ("tag", "prompt", "include"):
                if k not in meta:
                    raise ValueError(
                        f"GenEval item {n}: metadata has no '{k}' key (a line of evaluation_metadata.jsonl)"
                    )
            if not images:
                raise ValueError(f"GenEval item {n}: no images")
            folder = tmp / f"{n:05d}"
            (folder / "samples").mkdir(parents=True)
            (folder / "metadata.jsonl").write_text(json.dumps(dict(meta)))
            for k, im in enumerate(images):
                im.convert("RGB").save(folder / "samples" / f"{k:04d}.png")
    return root


def check_geneval_layout(image_dir: str | Path) -> int:
    """Number of images the evaluator will see under ``image_dir`` (digit folders with ``metadata.jsonl`` and
    ``samples/<digits>.png``); a one-line DataError when there are none or a folder lacks its metadata."""
    image_dir = Path(image_dir)
    if not image_dir.is_dir():
        raise DataError(f"{image_dir}: GenEval image folder not found")
    n = 0
    for sub in sorted(image_dir.iterdir()):
        if not (sub.is_dir() and sub.name.isdigit()):
            continue
        if not (sub / "metadata.jsonl").is_file():
            raise DataError(f"{sub}: GenEval prompt folder has no metadata.jsonl")
        samples = sub / "samples"
        if samples.is_dir():
            n += sum(1 for p in samples.iterdir() if p.is_file() and re.match(r"\d+\.png", p.name))
    if n == 0:
        raise DataError(f"{image_dir}: no images in GenEval layout (<NNNNN>/metadata.jsonl + <NNNNN>/samples/<k>.png)")
    return n


# ------------------------------------------------------------------------------------------------ evaluator


@dataclass(frozen=True)
class GenEvalEnv:
    """Where the official evaluator lives: the geneval checkout, its environment's python and the detector
    folder (``--model-path``); optional ``model_config`` (``--model-config``, default: mmdet's bundled config)."""

    geneval_repo: str | Path
    python: str | Path
    model_path: str | Path
    model_config: str | Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float | None = None


def _resolve_python(python: str | Path) -> str:
    p = str(python)
    found = shutil.which(p) if os.sep not in p else (p if os.path.isfile(p) and os.access(p, os.X_OK) else None)
    if not found:
        raise RewardSetupError(
            f"geneval: python {p} not found or not executable; create the GenEval environment (python 3.9, "
            f"torch 1.12.1+cu113, mmcv-full 1.7.1, mmdet 2.27.0 from its 2.x branch, open-clip-torch 2.20, "
            f"clip-benchmark) and pass its interpreter; {_SETUP}"
        )
    return found


def validate_geneval_env(env: GenEvalEnv) -> tuple[Path, str, Path]:
    """(repo, python, model_path) after checking each exists; one-line :class:`RewardSetupError` otherwise."""
    repo = Path(env.geneval_repo)
    script = repo / "evaluation" / "evaluate_images.py"
    if not script.is_file():
        raise RewardSetupError(
            f"geneval: {script} not found; clone https://github.com/djghosh13/geneval and pass the checkout as "
            f"geneval_repo; {_SETUP}"
        )
    if not (repo / "evaluation" / "object_names.txt").is_file():
        raise RewardSetupError(f"geneval: {repo / 'evaluation' / 'object_names.txt'} not found (incomplete checkout)")
    python = _resolve_python(env.python)
    unknown = sorted(set(env.options) - EVALUATOR_OPTIONS)
    if unknown:
        raise ValueError(
            f"geneval: unknown evaluator option(s) {', '.join(unknown)}; evaluate_images.py reads "
            f"{', '.join(sorted(EVALUATOR_OPTIONS))}"
        )
    model_path = Path(env.model_path)
    ckpt = model_path / f"{env.options.get('model', DETECTOR_NAME)}.pth"
    if not ckpt.is_file():
        raise RewardSetupError(
            f"geneval: detector checkpoint {ckpt} not found; run `evaluation/download_models.sh {model_path}` in the "
            f"geneval checkout (it fetches {DETECTOR_URL})"
        )
    if env.model_config is not None and not Path(env.model_config).is_file():
        raise RewardSetupError(f"geneval: model_config {env.model_config} not found (an mmdet 2.x mask2former config)")
    return repo, python, model_path


def geneval_command(image_dir: str | Path, outfile: str | Path, python: str, env: GenEvalEnv) -> list[str]:
    """The evaluator command line, run from the geneval repo root (README's form; absolute paths)."""
    cmd = [
        python,
        "evaluation/evaluate_images.py",
        str(Path(image_dir).resolve()),
        "--outfile",
        str(Path(outfile).resolve()),
        "--model-path",
        str(Path(env.model_path).resolve()),
    ]
    if env.model_config is not None:
        cmd += ["--model-config", str(Path(env.model_config).resolve())]
    if env.options:
        cmd += ["--options", *(f"{k}={v}" for k, v in env.options.items())]
    return cmd


def _tail(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return " | ".join(lines[-n:]) or "(no output)"


def run_geneval(
    image_dir: str | Path,
    outfile: str | Path,
    env: GenEvalEnv,
    extra_env: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Run the official evaluator on ``image_dir`` (GenEval layout) and return its rows (``outfile``, JSONL).

    The subprocess gets this process's environment minus ``PYTHONPATH``/``PYTHONHOME`` (they belong to this
    environment, not GenEval's), plus ``extra_env`` (e.g. ``HF_HUB_OFFLINE=1``, a CLIP cache folder). The output is
    written under a temporary name and renamed only after every row passed the schema check.
    """
    repo, python, _ = validate_geneval_env(env)
    n_images = check_geneval_layout(image_dir)
    proc_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc_env.update(extra_env or {})
    with atomic_path(outfile) as tmp:
        cmd = geneval_command(image_dir, tmp, python, env)
        try:
            res = subprocess.run(
                cmd, cwd=repo, env=proc_env, capture_output=True, text=True, timeout=env.timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"geneval: evaluator did not finish within {env.timeout_s} s: {' '.join(cmd)}"
            ) from None
        if res.returncode != 0:
            raise RuntimeError(
                f"geneval: evaluator exited with {res.returncode}: {' '.join(cmd)}; stderr: {_tail(res.stderr)}"
            )
        if not tmp.is_file():
            raise RuntimeError(f"geneval: evaluator exited 0 but wrote no {tmp}; stderr: {_tail(res.stderr)}")
        rows = read_geneval_results(tmp)
        if len(rows) != n_images:
            raise RuntimeError(f"geneval: evaluator returned {len(rows)} rows for {n_images} images in {image_dir}")
    return rows


def read_geneval_results(path: str | Path) -> list[dict[str, Any]]:
    """Rows of an evaluator results JSONL, each checked for the schema keys and a boolean ``correct``."""
    rows = read_jsonl(path, required=RESULT_KEYS)
    for n, row in enumerate(rows, 1):
        if not isinstance(row["correct"], bool):
            raise DataError(f"{path} row {n}: 'correct' = {row['correct']!r}, expected true/false")
    return rows


# ------------------------------------------------------------------------------------------------ reward server


@dataclass
class GenEvalServerResult:
    """Reply of a GenEval reward server: ``scores`` (partial credit per image, the RL reward MaskGRPO uses),
    ``rewards`` (official ``correct`` as 0/1; all 0 when ``only_strict``), ``strict_rewards`` (exact counts),
    and the per-tag lists (-10.0 marks an image of another tag, as the server does)."""

    scores: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    strict_rewards: list[float] = field(default_factory=list)
    group_rewards: dict[str, list[float]] = field(default_factory=dict)
    group_strict_rewards: dict[str, list[float]] = field(default_factory=dict)


class GenEvalServerClient:
    """Client of reward-server's ``app_geneval`` (127.0.0.1:18085 in Flow-GRPO / MaskGRPO): pickled
    ``{"images": [JPEG bytes], "meta_datas": [...], "only_strict": bool}`` in batches of ``batch_size``."""

    name = "geneval_server"

    def __init__(
        self,
        url: str = "http://127.0.0.1:18085",
        batch_size: int = 64,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        allow_remote: bool = False,
    ) -> None:
        if not allow_remote:
            check_loopback(url, self.name)
        if batch_size < 1:
            raise ValueError(f"{self.name}: batch_size = {batch_size}: must be >= 1")
        self.url, self.batch_size = url, batch_size
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s

    def score(
        self, images: Sequence[Image.Image], metadatas: Sequence[Mapping[str, Any]], only_strict: bool = True
    ) -> GenEvalServerResult:
        if len(images) != len(metadatas):
            raise ValueError(f"{self.name}: got {len(images)} images but {len(metadatas)} metadata records")
        out = GenEvalServerResult()
        groups: dict[str, list[float]] = defaultdict(list)
        strict_groups: dict[str, list[float]] = defaultdict(list)
        for start in range(0, len(images), self.batch_size):
            batch = slice(start, start + self.batch_size)
            reply = post_pickle(
                self.url,
                {
                    "images": [encode_image(im, "JPEG") for im in images[batch]],
                    "meta_datas": [dict(m) for m in metadatas[batch]],
                    "only_strict": only_strict,
                },
                timeout_s=self.timeout_s,
                max_retries=self.max_retries,
                backoff_s=self.backoff_s,
                scorer=self.name,
                hint="start reward-server's app_geneval (in the GenEval environment) on that port",
            )
            missing = [k for k in ("scores", "rewards", "strict_rewards") if k not in reply]
            if missing:
                raise RuntimeError(f"{self.name}: reply from {self.url} lacks {', '.join(missing)}")
            out.scores += [float(x) for x in reply["scores"]]
            out.rewards += [float(x) for x in reply["rewards"]]
            out.strict_rewards += [float(x) for x in reply["strict_rewards"]]
            for k, v in reply.get("group_rewards", {}).items():
                groups[k].extend(v)
            for k, v in reply.get("group_strict_rewards", {}).items():
                strict_groups[k].extend(v)
        if len(out.scores) != len(images):
            raise RuntimeError(f"{self.name}: server returned {len(out.scores)} scores for {len(images)} images")
        out.group_rewards, out.group_strict_rewards = dict(groups), dict(strict_groups)
        return out
