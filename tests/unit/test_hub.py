"""Hub downloads and checksum manifests (ddmrl.hub), without network: offline failures, local pass-through, the
resume path of a complete local_dir, manifests and revision rules."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from ddmrl import hub
from ddmrl.io import DataError

REV = hub.PINNED_REVISIONS["GSAI-ML/LLaDA-8B-Instruct"]


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_pinned_revisions_are_commits():
    assert set(hub.PINNED_REVISIONS) == {
        "GSAI-ML/LLaDA-8B-Instruct",
        "Gen-Verse/MMaDA-8B-Base",
        "showlab/magvitv2",
        "Dream-org/Dream-v0-Instruct-7B",
        "JetLM/SDAR-8B-Chat",
        "inclusionAI/LLaDA2.0-mini",
    }
    assert set(hub.PINNED_DATASET_REVISIONS) == {"openai/gsm8k", "HuggingFaceH4/MATH-500"}
    assert all(hub.is_commit(r) for r in [*hub.PINNED_REVISIONS.values(), *hub.PINNED_DATASET_REVISIONS.values()])


@pytest.mark.parametrize("fetch", [hub.fetch_model, hub.fetch_dataset])
def test_offline_fetch_of_a_hub_id_fails_fast_with_the_command(offline, tmp_path, fetch):
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError) as e:
        fetch("GSAI-ML/LLaDA-8B-Instruct", REV, tmp_path / "llada")
    assert time.perf_counter() - t0 < 5.0
    msg = str(e.value)
    assert "\n" not in msg and "HF_HUB_OFFLINE=1" in msg
    kind = " --repo-type dataset" if fetch is hub.fetch_dataset else ""
    assert f"hf download GSAI-ML/LLaDA-8B-Instruct{kind} --revision {REV} --local-dir {tmp_path / 'llada'}" in msg
    assert not (tmp_path / "llada").exists() or not any((tmp_path / "llada").iterdir())


def _partial_download(d, present=("config.json",)):
    """What an interrupted ``snapshot_download(local_dir=d)`` leaves: the commit's tree listing (written first,
    format documented in huggingface_hub/_tree_cache.py) and the files finished so far."""
    trees = d / ".cache" / "huggingface" / "trees"
    trees.mkdir(parents=True)
    listing = {"config.json": {"size": 2, "blob_id": "a"}, "model.safetensors": {"size": 3, "blob_id": "b"}}
    (trees / f"{REV}.json").write_text(json.dumps({"format_version": 1, "files": listing}))
    for name in present:
        (d / name).write_bytes(b"x" * listing[name]["size"])


def test_offline_fetch_returns_a_complete_local_dir(offline, tmp_path):
    """A finished earlier download of the same commit is returned without network: a re-run does nothing."""
    d = tmp_path / "llada"
    _partial_download(d, present=("config.json", "model.safetensors"))
    assert hub.fetch_model("GSAI-ML/LLaDA-8B-Instruct", REV, d) == d.resolve()


def test_offline_fetch_refuses_a_partial_download(offline, tmp_path):
    d = tmp_path / "llada"
    _partial_download(d)
    with pytest.raises(RuntimeError, match=r"does not hold a complete copy; .*hf download .*model\.safetensors"):
        hub.fetch_model("GSAI-ML/LLaDA-8B-Instruct", REV, d)


class _UnreachableHub:
    def repo_info(self, *args, **kwargs):
        raise OSError("[Errno -2] Name or service not known")


def test_an_unreachable_hub_is_probed_once_then_only_local_files_are_checked(monkeypatch, tmp_path):
    """Without HF_HUB_OFFLINE, a host with no route to the hub must not spend ~20 s in the hub's retries."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(hub, "HfApi", _UnreachableHub)
    calls = []

    def snapshot(*args, local_files_only=False, **kwargs):
        calls.append(local_files_only)
        raise FileNotFoundError("no local copy")

    monkeypatch.setattr(hub, "snapshot_download", snapshot)
    with pytest.raises(RuntimeError, match=r"the hub cannot be reached \(OSError\) .*hf download GSAI-ML"):
        hub.fetch_model("GSAI-ML/LLaDA-8B-Instruct", REV, tmp_path / "x")
    assert calls == [True]


