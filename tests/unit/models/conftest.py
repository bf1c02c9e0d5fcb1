"""Fixtures of the model tests."""

from __future__ import annotations

import sys

import pytest
import transformers.dynamic_module_utils as dyn


@pytest.fixture(scope="module", autouse=True)
def modules_cache(tmp_path_factory):
    """transformers copies remote code into HF_MODULES_CACHE and imports it as ``transformers_modules``: keep
    that in a temporary directory (one per module: the package is imported once per process)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dyn, "HF_MODULES_CACHE", str(tmp_path_factory.mktemp("hf_modules")))
        mp.setattr(sys, "path", list(sys.path))
        for name in [n for n in sys.modules if n.split(".")[0] == "transformers_modules"]:
            mp.delitem(sys.modules, name)
        yield dyn.HF_MODULES_CACHE
