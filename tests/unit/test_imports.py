"""The library's imports form no cycle, so that every module can be read (and imported) leaf-first, and no
package exports names lazily: every importer names the module that defines what it imports."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of ddmrl: dotted name -> file."""
    return {module_name(p): p for p in sorted((SRC / "ddmrl").rglob("*.py"))}


def imported(tree: ast.AST, known: dict[str, Path]) -> set[str]:
    """The ddmrl modules a module imports, at module level or in a function, but not for type checkers only:
    ``from ddmrl.x import y`` imports ddmrl.x and, when y is a submodule, ddmrl.x.y."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in known}


def import_graph() -> dict[str, set[str]]:
    """module -> the ddmrl modules it imports. Importing ``ddmrl.x.y`` runs ``ddmrl/x/__init__.py`` first, an edge
    too, except from a module of that package (its ``__init__`` is already running, or has run)."""
    known = modules()
    graph = {}
    for name, path in known.items():
        named = imported(ast.parse(path.read_text(), filename=str(path)), known)
        packages = {".".join(m.split(".")[:i]) for m in named for i in range(1, m.count(".") + 1)}
        graph[name] = (named | {p for p in packages if not name.startswith(p + ".")}) - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (its modules in import order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for succ in sorted(graph[node]):
            if state.get(succ) == 1:
                return [*path[path.index(succ) :], succ]
            if succ not in state and (cycle := visit(succ)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_reports_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_graph_counts_submodules_packages_and_in_function_imports():
    graph = import_graph()
    assert {"ddmrl.pipeline", "ddmrl.pipeline.layout"} <= graph[
        "ddmrl.pipeline.dag"
    ]  # from ddmrl.pipeline import layout
    assert "ddmrl.config" in graph["ddmrl.pipeline.dag"]
    assert {"ddmrl.training", "ddmrl.training.resume"} <= graph["ddmrl.models.checkpoint"]  # __init__ runs first
    assert "ddmrl.models.adapters" in graph["ddmrl.models.checkpoint"]  # imported inside a function
    assert "ddmrl.pipeline" not in graph["ddmrl.pipeline.layout"]  # its own package: already running


def test_library_imports_are_acyclic():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_package_exports_names_lazily():
    lazy = set()
    for init in sorted((SRC / "ddmrl").rglob("__init__.py")):
        for node in ast.parse(init.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if any(isinstance(t, ast.Name) and t.id in ("_LAZY", "__getattr__") for t in targets):
                lazy.add(module_name(init))
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                lazy.add(module_name(init))
    assert not lazy, f"packages exporting names lazily: {sorted(lazy)}"
