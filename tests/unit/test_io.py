"""Atomic artifact I/O (ddmrl.io)."""

from __future__ import annotations

import pandas as pd
import pytest

from ddmrl.io import CsvLog, DataError, atomic_path, read_json, read_jsonl, write_json, write_jsonl, write_text


def test_atomic_path_leaves_nothing_when_the_body_raises(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == [], "temporary files must be cleaned up"


def test_atomic_path_keeps_the_old_file_when_the_body_raises(tmp_path):
    target = tmp_path / "out.txt"
    write_text(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("new")
            raise RuntimeError
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_atomic_path_replaces_a_directory(tmp_path):
    target = tmp_path / "dir"
    for content in ("one", "two"):
        with atomic_path(target) as tmp:
            tmp.mkdir()
            (tmp / "f").write_text(content)
    assert (target / "f").read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["dir"]


def test_json_and_jsonl_round_trip(tmp_path):
    obj = {"b": [1, 2.5, None], "a": {"x": "é"}, "c": True}
    write_json(tmp_path / "sub" / "o.json", obj)
    assert read_json(tmp_path / "sub" / "o.json") == obj
    recs = [{"id": 1, "t": "a"}, {"id": 2, "t": "b"}]
    write_jsonl(tmp_path / "r.jsonl", recs)
    assert read_jsonl(tmp_path / "r.jsonl", required=("id",)) == recs


def test_read_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1}\n\n{"id": 2\n')
    with pytest.raises(DataError, match=r"bad\.jsonl line 3: not valid JSON"):
        read_jsonl(path)
    path.write_text('{"id": 1}\n[1, 2]\n')
    with pytest.raises(DataError, match=r"bad\.jsonl line 2: expected a JSON object"):
        read_jsonl(path)
    path.write_text('{"id": 1}\n{"x": 2}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl line 2: missing key\(s\) id"):
        read_jsonl(path, required=("id",))
    with pytest.raises(DataError, match="file not found"):
        read_jsonl(tmp_path / "none.jsonl")


def test_read_json_names_the_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "a": 1,\n  "b": \n}\n')
    with pytest.raises(DataError, match=r"bad\.json line 4"):
        read_json(path)
    with pytest.raises(DataError, match="file not found"):
        read_json(tmp_path / "none.json")


def test_csv_log_grows_one_complete_row_at_a_time_and_reads_like_a_table(tmp_path):
    path = tmp_path / "curve.csv"
    log = CsvLog(path)
    log.reset([])
    assert path.read_text() == ""
    log.append({"step": 2, "reward": 0.1, "kl": 1e-05})
    assert path.read_text() == "step,reward,kl\n2,0.1,1e-05\n"
    log.append({"step": 4, "reward": 1 / 3, "kl": float("nan")})
    table = pd.read_csv(path)
    assert table["step"].tolist() == [2, 4] and table["reward"].tolist() == [0.1, 1 / 3]  # floats round-trip
    assert path.read_text().endswith("\n")


def test_csv_log_reset_keeps_only_the_given_rows(tmp_path):
    """A resumed run: the rows a killed run wrote after its checkpoint are replaced by the checkpoint's rows."""
    path = tmp_path / "curve.csv"
    first = CsvLog(path)
    for step in (1, 2, 3):
        first.append({"step": step, "loss": step / 10})
    with open(path, "a") as f:
        f.write("4,0.")  # the partial last line of a kill
    again = CsvLog(path)
    again.reset([{"step": 1, "loss": 0.1}])
    again.append({"step": 2, "loss": 0.2})
    assert path.read_text() == "step,loss\n1,0.1\n2,0.2\n"


def test_csv_log_refuses_a_row_with_other_columns(tmp_path):
    log = CsvLog(tmp_path / "curve.csv")
    log.append({"step": 1, "loss": 0.5})
    with pytest.raises(ValueError, match=r"curve.csv: row columns \['step', 'lr'\] differ from the header"):
        log.append({"step": 2, "lr": 0.5})
