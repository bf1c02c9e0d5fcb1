"""Resumable training state: periodic checkpoints that survive a SIGKILL and are verified before use.

A checkpoint is a directory ``<root>/step-<N>/`` holding the model (safetensors), the optimiser and scheduler
states (``torch.save``, read back with ``weights_only=True``), the random generators' states, a ``meta.json``
(step, curve so far, a fingerprint of the run) and a ``manifest.json`` with the SHA-256 of every file. It is
written under a temporary name and renamed into place, so a killed save leaves no directory that looks complete;
a truncated or corrupted one fails its checksum and the previous checkpoint is used instead. The last
``keep`` checkpoints are kept.

The root is a path that neither engine knows as an output (``data/checkpoints/<stage>``, passed by the DAG): it
survives Snakemake's removal of incomplete outputs and DVC's removal of outputs before a stage runs. A
checkpoint whose fingerprint (the run's parameters and the identity of its input model) differs from the
current run is ignored, so changed parameters never resume from stale state.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from ddmrl.io import atomic_path


def fingerprint(*parts: Any) -> str:
    """A stable hash of the run's identity (JSON-serialisable parts)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Checkpointer:
    """Save and restore the training state of one stage under ``root`` (None: checkpointing off)."""

    def __init__(self, root: str | Path | None, run_fingerprint: str, keep: int = 2) -> None:
        self.root = Path(root) if root else None
        self.fingerprint = run_fingerprint
        self.keep = keep

    def save(
        self,
        step: int,
        model,
        optimizer,
        meta: dict[str, Any],
        scheduler=None,
        generators: dict[str, torch.Generator] | None = None,
    ) -> None:
        if self.root is None:
            return
        with atomic_path(self.root / f"step-{step:08d}") as tmp:
            tmp.mkdir()
            save_model(model, str(tmp / "model.safetensors"))
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            if scheduler is not None:
                torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
            states = {name: g.get_state() for name, g in (generators or {}).items()}
            torch.save({"generators": states, "torch": torch.get_rng_state()}, tmp / "rng.pt")
            (tmp / "meta.json").write_text(json.dumps({**meta, "step": step, "fingerprint": self.fingerprint}))
            manifest = {p.name: file_digest(p) for p in sorted(tmp.iterdir())}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
        for old in self._candidates()[self.keep :]:
            shutil.rmtree(old, ignore_errors=True)

    def latest(self) -> tuple[Path, dict[str, Any]] | None:
        """The newest intact checkpoint of this run and its meta, or None. Corrupt ones are reported and skipped."""
        for path in self._candidates():
            problem = self._problem(path)
            if problem is None:
                return path, json.loads((path / "meta.json").read_text())
            print(f"warning: skipping checkpoint {path}: {problem}", flush=True)
        return None

    def restore(
        self, path: Path, model, optimizer, scheduler=None, generators: dict[str, torch.Generator] | None = None
    ) -> None:
        load_model(model, str(path / "model.safetensors"))
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
        if scheduler is not None:
            scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=True))
        rng = torch.load(path / "rng.pt", weights_only=True)
        for name, g in (generators or {}).items():
            g.set_state(rng["generators"][name])
        torch.set_rng_state(rng["torch"])

    def clear(self) -> None:
        """Remove every checkpoint (called once the stage's outputs are in place)."""
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def _candidates(self) -> list[Path]:
        if self.root is None or not self.root.is_dir():
            return []
        return sorted((p for p in self.root.glob("step-*") if p.is_dir()), reverse=True)

    def _problem(self, path: Path) -> str | None:
        try:
            manifest = json.loads((path / "manifest.json").read_text())
            for name, digest in manifest.items():
                if file_digest(path / name) != digest:
                    return f"{name} fails its checksum"
            meta = json.loads((path / "meta.json").read_text())
        except (OSError, ValueError) as e:
            return f"unreadable ({e})"
        if meta.get("fingerprint") != self.fingerprint:
            return "it belongs to a run with other parameters or inputs"
        return None
