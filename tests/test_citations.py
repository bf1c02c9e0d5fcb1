"""Design notes cited in the code, configs, tests and docs must exist in the repository (issue #15 item 6).

The notes ddmrl was designed from (on algorithms, MaskGRPO, benchmarks, baselines, the architecture, aesthetics and
the ecosystem) live outside the repository, so citing one leaves a reader nowhere to go: cite the paper (authors,
year, section or equation), the reference code by repository and path, or a doc under ``docs/`` instead. A note's
name becomes citable again once a file of that name is tracked here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTES = ("algorithms", "maskgrpo", "benchmarks", "baselines", "architecture", "aesthetics", "ecosystem")
NOTES_DIR = "shared" + "/design"  # in two pieces, so that this file does not cite it
SUFFIXES = {".py", ".yaml", ".yml", ".md", ".smk"}


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [f for f in out.split("\0") if f]


def citation(notes) -> re.Pattern:
    """``<note>.md`` for each name in ``notes`` (any case), or the notes' folder."""
    return re.compile("|".join([rf"\b{n}\.md\b" for n in notes] + [re.escape(NOTES_DIR)]), re.IGNORECASE)


def test_no_file_cites_a_design_note_outside_the_repository():
    files = tracked_files()
    present = {Path(f).name.lower() for f in files}
    cite = citation(n for n in NOTES if f"{n}.md" not in present)
    hits = []
    for name in files:
        path = ROOT / name
        if path.suffix not in SUFFIXES or name.startswith("tests/fixtures/") or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if cite.search(line):
                hits.append(f"{name}:{number}: {line.strip()}")
    assert not hits, "cite the paper, the reference code or docs/ instead of a note outside the repository:\n" + (
        "\n".join(hits)
    )


def test_the_check_sees_a_citation():
    """The pattern catches every note, in any case and inside a path, and leaves in-repo docs and the reference code
    alone."""
    cite = citation(NOTES)
    for note in NOTES:
        for text in (f"({note}.md 1.6)", f"{note.upper()}.md section 7", f"``{NOTES_DIR}/{note}.md`` §2.1"):
            assert cite.search(text), text
    for text in ("docs/rewards.md", "README.md", "../shared/reference/mmada", "benchmarks.py", "RebRL's Eq. 10"):
        assert not cite.search(text), text
    assert citation([]).search(NOTES_DIR) and not citation([]).search("README.md")
