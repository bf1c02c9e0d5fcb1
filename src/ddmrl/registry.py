"""Registries whose members are imported on first use.

A registry maps a name (``params.yaml``'s ``sampler.name``, a task, a method's objective) to an object given as
``"package.module:attribute"``, so that importing the registry imports none of its members: a stage runs, and
depends on, only the members it uses (:mod:`ddmrl.pipeline.dag` names a stage's members' modules by
:meth:`Registry.module`, which imports nothing). An entry may carry traits read by name (:meth:`Registry.record`).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any

from ddmrl.errors import ConfigError

#: a member outside the package, named by where it lives: ``package.module:attribute``
IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


class Registry(Mapping[str, Any]):
    """``name -> object``, each imported from its ``"module:attribute"`` spec when first looked up.

    Iterating lists the built-in members; looking up also finds a member outside the package: a name that is itself
    an import path (``mylab.methods:MY_METHOD``), or the name of an entry point in ``group`` of an installed package.
    A built-in's entry may be a record instead of a string (a NamedTuple whose ``spec`` is the import path): the
    traits that the schema, the loop and the DAG read by name without importing the member (:meth:`record`).
    """

    def __init__(self, specs: dict[str, Any], group: str = "", kind: type | None = None, noun: str = "member") -> None:
        self.specs, self.group = dict(specs), group
        self.kind = kind  # the class every member is an instance of (None: any object)
        self.noun = noun  # what a member is called in errors ("method")

    def spec(self, name: str) -> str | None:
        """``"module:attribute"`` of member ``name`` (built in, an import path, or an entry point); None if unknown."""
        if name in self.specs:
            entry = self.specs[name]
            return entry if isinstance(entry, str) else entry.spec
        if IMPORT_PATH.fullmatch(name):
            return name
        if self.group:
            for ep in entry_points(group=self.group, name=name):
                return ep.value
        return None

    def __getitem__(self, name: str) -> Any:
        spec = self.spec(name)
        if spec is None:
            raise KeyError(name)
        module, _, attr = spec.partition(":")
        return getattr(importlib.import_module(module), attr)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.spec(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def record(self, name: str, kind: type) -> Any:
        """Member ``name``'s entry as a ``kind`` record (a NamedTuple whose first field is ``spec``): a built-in's
        own, else one with the member's spec and every other field at its default (a member outside the package
        has the default traits)."""
        entry = self.specs.get(name)
        if isinstance(entry, kind):
            return entry
        spec = self.spec(name)
        if spec is None:
            raise KeyError(name)
        return kind(spec)

    def member(self, name: Any, key: str) -> Any:
        """Member ``name`` imported and checked to be of the registry's ``kind``; :class:`ConfigError` naming the
        config ``key`` when there is none, it cannot be imported, or it is of another kind."""
        if not isinstance(name, str) or name not in self:
            choices = ", ".join(self)
            raise ConfigError(f"{key} = {name!r}: unknown {self.noun}; choose one of {choices} (or module:attribute)")
        try:
            member = self[name]
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"{key} = {name!r}: cannot be imported ({e}); is its module on PYTHONPATH?") from None
        if self.kind is not None and not isinstance(member, self.kind):
            kind = f"{self.kind.__module__}.{self.kind.__qualname__}"
            raise ConfigError(f"{key} = {name!r}: is a {type(member).__name__}, not a {kind}")
        return member

    def module(self, name: str) -> str:
        """The dotted module that defines member ``name``."""
        spec = self.spec(name)
        if spec is None:
            raise KeyError(name)
        return spec.partition(":")[0]
