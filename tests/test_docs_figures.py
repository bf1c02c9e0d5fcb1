"""The figures the README and docs/results.md quote are committed tables: one main job's (docs/main_job/, copied from
its data/tables/; its RUN.md says which commit, CPU and wall time) and the base-model runs' (docs/base_models/);
docs/results.md may also quote the previous main jobs (docs/main_job_8da8cbb/, 1,200-step base models on d1's
fixed 8 blanks; docs/main_job_10232aa/, three base models in the portable
numerics as they were with MKL, on an Intel Xeon; docs/main_job_3dcfc0a/, one base model likewise;
docs/main_job_16728ad/, the AMD EPYC's in the avx2 numerics; docs/main_job_c1f57a2/) beside the current one, the
extended rows run in 16728ad's workspace (docs/extended_run/, docs/mdpo_run/, docs/flexibility_run/), issue #42's
members' rows in 2926f09's (docs/members_run/), the field's earlier rows in the current main job's
(docs/field_run/), the RL settings on validation items (docs/validation_run/) and its models at other difficulty
levels (docs/difficulty_probe/).
Rerun the main job and copy its tables there, and this fails wherever the README still quotes the old run."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "docs" / "main_job"
BASE_MODELS = REPO / "docs" / "base_models"
#: quoted in docs/results.md only
PREVIOUS = tuple(REPO / "docs" / f"main_job_{c}" for c in ("8da8cbb", "c1f57a2", "16728ad", "3dcfc0a", "10232aa"))
EXTENDED = REPO / "docs" / "extended_run"  # likewise
MDPO = REPO / "docs" / "mdpo_run"  # likewise
MEMBERS = REPO / "docs" / "members_run"  # likewise
EVERY = REPO / "docs" / "every_method_run"  # likewise
FIELD = REPO / "docs" / "field_run"  # likewise
VALIDATION = REPO / "docs" / "validation_run"  # likewise
DIFFICULTY = REPO / "docs" / "difficulty_probe"  # likewise
FLEXIBILITY = (REPO / "docs" / "flexibility_run", REPO / "docs" / "flexibility_run" / "block")  # likewise
DOCS = [REPO / "README.md", REPO / "docs" / "results.md"]
#: every folder docs/results.md may quote besides the main job's
QUOTED = (*PREVIOUS, EXTENDED, MDPO, MEMBERS, EVERY, FIELD, VALIDATION, DIFFICULTY, *FLEXIBILITY)
#: a figure with its interval as the tables write it: ``45.7 [43.7, 47.5]``, ``+4.6 [+2.4, +6.9]*``
INTERVAL = re.compile(r"[+-]?\d+\.\d \[[+-]?\d+\.\d, [+-]?\d+\.\d\]\*?")


def committed(*folders: Path) -> str:
    """The Markdown tables of the main job and the base-model runs (and of ``folders``), one text."""
    tables = [p for f in (RUN, BASE_MODELS, *folders) for p in sorted(f.glob("*.md")) if p.name != "RUN.md"]
    return "\n".join(p.read_text(encoding="utf-8") for p in tables)


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|") and not line.startswith("|---")]


def parse_table(text: str, first_column: str) -> dict[str, dict[str, str]]:
    """The first Markdown table whose header starts with ``first_column``, as {first cell: {column: cell}}."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header, cells, strict=True))
    return rows


def test_every_quoted_interval_is_in_the_committed_tables():
    for doc in DOCS:
        tables = committed(*QUOTED) if doc.name == "results.md" else committed()
        text = doc.read_text(encoding="utf-8")
        missing = [f for f in INTERVAL.findall(text) if f not in tables]
        assert not missing, f"{doc.name} quotes figures that no committed table of the main job holds: {missing}"


def composed_tables(text: str) -> set[str]:
    """Rows of the tables headed ``| what |``: figures of several committed tables set side by side (each figure is
    checked on its own by the interval test)."""
    rows, inside = set(), False
    for line in text.splitlines():
        inside = line.startswith("| what |") or (inside and line.startswith("|"))
        if inside:
            rows.add(line)
    return rows


def test_every_table_row_of_the_results_is_a_row_of_the_committed_tables():
    rows = set(table_rows(committed(*QUOTED)))
    results = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    composed = composed_tables(results)
    quoted = [r for r in table_rows(results) if r.split("|")[1].strip() not in ("model", "task", "mode")]
    quoted = [r for r in quoted if r not in composed]
    assert quoted, "docs/results.md quotes no table"
    assert [r for r in quoted if r not in rows] == []


def test_the_base_model_table_agrees_with_the_text_table_greedy_and_sampled():
    """base_models.md's "over base models" columns are the text table's, greedy and (its T=1 section) sampled."""
    text = parse_table((RUN / "text_table.md").read_text(encoding="utf-8"), "model")
    greedy, sampled = (RUN / "base_models.md").read_text(encoding="utf-8").split("## Sampled at T=1")
    for part, suffix in ((greedy, ""), (sampled, " T=1")):
        by_base = parse_table(part, "model")
        assert list(by_base) == list(text)
        for model, row in by_base.items():
            for task in ("sudoku4", "chain"):
                assert row[f"{task}: acc over base models"] == text[model][f"{task}{suffix} acc (%)"]
                assert row[f"{task}: Δ vs start over base models"] == text[model][f"{task}{suffix} Δ vs start"]


def test_the_readme_table_is_the_committed_text_and_image_tables():
    readme = parse_table((REPO / "README.md").read_text(encoding="utf-8"), "model")
    text = parse_table((RUN / "text_table.md").read_text(encoding="utf-8"), "model")
    image = parse_table((RUN / "image_table.md").read_text(encoding="utf-8"), "model")
    assert list(readme) == list(text)
    for model, row in readme.items():
        assert row["Sudoku (cells)"] == text[model]["sudoku4 acc (%)"]
        assert row["chain"] == text[model]["chain acc (%)"]
        assert row["Sudoku T=1"] == text[model]["sudoku4 T=1 acc (%)"]
        assert row["chain T=1"] == text[model]["chain T=1 acc (%)"]
        assert row["geneval-mini Overall"] == image.get(model, {}).get("Overall", "—")


def test_the_run_record_says_which_commit_cpu_and_wall_time():
    record = (RUN / "RUN.md").read_text(encoding="utf-8")
    assert re.search(r"commit `[0-9a-f]{7,40}`", record)
    assert re.search(r"\*\*CPU\*\*: \S+", record)
    minutes = re.search(r"wall time: (\d+) min (\d+) s", record)
    assert minutes, "RUN.md must give the main job's wall time"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"{int(minutes[1]) + (int(minutes[2]) >= 30)} minutes on 2 CPU cores" in readme
