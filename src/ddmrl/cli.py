"""What every stage script shares: offline defaults, thread count, one-line errors, and artifact helpers."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddmrl import numerics
from ddmrl.config import DEFAULT_PROFILE, ConfigError
from ddmrl.io import DataError, DownloadError, atomic_path

if TYPE_CHECKING:
    import pandas as pd

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "DVC_NO_ANALYTICS"):
    os.environ.setdefault(_var, "1")  # no hub retries: a missing local file fails at once


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage's ``main`` on the pinned CPU numerics (one thread; :mod:`ddmrl.numerics`), whichever engine
    started it; configuration and data problems end it with one line naming the key or file."""
    try:
        numerics.check()
        _check_dvc_profile()
        main()
    except (ConfigError, DataError, DownloadError, FileNotFoundError, numerics.NumericsError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def _check_dvc_profile() -> None:
    """Under DVC: dvc.yaml lists the sweep of the profile it was exported for (DVC reads params.yaml alone, not the
    overlay), so a stage refuses to run under another one (``dvc exp run -S profile=...``)."""
    root = os.environ.get("DVC_ROOT")
    if not os.environ.get("DVC_STAGE") or not root:
        return
    import yaml

    lines = (Path(root) / "dvc.yaml").read_text(encoding="utf-8").splitlines()[:3]
    exported = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("# profile:")), None)
    params = yaml.safe_load((Path(root) / "params.yaml").read_text(encoding="utf-8")) or {}
    profile = params.get("profile", DEFAULT_PROFILE)
    if exported is not None and exported != profile:
        raise ConfigError(
            f"params.yaml: profile = {profile!r}, but dvc.yaml was exported for {exported!r}: run "
            "python -m ddmrl.pipeline.export, then dvc repro (dvc exp run -S profile=... cannot switch profiles)"
        )


def write_csv(path: str | Path, rows: list[dict[str, Any]] | pd.DataFrame) -> None:
    """A table as CSV (with its header even when empty), written atomically."""
    import pandas as pd  # here: the stages that write no table start without it

    with atomic_path(path) as tmp:
        (rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)).to_csv(tmp, index=False)
