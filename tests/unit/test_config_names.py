"""No file under ``src/ddmrl/config/`` names a member of a registry: what the schema checks of a member it reads
from the member's record (a view sampler's ``keys``, a sampler's ``kv_cache``, a family's ``sampler``), a member's own
checks live in its module (a method's ``Params``), and the defaults are constants of the registries' modules
(``DEFAULT_SAMPLER``, ``DEFAULT_RUNS``). Prose may mention members (docstrings, descriptions and error messages are
whole sentences, never equal to a name); a string literal equal to a member's name is refused. Exempt are the
schema's own words that happen to spell a member's name: the choices of a ``Literal`` that has a choice naming no
member (``kv_cache: none``, ``parallel_floor: schedule``, the train loss ``maskgit``), a section's key
(``schedule``), and the default profile's name (``tiny``)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import ddmrl.config as config_package
from ddmrl.augmenters import AUGMENTERS
from ddmrl.aux_policies import AUX_POLICIES
from ddmrl.config import DEFAULT_PROFILE
from ddmrl.masking import VIEWS
from ddmrl.methods import METHODS
from ddmrl.models import FAMILIES
from ddmrl.objectives import ADVANTAGES, OBJECTIVES, STEP_ADVANTAGES, VIEW_ADVANTAGES, WEIGHTINGS
from ddmrl.rewards import REWARD_MODELS
from ddmrl.samplers import SAMPLERS
from ddmrl.tasks import TASKS

CONFIG = Path(inspect.getfile(config_package)).parent
REGISTRIES = {
    "AUGMENTERS": AUGMENTERS,
    "AUX_POLICIES": AUX_POLICIES,
    "VIEWS": VIEWS,
    "METHODS": METHODS,
    "FAMILIES": FAMILIES,
    "OBJECTIVES": OBJECTIVES,
    "WEIGHTINGS": WEIGHTINGS,
    "ADVANTAGES": ADVANTAGES,
    "STEP_ADVANTAGES": STEP_ADVANTAGES,
    "VIEW_ADVANTAGES": VIEW_ADVANTAGES,
    "REWARD_MODELS": REWARD_MODELS,
    "SAMPLERS": SAMPLERS,
    "TASKS": TASKS,
}


def member_names() -> dict[str, list[str]]:
    """Every built-in member's name, with the registries that have it."""
    names: dict[str, list[str]] = {}
    for registry, members in REGISTRIES.items():
        for name in members:
            names.setdefault(name, []).append(registry)
    return names


@dataclasses.dataclass
class Literals(ast.NodeVisitor):
    """The string literals of a module outside its docstrings, and the words of the schema exempt from the scan."""

    names: dict[str, list[str]]
    found: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    words: set[str] = dataclasses.field(default_factory=set)

    def visit(self, node: ast.AST) -> None:
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(node) is not None:
            body = body[1:]  # its docstring is prose
            node = type(node)(**{**{f: getattr(node, f) for f in node._fields}, "body": body})
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", "") == "Literal":
            choices = [c.value for c in ast.walk(node.slice) if isinstance(c, ast.Constant)]
            if any(c not in self.names for c in choices):  # a vocabulary of its own (kv_cache: none, prefix, dual)
                self.words.update(choices)
            return super().generic_visit(node) if not self.words.issuperset(choices) else None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            self.words.add(node.target.id)  # a section's key
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.found.append((node.lineno, node.value))
        super().generic_visit(node)


def offending_literals(paths: list[Path], names: dict[str, list[str]]) -> list[str]:
    """``file:line: 'name' (registries)`` of each literal naming a member; the schema's words of every file exempt."""
    scans = {path: Literals(names) for path in paths}
    for path, scan in scans.items():
        scan.visit(ast.parse(path.read_text(encoding="utf-8")))
    exempt = set().union(*(scan.words for scan in scans.values())) | {DEFAULT_PROFILE}
    return [
        f"{path.name}:{line}: {value!r} ({', '.join(names[value])})"
        for path, scan in scans.items()
        for line, value in scan.found
        if value in names and value not in exempt
    ]


def test_no_file_under_config_names_a_registry_member():
    names = member_names()
    assert len(names) > 50 and "maskgrpo_fading" in names and "llada" in names  # the scan has something to find
    hits = offending_literals(sorted(CONFIG.glob("*.py")), names)
    assert not hits, "config/ names registry members (read a trait of the member's record instead):\n" + "\n".join(
        hits
    )


def test_the_scan_finds_a_member_named_in_code(tmp_path):
    """The scan is not vacuous: a comparison with a member's name, a default naming one and a Literal of members
    are found; a Literal with a word of its own, a key and a docstring are not."""
    source = tmp_path / "example.py"
    source.write_text(
        '"""Docstring naming llada."""\n'
        "from typing import Literal\n"
        "class Section:\n"
        '    """About maskgrpo_fading."""\n'
        '    kv_cache: Literal["none", "prefix"] = "none"\n'
        '    views: Literal["tracerl"] = "tracerl"\n'
        '    name: str = "maskgit"\n'
        "    schedule: int = 0\n"
        "    def check(self):\n"
        '        return self.name == "block" or {"schedule": 1}\n',
        encoding="utf-8",
    )
    hits = offending_literals([source], member_names())
    assert [h.split(":")[2].split()[0] for h in hits] == ["'tracerl'", "'tracerl'", "'maskgit'", "'block'"], hits
