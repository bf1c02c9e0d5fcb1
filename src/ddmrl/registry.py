"""Registries whose members are imported on first use.

A registry maps a name (``params.yaml``'s ``sampler.name``, a task, a method's objective) to an object given as
``"package.module:attribute"``, so that importing the registry imports none of its members: a stage runs, and
depends on, only the members it uses. Its table is a dict literal of strings, which the pipeline's dependency scan
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
