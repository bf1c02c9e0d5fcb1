"""The same weights on every x86-64 machine: a short pre-training, SFT and UniGRPO run of the embedded model (the
main job's model sizes, the smoke profile's loop lengths) through the DAG's own stage commands, whose weight digests
(sha256 of ``model.safetensors``) are committed per numerics mode in ``tests/fixtures/weights/sha256.json`` for the
mode that agrees across CPU vendors (``portable``, the default; ``ddmrl.numerics``). CI fails on
a machine where they differ, naming the mode and the first stage whose weights differ: its CPU computes other floats
under the pinned numerics. After a change that moves the weights on purpose (the model, the loss, the sampler),
rewrite the fixture with

    DDMRL_NUMERICS=portable python tests/stages/test_reproducible_weights.py

and say in the commit why the weights moved.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from smoke_stages import ENV, run_smoke_stages

from ddmrl import numerics
from ddmrl.io import file_digest
from ddmrl.pipeline.layout import BASE_DIR, GRPO_DIR, SFT_DIR

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "weights" / "sha256.json"
RUN = "unigrpo_chain_s0"
MODELS = {"download": BASE_DIR, "sft": SFT_DIR, f"grpo_{RUN}": f"{GRPO_DIR}/{RUN}/model"}


def main_job_sizes(smoke: dict, extended: dict) -> None:
    """The main job's model (params.yaml's ``model:``), one method and seed on chain (whose format rewards differ
    within a group even at this length of pre-training: the GRPO step moves the weights); the smoke loop lengths."""
    del smoke["model"]
    smoke["tasks"] = ["chain"]
    smoke["grpo"] |= {"methods": ["unigrpo"], "seeds": [0]}
    smoke["image"]["tasks"] = []


def digests(ws: Path) -> dict[str, str]:
    return {stage: file_digest(ws / path / "model.safetensors") for stage, path in MODELS.items()}


@pytest.fixture(scope="module")
def pinned(tmp_path_factory) -> dict[str, str]:
    return digests(run_smoke_stages(tmp_path_factory.mktemp("pinned"), main_job_sizes, list(MODELS)))


def first_difference(found: dict[str, str], committed: dict[str, str]) -> str | None:
    """One line naming the mode and the first stage (in the DAG's order) whose weights are not the committed ones;
    None when every stage agrees."""
    for stage, digest in committed.items():
        if found.get(stage) != digest:
            return (
                f"{numerics.MODE_VAR}={numerics.mode()}: the weights of stage {stage!r} differ from the committed "
                f"digest ({str(found.get(stage))[:12]}... here, {digest[:12]}... committed): this CPU computes other "
                f"floats in this mode (docs/pipeline.md, 'Numerics'), or a change moved the weights"
            )
    return None


def test_the_weights_equal_the_committed_digests(pinned):
    """Pre-training, SFT and GRPO give, bit for bit, the weights committed from the development machines (their CPUs:
    docs/pipeline.md, "Numerics")."""
    committed = json.loads(FIXTURE.read_text()).get(numerics.mode())
    if committed is None:
        pytest.skip(f"{numerics.MODE_VAR}={numerics.mode()} agrees on one kind of CPU only: no committed digests")
    assert first_difference(pinned, committed) is None, first_difference(pinned, committed)


def test_the_message_names_the_mode_and_the_first_stage_that_differs():
    committed = {"download": "a" * 64, "sft": "b" * 64, "grpo": "c" * 64}
    assert first_difference(dict(committed), committed) is None
    line = first_difference({"download": "a" * 64, "sft": "d" * 64, "grpo": "e" * 64}, committed)
    assert line.startswith(f"{numerics.MODE_VAR}={numerics.mode()}: the weights of stage 'sft' differ")
    assert "dddddddddddd... here, bbbbbbbbbbbb... committed" in line


def test_native_kernels_of_a_wider_cpu_give_other_weights(tmp_path, pinned):
    """What the pin is for: on a CPU with AVX-512, the unpinned kernels pre-train another base model (so a machine of
    another kind would too). Skipped on a machine whose native kernels are the pinned ones."""
    pinned_vars = {var for env in numerics.MODES.values() for var in env}
    env = {k: v for k, v in ENV.items() if k not in pinned_vars} | {numerics.MODE_VAR: "native"}
    probe = "import torch; torch.zeros(2).sum(); print(torch.backends.cpu.get_cpu_capability())"
    native = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    if native.stdout.strip() == "AVX2":
        pytest.skip("this CPU's native kernels are AVX2, the pinned ones")
    ws = run_smoke_stages(tmp_path, main_job_sizes, ["download"], env=env)
    assert file_digest(ws / BASE_DIR / "model.safetensors") != pinned["download"]


if __name__ == "__main__":  # rewrite this mode's entry of the fixture from this machine
    with tempfile.TemporaryDirectory() as tmp:
        found = digests(run_smoke_stages(Path(tmp), main_job_sizes, list(MODELS)))
    fixture = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
    fixture[numerics.mode()] = found
    FIXTURE.write_text(json.dumps(fixture, indent=2) + "\n")
    print(json.dumps(fixture, indent=2))
