"""Atomic artifact I/O (ddmrl.io)."""

from __future__ import annotations

import pytest

from ddmrl.io import DataError, atomic_path, read_json, read_jsonl, write_json, write_jsonl, write_text


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
