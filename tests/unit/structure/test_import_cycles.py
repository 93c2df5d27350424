"""No import cycle hides in src/ behind ``if TYPE_CHECKING:`` or an import inside a function.

Why this test exists: import-linter and Python itself only see the imports that run at
module load. Two modules that import each other -- one of them only for type checking, or
lazily inside a function -- still depend on each other: neither can be understood, tested or
replaced alone. This test reads every module under src/ and fails naming the cycle when the
graph of *all* imports between first-party modules has one that the load-time graph does
not (a load-time cycle already fails at import).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, module: str, is_package: bool) -> list[tuple[str, bool]]:
    """(imported name, deferred) for every import in ``tree``; deferred: inside a function
    or under ``if TYPE_CHECKING:``. ``from x import y`` names ``x.y``: a submodule or not."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            child_deferred = deferred
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                child_deferred = True
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                child_deferred = True
            if isinstance(child, ast.Import):
                found.extend((a.name, child_deferred) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(module, is_package, child)
                found.extend((f"{base}.{a.name}", child_deferred) for a in child.names)
            visit(child, child_deferred)

    visit(tree, False)
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(every import, load-time imports only) between modules under src/."""
    files = {_module_name(p): p for p in SRC.rglob("*.py") if "_gen" not in p.parts}
    every: dict[str, set[str]] = {m: set() for m in files}
    at_load: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        for name, deferred in _imports(tree, module, path.name == "__init__.py"):
            while name and name not in files:  # the module (or package) the name is in
                name = name.rpartition(".")[0]
            if name and name != module:
                every[module].add(name)
                if not deferred:
                    at_load[module].add(name)
    return every, at_load


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A path start -> ... -> goal in ``graph`` (None when there is none)."""
    seen, stack = {start}, [(start, [start])]
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph[node]):
            if nxt == goal:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def hidden_cycles() -> list[list[str]]:
    every, at_load = import_graph()
    cycles = []
    for module, deps in sorted(every.items()):
        for dep in sorted(deps - at_load[module]):  # a deferred import module -> dep
            back = _reaches(every, dep, module)
            if back is not None:
                cycles.append([module, *back])
    return cycles


def test_the_checker_finds_a_cycle_hidden_behind_type_checking(tmp_path: Path) -> None:
    global SRC
    saved = SRC
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import X\n"
    )
    (pkg / "c.py").write_text("def f():\n    from pkg import a\n")
    SRC = tmp_path
    try:
        assert hidden_cycles() == [["pkg.b", "pkg.a", "pkg.b"]]
        (pkg / "a.py").write_text("from pkg import c\n")
        assert hidden_cycles() == [["pkg.c", "pkg.a", "pkg.c"]]
    finally:
        SRC = saved


def test_no_import_cycle_hides_in_src() -> None:
    cycles = hidden_cycles()
    assert not cycles, "import cycles hidden behind TYPE_CHECKING or a lazy import:\n" + "\n".join(
        " -> ".join(c) for c in cycles
    )
