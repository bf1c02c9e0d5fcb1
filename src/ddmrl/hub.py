"""Hugging Face hub downloads for the real-scale profiles, and checksum manifests that DVC can track.

Downloading is the download stage's job and only its job: :func:`fetch_model` / :func:`fetch_dataset` call
``huggingface_hub.snapshot_download`` into a plain local directory (``local_dir``), which is resumable by design
(finished files are kept, a ``.incomplete`` file is continued on the next call). Every later stage loads from that
directory, never from the network (``ddmrl.models.adapters.load_model``).

Offline (``HF_HUB_OFFLINE=1``, the project default, or no route to the hub): a fetch does no network call at all
and either returns a directory that is already complete or fails at once with one line saying which repo and
revision to download and where to put it (``hf download ... --local-dir ...``), never after a series of retries.

:func:`write_manifest` records the sha256 and size of every file of a directory, :func:`verify_manifest` checks
a directory against it: a corrupted or half-copied download is detected before a stage trusts it.

Remote code policy (enforced by :func:`check_revision` and the model loader): code from the hub (a checkpoint's
own ``modeling_*.py``) runs only when ``trust_remote_code: true`` is set *and* the revision is pinned to a
40-hex commit id; a branch name such as ``main`` is refused, since its code can change under the same name.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.errors import (
    HFValidationError,
    IncompleteSnapshotError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from ddmrl.config import HubItem, is_commit  # validated by the params schema
from ddmrl.io import DataError, DownloadError, read_json, write_json

try:  # the transport errors of the hub client (a connection refused, a proxy error, a timeout)
    from httpx2 import HTTPError as _TransportError
except ImportError:  # pragma: no cover - older huggingface_hub releases use requests, whose errors are OSErrors
    _TransportError = OSError

__all__ = [
    "HubItem",
    "PINNED_DATASET_REVISIONS",
    "PINNED_REVISIONS",
    "check_revision",
    "download_command",
    "fetch_all",
    "fetch_dataset",
    "fetch_model",
    "hub_offline",
    "is_commit",
    "is_local",
    "resolve_local",
    "verify_manifest",
    "write_manifest",
]

#: Hub commits of the paper checkpoints. They were not read from the hub (no hub access where this was written):
#: each is the snapshot directory name ``models--ORG--NAME/snapshots/<commit>`` of a Hugging Face cache quoted in
#: public code (found with a code search, 2026). Check each once on a host with network access,
#: ``hf download REPO --revision COMMIT --include config.json``, before the first paper run; the manifest then
#: pins the bytes.
PINNED_REVISIONS: dict[str, str] = {
    # seen in the hub-cache paths and revision pins of several unrelated projects
    "GSAI-ML/LLaDA-8B-Instruct": "08b83a6feb34df1a6011b80c3c00c7563e963b07",
    # seen in the hub-cache paths of several unrelated projects
    "Dream-org/Dream-v0-Instruct-7B": "05334cb9faaf763692dcf9d8737c642be2b2a6ae",
    # each seen once (a hub-cache path in a test script of another project): verify before relying on it
    "JetLM/SDAR-8B-Chat": "ac4528d2c076b04e02a03e6f430efa4385331ce8",
    "inclusionAI/LLaDA2.0-mini": "d23215abc5f5675daf171f6739d0386eab53f712",
    # seen once (a hub-cache path in a MMaDA T2I script): verify before relying on it
    "Gen-Verse/MMaDA-8B-Base": "065b30692dd6a2d0560d280d264e5e0092c05bc4",
    # seen in one project (two files, same hub-cache path): verify before relying on it
    "showlab/magvitv2": "5c3fa78f8b3523347c5cd1a4c97f3c4e96f33d5d",
}
#: Hub commits of the evaluation datasets (repo_type dataset), found the same way, each in several projects.
PINNED_DATASET_REVISIONS: dict[str, str] = {
    "openai/gsm8k": "740312add88f781978c0658806c59bc2815b9866",  # files main/{train,test}-00000-of-00001.parquet
    "HuggingFaceH4/MATH-500": "ff5b20257d8185524591543f8ff5993951537bb8",  # file test.jsonl
}

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")
_READ_CHUNK = 1 << 20
#: what ``snapshot_download(local_dir=...)`` keeps next to the files (resume metadata), not part of the payload
_HUB_METADATA_DIR = ".cache"
_FETCH_ERRORS = (OSError, HFValidationError, _TransportError)
_PROBE_TIMEOUT_S = 10.0


def check_revision(revision: str | None, key: str = "revision", *, require_commit: bool = False) -> None:
    """Refuse an empty revision, and with ``require_commit`` anything but a 40-hex commit id (``main`` included).

    Raises ``ValueError`` with one line naming ``key``.
    """
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise ValueError(f"{key} = {revision!r}: must be a branch, tag or 40-hex commit id")
    if require_commit and not is_commit(revision):
        raise ValueError(
            f"{key} = {revision!r}: remote code from the hub runs only at a pinned commit; set {key} to the "
            "40-hex commit id to trust (a branch such as 'main' can change under the same name)"
        )


def is_local(path_or_id: str | Path) -> bool:
    """True if ``path_or_id`` names an existing file or directory (so it is used as it is, never fetched)."""
    return Path(path_or_id).expanduser().exists()


def hub_offline() -> bool:
    """True if ``HF_HUB_OFFLINE`` is set to a true value now (read at call time, unlike huggingface_hub's own
    constant, which is read once at import)."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return env in {"1", "ON", "YES", "TRUE"} or (env == "" and bool(constants.HF_HUB_OFFLINE))


