"""What every stage script shares: offline defaults, thread count, one-line errors, and artifact helpers."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from ddmrl.config import ConfigError
from ddmrl.io import DataError, DownloadError, atomic_path

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "DVC_NO_ANALYTICS"):
    os.environ.setdefault(_var, "1")  # no hub retries: a missing local file fails at once (ecosystem.md section 6)


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage's ``main``; configuration and data problems end it with one line naming the key or file."""
    import torch

    # Snakemake sets OMP_NUM_THREADS to the rule's threads; DVC and a plain shell leave torch its default.
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))
    try:
        main()
    except (ConfigError, DataError, DownloadError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def write_csv(path: str | Path, rows: list[dict[str, Any]] | pd.DataFrame) -> None:
    """A table as CSV (with its header even when empty), written atomically."""
    with atomic_path(path) as tmp:
        (rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)).to_csv(tmp, index=False)