def test_local_paths_pass_through(offline, tmp_path):
    f = tmp_path / "gsm8k_test.jsonl"
    f.write_text('{"question": "1+1", "answer": "#### 2"}\n')
    assert hub.fetch_dataset(str(f), None, tmp_path / "unused") == f
    assert hub.fetch_model(str(tmp_path), "main", tmp_path / "unused") == tmp_path
    assert not (tmp_path / "unused").exists()


def test_bad_ids_and_revisions_are_refused(offline, tmp_path):
    with pytest.raises(ValueError, match="repo_id = './no/such/dir'"):
        hub.fetch_model("./no/such/dir", REV, tmp_path)
    with pytest.raises(ValueError, match="revision = ''"):
        hub.fetch_model("GSAI-ML/LLaDA-8B-Instruct", "", tmp_path)


def test_check_revision():
    hub.check_revision(None)
    hub.check_revision("main")
    hub.check_revision(REV, require_commit=True)
    for bad in (None, "main", "v1.0", REV[:12], REV.upper(), REV + "0"):
        with pytest.raises(ValueError, match=r"model\.revision = .*40-hex commit id") as e:
            hub.check_revision(bad, "model.revision", require_commit=True)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="x = '  '"):
        hub.check_revision("  ", "x")


def test_resolve_local_never_downloads(offline, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # even with hub access allowed: the loader only reads the cache
    monkeypatch.setattr(hub, "snapshot_download", _no_network)
    with pytest.raises(RuntimeError, match=r"hf download Gen-Verse/MMaDA-8B-Base --revision 065b3"):
        hub.resolve_local("Gen-Verse/MMaDA-8B-Base", hub.PINNED_REVISIONS["Gen-Verse/MMaDA-8B-Base"])
    assert hub.resolve_local(str(tmp_path), None) == tmp_path


def _no_network(*args, local_files_only=False, **kwargs):
    assert local_files_only, "resolve_local must not reach the network"
    raise FileNotFoundError("not cached")


def _tree(root):
    (root / "a").mkdir(parents=True)
    (root / "config.json").write_text('{"x": 1}')
    (root / "a" / "weights.bin").write_bytes(bytes(range(256)) * 10)
    (root / ".cache" / "huggingface").mkdir(parents=True)  # hub resume metadata: not payload
    (root / ".cache" / "huggingface" / "x.metadata").write_text("abc")


def test_manifest_round_trip(tmp_path):
    _tree(tmp_path / "m")
    out = tmp_path / "m.manifest.json"
    man = hub.write_manifest(tmp_path / "m", out, meta={"repo_id": "GSAI-ML/LLaDA-8B-Instruct", "revision": REV})
    assert json.loads(out.read_text()) == man
    assert sorted(man["files"]) == ["a/weights.bin", "config.json"]
    assert man["files"]["config.json"] == {"size": 8, "sha256": hashlib.sha256(b'{"x": 1}').hexdigest()}
    assert man["num_files"] == 2 and man["total_bytes"] == 8 + 2560
    assert man["meta"]["revision"] == REV
    assert hub.verify_manifest(tmp_path / "m", out) == man
    (tmp_path / "m" / ".cache" / "huggingface" / "x.metadata").write_text("changed")  # not payload: still fine
    hub.verify_manifest(tmp_path / "m", out)


def test_manifest_inside_the_directory_is_not_listed(tmp_path):
    _tree(tmp_path / "m")
    man = hub.write_manifest(tmp_path / "m", tmp_path / "m" / "MANIFEST.json")
    assert "MANIFEST.json" not in man["files"]
    hub.verify_manifest(tmp_path / "m", tmp_path / "m" / "MANIFEST.json")


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda r: (r / "a" / "weights.bin").write_bytes(bytes(2560)), "a/weights.bin (sha256 differs)"),
        (lambda r: (r / "a" / "weights.bin").write_bytes(b"short"), "size 5, expected 2560"),
        (lambda r: (r / "config.json").unlink(), "config.json (missing)"),
        (lambda r: (r / "extra.txt").write_text("x"), "extra.txt (not in the manifest)"),
    ],
)
def test_manifest_detects_corruption(tmp_path, damage, expected):
    _tree(tmp_path / "m")
    hub.write_manifest(tmp_path / "m", tmp_path / "m.json")
    damage(tmp_path / "m")
    with pytest.raises(DataError, match="1 file\\(s\\) do not match") as e:
        hub.verify_manifest(tmp_path / "m", tmp_path / "m.json")
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_manifest_errors(tmp_path):
    with pytest.raises(DataError, match="not a directory"):
        hub.write_manifest(tmp_path / "nope", tmp_path / "m.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no files"):
        hub.write_manifest(tmp_path / "empty", tmp_path / "m.json")
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(DataError, match="not a ddmrl manifest"):
        hub.verify_manifest(tmp_path / "empty", tmp_path / "bad.json")


