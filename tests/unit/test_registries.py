"""Registries import their members on first use: importing one loads none of its members' modules, a lookup loads
exactly the member's module, and every spec names an object that exists."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ddmrl.registry import Registry

REGISTRIES = [
    ("ddmrl.tasks", "TASKS", "sudoku4", "ddmrl.tasks.sudoku4"),
    ("ddmrl.samplers", "SAMPLERS", "maskgit", "ddmrl.samplers.maskgit"),
    ("ddmrl.objectives", "OBJECTIVES", "spg", "ddmrl.objectives.spg"),
    ("ddmrl.aux_policies", "AUX_POLICIES", "schedule", "ddmrl.aux_policies.schedule"),
    ("ddmrl.rewards", "REWARD_MODELS", "clip", "ddmrl.rewards.local_models"),
]


def modules_after(code: str) -> set[str]:
    """The ddmrl modules a fresh interpreter has imported after running ``code``."""
    listing = "import sys; print(' '.join(m for m in sys.modules if m.startswith('ddmrl')))"
    out = subprocess.run([sys.executable, "-c", f"{code}\n{listing}"], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize(("package", "name", "member", "module"), REGISTRIES)
def test_a_lookup_imports_only_its_member(package, name, member, module):
    siblings = {
        f"{package}.{m}"
        for m in ("sudoku4", "countdown3", "geneval", "math_reasoning", "emerge", "token_clip", "unmasking")
    }
    loaded = modules_after(f"from {package} import {name}")
    assert module not in loaded and not loaded & siblings
    loaded = modules_after(f"from {package} import {name}; {name}[{member!r}]")
    assert module in loaded and not (loaded & siblings) - {module, "ddmrl.samplers.llada"}


@pytest.mark.parametrize(("package", "name", "member", "module"), REGISTRIES)
def test_every_spec_resolves(package, name, member, module):
    registry = getattr(__import__(package, fromlist=[name]), name)
    assert registry.module(member) == module
    for key in registry:
        assert callable(registry[key]), key


def test_a_package_exports_no_names_of_its_modules():
    """A name is imported from the module that defines it: importing a package loads none of its members."""
    assert "ddmrl.rewards.remote" not in modules_after("import ddmrl.rewards")
    with pytest.raises(ImportError, match="RewardServerClient"):
        from ddmrl.rewards import RewardServerClient  # noqa: F401


def test_registry_is_a_read_only_mapping():
    r = Registry({"dumps": "json:dumps"})
    assert list(r) == ["dumps"] and len(r) == 1 and "dumps" in r and r["dumps"]([1]) == "[1]"
    with pytest.raises(KeyError):
        r["loads"]
