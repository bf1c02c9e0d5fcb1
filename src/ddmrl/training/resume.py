"""Resumable training state: periodic checkpoints that survive a SIGKILL and are verified before use.

A checkpoint is a directory ``<root>/step-<N>/`` holding what ``accelerate.Accelerator.save_state`` writes for the
engine the run uses (DDP or one process: ``model.safetensors``, ``optimizer.bin``, ``scheduler.bin``; DeepSpeed: the
engine's ``pytorch_model/`` with every process's ZeRO shard of the optimiser; FSDP: the model and optimiser as the
plugin's ``state_dict_type`` says), every process's random states (``random_states_<rank>.pkl``), every process's own
``torch.Generator`` states (``generators_<rank>.pt``), a ``meta.json`` (step, curve so far, a fingerprint of the run)
and a ``manifest.json`` with the SHA-256 of every file under it.

Every process writes its part into one temporary directory, which the main process renames into place once all
of them are done, so a killed save leaves no directory that looks complete; a truncated or corrupted one fails its
checksum and the previous checkpoint is used instead. The last ``keep`` checkpoints are kept.

The root is a path that neither engine knows as an output (``data/checkpoints/<stage>``, passed by the DAG): it
survives Snakemake's removal of incomplete outputs and DVC's removal of outputs before a stage runs. A
checkpoint whose fingerprint (the run's parameters and the identity of its input model) differs from the
current run, or that an older layout wrote, is ignored, so changed parameters never resume from stale state.
Several processes need one file system that all of them see (as DeepSpeed's own checkpoints do).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import torch

from ddmrl.io import atomic_path, file_digest

#: checkpoint layout; a checkpoint of another layout is skipped (1: ddmrl's own files before accelerate's save_state)
FORMAT = 2


def fingerprint(*parts: Any) -> str:
    """A stable hash of the run's identity (JSON-serialisable parts)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def tree_digests(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root``, keyed by its POSIX path relative to ``root``."""
    return {p.relative_to(root).as_posix(): file_digest(p) for p in sorted(root.rglob("*")) if p.is_file()}


class Checkpointer:
    """Save and restore the training state of one stage under ``root`` (None: checkpointing off).

    ``save``, ``latest`` and ``restore`` are collective: every process of the run calls them, in the same order.
    """

    def __init__(self, root: str | Path | None, run_fingerprint: str, keep: int = 2) -> None:
        self.root = Path(root) if root else None
        self.fingerprint = run_fingerprint
        self.keep = keep

    def save(self, acc, step: int, meta: dict[str, Any], generators: dict[str, torch.Generator] | None = None) -> None:
        """Write ``step-<step>``: ``acc.save_state`` (model, optimiser, prepared schedulers, random states) by every
        process, this process's ``generators``, then ``meta`` and the manifest by the main process, which renames
        the directory into place once every process has written its part."""
        if self.root is None:
            return
        from accelerate.utils import broadcast_object_list

        main = acc.is_main_process
        with atomic_path(self.root / f"step-{step:08d}") if main else contextlib.nullcontext() as tmp:
            if main:
                tmp.mkdir()
            tmp = Path(broadcast_object_list([str(tmp)])[0])  # the main process's temporary directory
            acc.save_state(str(tmp))
            states = {name: g.get_state() for name, g in (generators or {}).items()}
            torch.save(states, tmp / f"generators_{acc.process_index}.pt")
            acc.wait_for_everyone()  # every part written before the manifest is taken and the directory renamed
            if main:
                (tmp / "meta.json").write_text(
                    json.dumps({**meta, "step": step, "fingerprint": self.fingerprint, "format": FORMAT})
                )
                (tmp / "manifest.json").write_text(json.dumps(tree_digests(tmp), indent=1))
        if main:
            for old in self._candidates()[self.keep :]:
                shutil.rmtree(old, ignore_errors=True)
        acc.wait_for_everyone()

    def latest(self, acc) -> tuple[Path, dict[str, Any]] | None:
        """The newest intact checkpoint of this run and its meta, or None; the main process removes what a killed
        save left, checks the candidates (corrupt ones are reported and skipped) and every process gets its choice."""
        if self.root is None:
            return None
        from accelerate.utils import broadcast_object_list

        found = None
        if acc.is_main_process:
            for partial in self.root.glob(".step-*"):  # what a save killed half way left (atomic_path's temp dirs)
                shutil.rmtree(partial, ignore_errors=True)
            for path in self._candidates():
                problem = self._problem(path)
                if problem is None:
                    found = (str(path), json.loads((path / "meta.json").read_text()))
                    break
                print(f"warning: skipping checkpoint {path}: {problem}", flush=True)
        found = broadcast_object_list([found])[0]
        return None if found is None else (Path(found[0]), found[1])

    def restore(self, acc, path: Path, generators: dict[str, torch.Generator] | None = None) -> None:
        """``acc.load_state`` (model, optimiser, prepared schedulers, random states), then this process's
        ``generators`` (read with ``weights_only=True``)."""
        acc.load_state(str(path))
        if generators:
            states = torch.load(path / f"generators_{acc.process_index}.pt", weights_only=True)
            for name, g in generators.items():
                g.set_state(states[name])

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
        if meta.get("format") != FORMAT:
            return f"an older layout (format {meta.get('format', 1)}, this version reads {FORMAT})"
        if meta.get("fingerprint") != self.fingerprint:
            return "it belongs to a run with other parameters or inputs"
        return None