def download_command(
    repo_id: str,
    revision: str | None,
    local_dir: str | Path,
    repo_type: str = "model",
    allow_patterns: Iterable[str] | None = None,
) -> str:
    """The shell command that fetches ``repo_id`` at ``revision`` into ``local_dir`` (huggingface_hub's CLI,
    ``huggingface-cli download`` with the same arguments in releases before 1.0)."""
    kind = "" if repo_type == "model" else f" --repo-type {repo_type}"
    rev = f" --revision {revision}" if revision else ""
    include = f" --include {shlex.join(allow_patterns)}" if allow_patterns else ""
    return f"hf download {repo_id}{kind}{rev}{include} --local-dir {local_dir}"


def _check_hub_id(repo_id: str, key: str) -> None:
    if not isinstance(repo_id, str) or _HUB_ID.fullmatch(repo_id) is None:
        raise ValueError(f"{key} = {repo_id!r}: neither an existing local path nor a hub id of the form ORG/NAME")


def _probe(repo_id: str, revision: str | None, repo_type: str) -> str | None:
    """None if the hub answers for ``repo_id@revision``, else why it cannot be reached. One request, no retries
    (``snapshot_download`` retries its tree listing for about 20 s when the host is unreachable). A repo or
    revision that the hub says does not exist, or that is gated, raises ``RuntimeError`` at once."""
    try:
        HfApi().repo_info(repo_id, revision=revision, repo_type=repo_type, timeout=_PROBE_TIMEOUT_S)
    except (RepositoryNotFoundError, RevisionNotFoundError) as e:  # GatedRepoError is a RepositoryNotFoundError
        raise RuntimeError(
            f"{repo_id}@{revision or 'main'}: the hub has no such {repo_type} or revision, or it is gated "
            f"(log in with `hf auth login` after accepting its terms) ({type(e).__name__})"
        ) from None
    except _FETCH_ERRORS as e:
        return f"the hub cannot be reached ({type(e).__name__})"
    return None


