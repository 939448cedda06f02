"""The code's layout: no import circles among the project's own modules.

Read from the source (every `import` and `from ... import`, those under `if TYPE_CHECKING:` and
inside functions included), not from what Python happened to load: a circle that only a lazy or
type-checking import closes is still a circle a reader has to untangle. Run this file as a
script to print the circles (`python -m tests.test_layout`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("node", "eventstore", "projections", "harness", "bench")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the project's packages by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _known(name: str, known: dict[str, Path]) -> str | None:
    """The project module `name` is, or is inside (`node.ops.ids.new_id` -> `node.ops.ids`)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules that module `name` imports, wherever in it the import statement is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for statement in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(statement, ast.Import):
            found.update(_known(alias.name, known) for alias in statement.names)
        elif isinstance(statement, ast.ImportFrom):
            base = statement.module or ""
            if statement.level:
                parts = package.split(".")
                parts = parts[: len(parts) - statement.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in statement.names:
                # `from pkg import mod` imports the module; `from mod import name` the module
                found.add(_known(f"{base}.{alias.name}", known) or _known(base, known))
    found.discard(name)
    found.discard(None)
    return {module for module in found if module is not None}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return sorted(groups)


def describe(group: list[str], graph: dict[str, set[str]]) -> str:
    """One group as its members' imports within it: `a -> b, c`."""
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & set(group)))}" for m in group)


def test_no_import_circles() -> None:
    graph = import_graph()
    found = [describe(group, graph) for group in circles(graph)]
    assert not found, "import circles (move the shared piece where both may import it):\n" + (
        "\n".join(found)
    )


def test_the_finder_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    """The check itself: a circle closed by a TYPE_CHECKING import and one closed inside a
    function are both found; a package importing its own submodule is not a circle."""
    package = tmp_path / "node"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from node.b import thing\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from node import a\n"
    )
    (package / "c.py").write_text("def f():\n    from .sub.d import g\n")
    (package / "sub" / "__init__.py").write_text("from node.sub.d import g\n")
    (package / "sub" / "d.py").write_text("from ..c import f\n")
    graph = import_graph(tmp_path)
    assert circles(graph) == [["node.a", "node.b"], ["node.c", "node.sub.d"]]
    assert graph["node.sub"] == {"node.sub.d"}


if __name__ == "__main__":
    graph = import_graph()
    for group in circles(graph):
        print(describe(group, graph))
