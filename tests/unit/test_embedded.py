"""ddmrl.embedded: the packaged base models' recipes and index."""

from __future__ import annotations

import json

import pytest

from ddmrl import embedded
from ddmrl.config import load
from ddmrl.errors import DownloadError


def config(tmp_path, download: str):
    (tmp_path / "params.yaml").write_text(f"tasks: [sudoku4]\ndownload: {download}\n")
    return load(tmp_path / "params.yaml")


def test_the_recipe_is_what_decides_the_weights(tmp_path):
    """Where the weights come from and how many base models the sweep has are not part of the recipe; the seed,
    the pre-training and the held-out seed are, whichever key set the seed."""
    plain = embedded.recipe_id(config(tmp_path, "{}"), "text", 0)
    assert embedded.recipe_id(config(tmp_path, "{packaged: false, base_per_seed: true}"), "text", 0) == plain
    assert embedded.recipe_id(config(tmp_path, "{seed: 1}"), "text", 0) == plain  # the seed given wins
    assert embedded.recipe_id(config(tmp_path, "{}"), "text", 1) != plain
    assert embedded.recipe_id(config(tmp_path, "{pretrain: {max_steps: 10}}"), "text", 0) != plain
    assert embedded.recipe_id(config(tmp_path, "{num_eval: 7}"), "text", 0) != plain


def test_the_index_finds_a_base_model_by_recipe_and_refuses_other_bytes(tmp_path, monkeypatch):
    root = tmp_path / "run"
    (root / "base").mkdir(parents=True)
    (root / "base" / "model.safetensors").write_bytes(b"weights")
    (root / "curve.csv").write_text("step,loss\n1,2.0\n")
    (root / "metrics.json").write_text(json.dumps({"recipe": "abc", "pretrain_loss": 2.0, "seconds": 9.0}))
    index = tmp_path / "lab" / "bases.json"
    assert embedded.add(root, index) == "abc"
    monkeypatch.setenv("DDMRL_PACKAGED_BASES", str(index))
    assert embedded.packaged_base("other") is None
    found = embedded.packaged_base("abc")
    assert found.weights.read_bytes() == b"weights" and found.curve.read_text().startswith("step,loss")
    assert found.entry["metrics"] == {"pretrain_loss": 2.0}  # not the pre-training's wall time
    found.weights.write_bytes(b"other weights")
    with pytest.raises(DownloadError, match="abc.safetensors: sha256 .* is not the index's"):
        embedded.packaged_base("abc")
    (root / "metrics.json").write_text(json.dumps({"recipe": "abc", "packaged": "bases/abc.safetensors"}))
    with pytest.raises(DownloadError, match="came from the package"):
        embedded.add(root, index)
