"""Test-suite root. Its presence puts ``tests/`` on ``sys.path`` (pytest's default import mode), so that every test
module can ``import real_models``: tiny random instances of the real LLaDA/MMaDA classes (``tests/real_models.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

import ddmrl  # (first: pins the CPU numerics before torch chooses its kernels, as every stage does)

ddmrl.numerics.check()  # and the rest of them (one thread, the portable mode's products), as every stage does

#: test modules that share the session's smoke workspace (tests/pipeline/conftest.py): one xdist scope, built once
SMOKE_WORKSPACE = {"tests/pipeline/test_smoke.py", "tests/pipeline/test_report.py", "tests/pipeline/test_slurm.py"}


def scope_of(nodeid: str) -> str:
    """The xdist scope of a test: its module, or ``smoke`` for the modules that share the smoke workspace."""
    module = nodeid.split("::", 1)[0]
    return "smoke" if module in SMOKE_WORKSPACE else module


def pytest_collection_modifyitems(items):
    """The smoke scope first: the longest one (the smoke workspace, its tests, the report and the SLURM runs), so that
    a worker starts on it at once while the other workers share the rest (the pipeline and stage modules, the next
    longest, follow in their own order; pyproject's addopts keep xdist from reordering scopes by their size)."""
    items.sort(key=lambda item: scope_of(item.nodeid) != "smoke")  # stable: the modules' own order otherwise


class ModuleScopes(LoadScopeScheduling):
    """pytest-xdist sends each scope (:func:`scope_of`) to one worker, so that its module-scoped fixtures (pipelines,
    trained models) and the smoke workspace are built once. (``--dist loadgroup`` with ``xdist_group`` marks did
    not group under pytest 9: xdist 3.8 marks a group by rewriting ``item._nodeid``, which pytest 9 ignores, so every
    worker built the fixtures of the modules it was sent tests of.)"""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


def pytest_xdist_make_scheduler(config, log):
    return ModuleScopes(config, log)


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
