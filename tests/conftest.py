"""Test-suite root. Its presence puts ``tests/`` on ``sys.path`` (pytest's default import mode), so that every test
module can ``import real_models``: tiny random instances of the real LLaDA/MMaDA classes (``tests/real_models.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import ddmrl  # noqa: F401  (first: pins the CPU numerics before torch chooses its kernels, as every stage does)

#: test modules that share the session's smoke workspace (tests/pipeline/conftest.py): one xdist group, built once
SMOKE_WORKSPACE = {"tests/pipeline/test_smoke.py", "tests/pipeline/test_report.py", "tests/pipeline/test_slurm.py"}


def pytest_collection_modifyitems(items):
    """pytest-xdist (``--dist loadgroup``, pyproject's addopts) sends each group of tests to one worker: a group per
    test module, so that its module-scoped fixtures (pipelines, trained models) are built once, and one group for the
    modules that share the smoke workspace."""
    for item in items:
        module = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group("smoke" if module in SMOKE_WORKSPACE else module))


@pytest.fixture(scope="module", autouse=True)
def modules_cache(tmp_path_factory):
    """transformers copies remote code into ``HF_MODULES_CACHE`` and imports it as the package ``transformers_modules``
    from the first such directory on ``sys.path`` (``init_hf_modules`` appends, never prepends). Give every test
    module its own directory, the only one on ``sys.path``, and a fresh import of the package: otherwise a module
    that loaded remote code earlier in the same process hides the directories of the next one's checkpoints."""
    import transformers.dynamic_module_utils as dyn

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dyn, "HF_MODULES_CACHE", str(tmp_path_factory.mktemp("hf_modules")))
        mp.setattr(sys, "path", [p for p in sys.path if not (Path(p) / "transformers_modules").is_dir()])
        for name in [n for n in sys.modules if n.split(".")[0] == "transformers_modules"]:
            mp.delitem(sys.modules, name)
        yield dyn.HF_MODULES_CACHE
