"""Watching a run while it goes: every row of a training curve reaches ``curve.csv`` and the experiment trackers as
it is logged (one row per GRPO rollout batch, one per ``log_every`` SFT or pre-training steps).

Trackers go through accelerate's interface (``Accelerator(log_with=...)``, ``init_trackers``, ``log``), named by
the stage's ``report_to`` key (TRL's name): ``tensorboard`` (event files) and ``dvclive`` (TSV/JSON files) are
offline and on by default; ``wandb`` where a user adds it (and installs wandb; ``WANDB_MODE=offline`` keeps it
local). Everything a tracker writes lives under the stage's log directory (``logs/<stage>/``, git-ignored and no
output of either engine). DVCLive is used as a file logger (:class:`DVCLiveFiles`): no ``dvc.yaml`` entries, no
DVC experiment, and no look for the repository, so inside a ``dvc repro`` or ``dvc exp run`` stage, in a git
repository without commits or without DVC, it only writes its own directory.

Resumed runs: the curve file is rewritten with the checkpoint's rows and the trackers are started afresh and given
those rows again (:meth:`RunLog.start`), so that the file and the TensorBoard and DVCLive histories of a resumed
run hold each step once, as the uninterrupted run's do (a W&B run of a resumed stage is a new W&B run holding the
whole history).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

from accelerate.tracking import DVCLiveTracker, TensorBoardTracker, WandBTracker, on_main_process

from ddmrl.config import ConfigError
from ddmrl.io import CsvLog


def trackers(report_to: tuple[str, ...], log_dir: str | Path | None, run_name: str, key: str) -> list:
    """accelerate tracker objects for ``Accelerator(log_with=...)``, writing under ``log_dir`` (None: no trackers).

    ``key`` names the params key in errors (``grpo.report_to``): a tracker whose package is missing is refused.
    """
    if log_dir is None:
        return []
    log_dir = Path(log_dir)
    out = []
    for name in report_to:
        if importlib.util.find_spec(name) is None:  # each tracker's package has its name (pyproject pins two)
            raise ConfigError(f"{key} = {list(report_to)!r}: {name} is not installed (pip install {name})")
        if name == "tensorboard":
            out.append(TensorBoardTracker("tensorboard", log_dir))  # events in <log_dir>/tensorboard
        elif name == "dvclive":
            out.append(DVCLiveFiles(dir=str(log_dir / "dvclive"), dvcyaml=None, save_dvc_exp=False))
        elif name == "wandb":
            project = os.environ.get("WANDB_PROJECT", "ddmrl")
            out.append(WandBTracker(project, name=run_name, dir=str(log_dir)))
    return out


class DVCLiveFiles(DVCLiveTracker):
    """accelerate's DVCLive tracker with ``dvclive.Live`` as a file logger. Live's constructor looks for the DVC
    repository from the working directory (``dvclive.live.get_dvc_repo``) to save experiments and write
    ``dvc.yaml``: in a git repository without DVC that runs ``dvc init``, and in one without commits it fails
    (``SCMError: Empty git repo``). Neither is wanted from a pipeline stage, so the constructor is given no
    repository; with ``dvcyaml=None, save_dvc_exp=False`` it then writes its own directory only."""

    @on_main_process
    def start(self) -> None:
        import dvclive.live

        find = dvclive.live.get_dvc_repo
        dvclive.live.get_dvc_repo = lambda: None
        try:
            self.live = dvclive.live.Live(**self.init_kwargs)
        finally:
            dvclive.live.get_dvc_repo = find


def start_trackers(acc, run_name: str, config: dict[str, Any], log_dir: str | Path | None) -> None:
    """Start the accelerator's trackers with the run's resolved ``config`` (flattened to ``a.b`` keys). A previous
    attempt's TensorBoard events are removed first (DVCLive clears its own files): :meth:`RunLog.start` replays
    whatever a resumed run keeps."""
    if log_dir is not None and acc.is_main_process:
        shutil.rmtree(Path(log_dir) / "tensorboard", ignore_errors=True)
    acc.init_trackers(run_name, config=flat(config))


def flat(config: dict[str, Any], prefix: str = "") -> dict[str, bool | int | float | str]:
    """Nested mappings as one level of dotted keys, values other than bool, int, float and str as JSON text (what
    TensorBoard's hyperparameters accept).

    >>> flat({"lora": {"r": 4, "target_modules": ["q", "k"]}, "beta": 0.04})
    {'lora.r': 4, 'lora.target_modules': '["q", "k"]', 'beta': 0.04}
    """
    out: dict[str, bool | int | float | str] = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v if isinstance(v, (bool, int, float, str)) else json.dumps(v)
    return out


def without_trackers(hyper: dict[str, Any]) -> dict[str, Any]:
    """``hyper`` (a section as a mapping) without its ``report_to`` keys at any depth: trackers do not change the
    training, so a run's checkpoint fingerprint leaves them out.

    >>> without_trackers({"beta": 0.04, "report_to": ["tensorboard"], "pretrain": {"report_to": [], "lr": 1}})
    {'beta': 0.04, 'pretrain': {'lr': 1}}
    """
    return {k: without_trackers(v) if isinstance(v, dict) else v for k, v in hyper.items() if k != "report_to"}


def plain(obj: Any) -> Any:
    """``obj`` (dataclasses' ``asdict``, tuples) as JSON/YAML-safe lists, dicts and scalars."""
    return json.loads(json.dumps(obj, default=str))


class RunLog:
    """Where a training loop's rows go as they happen: appended to the curve CSV (``curve``; None: no file) and
    logged to the accelerator's trackers at the row's ``step``. Only the main process writes."""

    def __init__(self, curve: str | Path | None = None) -> None:
        self.file = CsvLog(curve) if curve is not None else None
        self.acc = None

    def start(self, acc, rows: list[dict[str, Any]]) -> None:
        """Begin with the rows a run already has (a resumed run: its checkpoint's; a fresh one: none)."""
        self.acc = acc
        if acc.is_main_process and self.file is not None:
            self.file.reset(rows)
        for row in rows:
            acc.log(row, step=row["step"])

    def log(self, row: dict[str, Any]) -> None:
        if self.acc.is_main_process and self.file is not None:
            self.file.append(row)
        self.acc.log(row, step=row["step"])