def _snapshot(repo_id: str, revision: str | None, local_dir: Path, repo_type: str, allow_patterns) -> Path:
    """``snapshot_download`` into ``local_dir``; offline or unreachable, it only checks what is already there."""
    why = "hub access is off (HF_HUB_OFFLINE=1)" if hub_offline() else _probe(repo_id, revision, repo_type)
    try:
        out = snapshot_download(
            repo_id,
            repo_type=repo_type,
            revision=revision,
            local_dir=local_dir,
            allow_patterns=allow_patterns,
            local_files_only=why is not None,
        )
    except _FETCH_ERRORS as e:
        # the hub's own text helps for a partial copy (it lists the missing files) or a failed download only
        helpful = why is None or isinstance(e, IncompleteSnapshotError)
        detail = f" [{' '.join(str(e).split())[:300]}]" if helpful else ""
        why = why or f"the hub download failed ({type(e).__name__})"
        raise RuntimeError(
            f"{repo_id}@{revision or 'main'}: {why} and {local_dir} does not hold a complete copy; on a host with "
            f"network access run `{download_command(repo_id, revision, local_dir, repo_type, allow_patterns)}` "
            f"(or copy that directory here){detail}"
        ) from None
    return Path(out)


def fetch_model(
    repo_id: str, revision: str | None, local_dir: str | Path, allow_patterns: list[str] | None = None
) -> Path:
    """A local directory holding model ``repo_id`` at ``revision``.

    An existing local path is returned as it is (nothing is copied or fetched). A hub id is downloaded into
    ``local_dir`` (resuming a partial download); only files matching ``allow_patterns`` when given (e.g.
    ``["*.json", "*.safetensors", "*.py", "tokenizer*"]``). Raises ``RuntimeError`` (one line, with the command
    to run) when the hub cannot be reached and ``local_dir`` is not complete.
    """
    if is_local(repo_id):
        return Path(repo_id).expanduser()
    _check_hub_id(repo_id, "repo_id")
    check_revision(revision, "revision")
    return _snapshot(repo_id, revision, Path(local_dir), "model", allow_patterns)


def fetch_dataset(
    id_or_path: str, revision: str | None, local_dir: str | Path, allow_patterns: list[str] | None = None
) -> Path:
    """A local copy of dataset ``id_or_path``: an existing file or directory as it is, else the hub dataset repo
    downloaded into ``local_dir`` (as :func:`fetch_model`, with ``repo_type="dataset"``)."""
    if is_local(id_or_path):
        return Path(id_or_path).expanduser()
    _check_hub_id(id_or_path, "id_or_path")
    check_revision(revision, "revision")
    return _snapshot(id_or_path, revision, Path(local_dir), "dataset", allow_patterns)


def resolve_local(path_or_id: str, revision: str | None, key: str = "path_or_id") -> Path:
    """The local directory of a model: ``path_or_id`` itself when it exists, else the complete snapshot of hub id
    ``path_or_id`` at ``revision`` in the Hugging Face cache. Never touches the network; a hub id that is not
    cached raises ``RuntimeError`` with the download command to run."""
    if is_local(path_or_id):
        return Path(path_or_id).expanduser()
    _check_hub_id(path_or_id, key)
    try:
        return Path(snapshot_download(path_or_id, revision=revision, local_files_only=True))
    except _FETCH_ERRORS:
        name = path_or_id.rsplit("/", 1)[-1]
        raise RuntimeError(
            f"{key} = {path_or_id!r} (revision {revision or 'main'}): not a local directory and not in the Hugging "
            f"Face cache; download it with `{download_command(path_or_id, revision, f'<dir>/{name}')}` and set "
            f"{key} to that directory (ddmrl never downloads while loading)"
        ) from None


