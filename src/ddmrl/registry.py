"""Registries whose members are imported on first use.

A registry maps a name (``params.yaml``'s ``sampler.name``, a task, a method's objective) to an object given as
``"package.module:attribute"``, so that importing the registry imports none of its members: a stage runs, and
depends on, only the members it uses. A package exports other names lazily the same way (``_LAZY``: name ->
module, with :func:`lazy_exports`). Both tables are dict literals of strings, which the pipeline's dependency scan
(:mod:`ddmrl.pipeline.dag`) reads from the source without importing anything.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any


class Registry(Mapping[str, Any]):
    """``name -> object``, each imported from its ``"module:attribute"`` spec when first looked up."""

    def __init__(self, specs: dict[str, str]) -> None:
        self.specs = dict(specs)

    def __getitem__(self, name: str) -> Any:
        module, _, attr = self.specs[name].partition(":")
        return getattr(importlib.import_module(module), attr)

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def module(self, name: str) -> str:
        """The dotted module that defines member ``name``."""
        return self.specs[name].partition(":")[0]


def lazy_exports(package: str, exports: dict[str, str]):
    """A module ``__getattr__`` (PEP 562) that imports ``name`` from ``exports[name]`` (a module) on first access."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name]), name)

    return __getattr__