def test_fetch_all_records_a_manifest_per_item_and_names_every_missing_one(offline, tmp_path):
    _tree(tmp_path / "local_model")
    (tmp_path / "gsm8k.jsonl").write_text('{"question": "1+1", "answer": "#### 2"}\n')
    items = [
        hub.HubItem("vq", "showlab/magvitv2", hub.PINNED_REVISIONS["showlab/magvitv2"]),
        hub.HubItem("base", str(tmp_path / "local_model")),
        hub.HubItem("gsm8k", str(tmp_path / "gsm8k.jsonl"), repo_type="dataset"),
        hub.HubItem("math", "HuggingFaceH4/MATH-500", repo_type="dataset"),
    ]
    with pytest.raises(RuntimeError) as err:
        hub.fetch_all(items, tmp_path / "dl", manifests=tmp_path / "manifests")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("2 of 4 downloads missing: [vq] showlab/magvitv2@5c3fa78")
    assert "`hf download showlab/magvitv2 --revision 5c3fa78" in msg and f"--local-dir {tmp_path}/dl/vq`" in msg
    assert "[math] HuggingFaceH4/MATH-500@main" in msg and "--repo-type dataset --local-dir" in msg
    # the items after a failure were still fetched, and their manifests written where asked
    base = json.loads((tmp_path / "manifests" / "base.manifest.json").read_text())
    assert sorted(base["files"]) == ["a/weights.bin", "config.json"]
    assert base["meta"] == {"repo_id": str(tmp_path / "local_model"), "revision": None, "repo_type": "model",
                            "path": str(tmp_path / "local_model")}  # fmt: skip
    hub.verify_manifest(tmp_path / "local_model", tmp_path / "manifests" / "base.manifest.json")
    data = json.loads((tmp_path / "manifests" / "gsm8k.manifest.json").read_text())
    assert data["files"]["gsm8k.jsonl"]["size"] == (tmp_path / "gsm8k.jsonl").stat().st_size
    assert not (tmp_path / "manifests" / "vq.manifest.json").exists()
    paths = hub.fetch_all(items[1:3], tmp_path / "dl")
    assert paths == {"base": tmp_path / "local_model", "gsm8k": tmp_path / "gsm8k.jsonl"}
    assert (tmp_path / "dl" / "base.manifest.json").exists(), "manifests default to the download root"


def test_hub_item_validation():
    with pytest.raises(ValueError, match="name = '../x'"):
        hub.HubItem("../x", "a/b")
    with pytest.raises(ValueError, match="repo_type = 'space'"):
        hub.HubItem("m", "a/b", repo_type="space")