def fetch_all(items: Iterable[HubItem], root: str | Path, manifests: str | Path | None = None) -> dict[str, Path]:
    """Fetch every item into ``root/<name>`` (resumable; a local path is used where it is) and write
    ``<manifests>/<name>.manifest.json`` (default: next to the items; sha256 + size of each file, with repo id and
    revision) for DVC to track.

    Returns ``{name: local path}``. Every item is tried; then, if any failed, one ``DownloadError`` line names each
    missing item with the command that fetches it. Items fetched before stay, so a re-run resumes.
    """
    root = Path(root)
    manifests = Path(manifests) if manifests is not None else root
    out, missing = {}, []
    for item in items:
        fetch = fetch_model if item.repo_type == "model" else fetch_dataset
        patterns = list(item.allow_patterns) if item.allow_patterns else None
        try:
            path = fetch(item.repo_id, item.revision, root / item.name, patterns)
        except (RuntimeError, ValueError) as e:  # not on the hub and not here, or neither a path nor a hub id
            missing.append(f"[{item.name}] {e}")
            continue
        meta = {"repo_id": item.repo_id, "revision": item.revision, "repo_type": item.repo_type, "path": str(path)}
        if path.is_dir():
            write_manifest(path, manifests / f"{item.name}.manifest.json", meta=meta)
        else:  # a single local file (a JSONL test set)
            stat = {"size": path.stat().st_size, "sha256": _sha256(path)}
            manifest = {"files": {path.name: stat}, "num_files": 1, "total_bytes": stat["size"], "meta": meta}
            write_json(manifests / f"{item.name}.manifest.json", manifest)
        out[item.name] = path
    if missing:
        raise DownloadError(f"{len(missing)} of {len(out) + len(missing)} downloads missing: " + " ; ".join(missing))
    return out


# ------------------------------------------------------------------------------------------------ manifests


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_READ_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _payload_files(root: Path, skip: Path | None) -> list[Path]:
    """Every regular file under ``root`` (sorted), without the hub's resume metadata and without ``skip``."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if rel.parts[0] == _HUB_METADATA_DIR or not p.is_file() or (skip is not None and p.resolve() == skip):
            continue
        out.append(p)
    return out


def _scan(root: Path, skip: Path | None) -> dict[str, dict[str, Any]]:
    files = _payload_files(root, skip)
    return {p.relative_to(root).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)} for p in files}


def write_manifest(root: str | Path, out_json: str | Path, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write (atomically) and return ``{"files": {relpath: {"size", "sha256"}}, "num_files", "total_bytes",
    "meta"}`` for every file under ``root``; the hub's ``.cache/`` and ``out_json`` itself are left out.

    ``meta`` (e.g. ``{"repo_id": ..., "revision": ...}``) is stored as given, for provenance.
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: not a directory (nothing to record in a manifest)")
    files = _scan(root, Path(out_json).resolve())
    if not files:
        raise DataError(f"{root}: no files to record (an empty download?)")
    manifest = {
        "files": files,
        "num_files": len(files),
        "total_bytes": sum(f["size"] for f in files.values()),
        "meta": dict(meta or {}),
    }
    write_json(out_json, manifest)
    return manifest


def verify_manifest(root: str | Path, manifest_json: str | Path) -> dict[str, Any]:
    """Check ``root`` against ``manifest_json`` (sizes first, then sha256); return the manifest.

    Raises :class:`ddmrl.io.DataError` (one line) naming the files that are missing, changed or not in the
    manifest, with their count.
    """
    root = Path(root)
    manifest = read_json(manifest_json)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise DataError(f"{manifest_json}: not a ddmrl manifest (no 'files' mapping)")
    expected = manifest["files"]
    if not root.is_dir():
        raise DataError(f"{root}: not a directory (manifest {manifest_json} lists {len(expected)} files)")
    present = {p.relative_to(root).as_posix(): p for p in _payload_files(root, Path(manifest_json).resolve())}
    problems = [f"{rel} (missing)" for rel in expected if rel not in present]
    problems += [f"{rel} (not in the manifest)" for rel in present if rel not in expected]
    for rel, want in expected.items():
        p = present.get(rel)
        if p is None:
            continue
        if p.stat().st_size != want["size"]:
            problems.append(f"{rel} (size {p.stat().st_size}, expected {want['size']})")
        elif _sha256(p) != want["sha256"]:
            problems.append(f"{rel} (sha256 differs)")
    if problems:
        shown = ", ".join(problems[:5]) + (f", ... ({len(problems) - 5} more)" if len(problems) > 5 else "")
        raise DataError(f"{root}: {len(problems)} file(s) do not match {manifest_json}: {shown}")
    return manifest
