"""Artifact I/O: every file is written under a temporary name and renamed into place (atomic on POSIX), so a
killed run never leaves a file that looks complete."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ddmrl.errors import DataError, DownloadError

__all__ = [
    "DataError",
    "DownloadError",
    "atomic_path",
    "read_json",
    "read_jsonl",
    "write_json",
    "write_jsonl",
    "write_text",
]


@contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path next to ``path``; on success rename it onto ``path`` (file or directory)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent)) / path.name
    try:
        yield tmp
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def _csv_lines(columns: list[str], rows: Iterable[dict[str, Any]], header: bool) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


class CsvLog:
    """A CSV file that grows one row at a time while a run goes on (a training curve), readable at any moment.

    :meth:`reset` writes the rows so far atomically (a fresh run: none, an empty file; a resumed run: the
    checkpoint's rows, so that rows written after that checkpoint by a killed run are neither kept nor lost).
    :meth:`append` adds one row as one ``write`` of whole lines (the header with the first row) to a file opened for
    appending, then flushes it to disk: a run killed at any point leaves every row it logged but its last
    partial line at most, which the next :meth:`reset` replaces. Every row has the first row's columns.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.columns: list[str] | None = None

    def reset(self, rows: list[dict[str, Any]]) -> None:
        self.columns = list(rows[0]) if rows else None
        write_text(self.path, _csv_lines(self.columns, rows, header=True) if rows else "")

    def append(self, row: dict[str, Any]) -> None:
        header = self.columns is None
        if header:
            self.columns = list(row)
        elif list(row) != self.columns:
            raise ValueError(f"{self.path}: row columns {list(row)} differ from the header {self.columns}")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, _csv_lines(self.columns, [row], header).encode())
            os.fsync(fd)
        finally:
            os.close(fd)


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes (hex), read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot be read as UTF-8 text ({e})") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path} line {e.lineno}: not valid JSON ({e.msg})") from None


def read_jsonl(path: str | Path, required: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Records of a JSONL file; a malformed line or a missing ``required`` key names the file and line."""
    try:
        raw_lines = Path(path).read_bytes().split(b"\n")  # JSON lines end at \n only (not at U+2028 and friends)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e})") from None
    lines = []
    for n, raw in enumerate(raw_lines, 1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise DataError(f"{path} line {n}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path} line {n}: not valid JSON ({e.msg})") from None
        if not isinstance(rec, dict):
            raise DataError(f"{path} line {n}: expected a JSON object, got {type(rec).__name__}")
        missing = [k for k in required if k not in rec]
        if missing:
            raise DataError(f"{path} line {n}: missing key(s) {', '.join(missing)}")
        out.append(rec)
    return out
