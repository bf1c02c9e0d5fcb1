"""The errors a user sees as one line (``error: ...``, exit code 2): bad parameters, bad input files, missing
downloads. A leaf: it imports nothing, so any module may raise these without pulling in anything else."""

from __future__ import annotations


class _OneLine(Exception):
    """An error whose message is one line: line breaks and runs of spaces are folded."""

    def __init__(self, message: object) -> None:
        super().__init__(" ".join(str(message).split()))


class ConfigError(_OneLine, ValueError):
    """A params.yaml problem; the message names the file, the key and the value, e.g.
    ``params.yaml: grpo.num_generations = 1: must be >= 2 (GRPO needs a group to compare against)``."""


class DataError(_OneLine, ValueError):
    """A malformed input file; the message names the file and line."""


class DownloadError(_OneLine, RuntimeError):
    """Something to download is missing (offline, or the hub failed); the message says what and how to fetch it."""
