"""The download stage takes a packaged base model by its recipe and digest instead of pre-training it
(``download.packaged``, :mod:`ddmrl.embedded`), and with ``download.base_per_seed`` pre-trains one base model per
GRPO seed: on the smoke profile's tiny model, through the DAG's own stage commands (a packaged file of other bytes is
refused: tests/unit/test_embedded.py)."""

from __future__ import annotations

import json

from smoke_stages import ENV, run_smoke_stages

from ddmrl import embedded
from ddmrl.pipeline import layout


def one_task(packaged: bool, per_seed: bool = False):
    def edit(smoke: dict, extended: dict) -> None:
        smoke["tasks"] = ["chain"]
        smoke["image"]["tasks"] = []
        smoke["download"] |= {"packaged": packaged, "base_per_seed": per_seed}
        smoke["grpo"]["seeds"] = [0, 1]

    return edit


def weights(ws, seed=None) -> bytes:
    return (ws / layout.base_dir(seed) / "model.safetensors").read_bytes()


def test_a_packaged_base_model_is_taken_by_its_recipe_and_checked_by_its_digest(tmp_path):
    trained = run_smoke_stages(tmp_path / "trained", one_task(packaged=False), ["download"])
    index = tmp_path / "lab" / "bases.json"
    recipe = embedded.add(trained / "data" / "download", index)
    metrics = json.loads((trained / "data/download/metrics.json").read_text())
    assert metrics["recipe"] == recipe and "packaged" not in metrics

    # one base model per GRPO seed: seed 0's recipe is the packaged one (the same pre-training, the same seed), so
    # it is copied, bit for bit with its curve; seed 1's is not in the index, so it is pre-trained with seed 1
    env = {**ENV, "DDMRL_PACKAGED_BASES": str(index)}
    edit = one_task(packaged=True, per_seed=True)
    ws = run_smoke_stages(tmp_path / "taken", edit, ["download_s0", "download_s1"], env)
    assert weights(ws, 0) == weights(trained)
    assert (ws / "data/download/s0/curve.csv").read_text() == (trained / "data/download/curve.csv").read_text()
    taken = json.loads((ws / "data/download/s0/metrics.json").read_text())
    assert taken["packaged"] == f"bases/{recipe}.safetensors" and taken["pretrain_loss"] == metrics["pretrain_loss"]
    other = json.loads((ws / "data/download/s1/metrics.json").read_text())
    assert "packaged" not in other and other["recipe"] != recipe and weights(ws, 1) != weights(trained)
    assert sorted(p.name for p in (ws / "data/download/s1/tasks").iterdir()) == sorted(
        p.name for p in (ws / "data/download/s0/tasks").iterdir()
    )
