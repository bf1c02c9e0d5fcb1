"""The library's imports form no cycle, so that every module can be read (and imported) leaf-first; they point down
the layers (docs/extending.md) except registry look-ups; and no package exports names lazily: every importer names
the module that defines what it imports."""

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
    assert {"ddmrl.tasks", "ddmrl.tasks.encoding"} <= graph["ddmrl.rollout"]  # __init__ runs first
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


#: the library's layers, bottom first (docs/extending.md): a module imports from its own layer or below
LAYERS = (
    {"errors", "io", "seeding", "numerics", "stats", "registry", "sandbox", "_sandbox_child"},
    {"config", "hub", "geneval"},
    {"models"},
    {"rewards", "tasks", "aux_policies"},
    {"samplers", "likelihood", "masking"},
    {"objectives", "methods", "rollout", "evaluation"},
    {"augmenters"},
    {"training", "plan", "diagnostics", "mar"},
    {"pipeline", "tables", "base_models", "score", "cli", "embedded", "lmeval"},
)
#: the registry modules (a package's ``__init__`` holding its registry, light by contract): importing from one is a
#: look-up (the registry, or the records and helpers it declares), not a dependency on its members
REGISTRIES = {"ddmrl.methods", "ddmrl.tasks", "ddmrl.rewards", "ddmrl.models", "ddmrl.samplers", "ddmrl.aux_policies",
              "ddmrl.masking", "ddmrl.objectives", "ddmrl.augmenters"}  # fmt: skip


def layer_of(module: str) -> int:
    """The layer of ``ddmrl.<package>...`` (``ddmrl`` itself: below every layer)."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    return next(i for i, members in enumerate(LAYERS) if parts[1] in members)


def upward_imports() -> list[tuple[str, str, tuple[str, ...]]]:
    """(module, imported module, names) of every import, at module level or in a function but not for type
    checkers, from a lower layer to a higher one."""
    found = []
    for name, path in modules().items():

        def visit(node: ast.AST, name: str = name) -> None:
            if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                for child in node.orelse:
                    visit(child)
                return
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ddmrl") and not node.level:
                if layer_of(node.module) > layer_of(name):
                    found.append((name, node.module, tuple(sorted(a.name for a in node.names))))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("ddmrl.") and layer_of(a.name) > layer_of(name):
                        found.append((name, a.name, ()))
            for child in ast.iter_child_nodes(node):
                visit(child)

        visit(ast.parse(path.read_text(), filename=str(path)))
    return found


def test_every_package_has_a_layer():
    packages = {m.split(".")[1] for m in modules() if m.count(".") >= 1}
    assert packages == set().union(*LAYERS), "a package without a layer (add it to LAYERS and docs/extending.md)"


def test_the_registry_modules_hold_registries():
    for module in REGISTRIES:
        assert "Registry(" in (SRC / module.replace(".", "/") / "__init__.py").read_text(), module


def test_imports_point_down_the_layers_except_registry_lookups():
    upward = upward_imports()
    others = [(m, to, names) for m, to, names in upward if to not in REGISTRIES]
    assert not others, (
        f"imports from a lower layer up (move the helper down, or import it for type checkers only): {others}"
    )
    documented = (SRC.parent / "docs" / "extending.md").read_text()
    assert all(f"`{name}`" in documented for _, to, names in upward for name in names)
