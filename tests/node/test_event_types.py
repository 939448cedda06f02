"""Event type strings live in projections/catalogue.py only, and nothing outside projections/
decides what a task or approval event means (issue 28: one state machine, projections/states.py).

Checked on the source: a node module that names an event type by its string, or compares the
task/approval type constants, fails here with the file and line, so an eighth reader of task
state cannot creep back in."""

from __future__ import annotations

import ast
from pathlib import Path

from projections.catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parents[2]
TYPES = frozenset(CATALOGUE)
STATE_MACHINE_NAMES = {
    name
    for name in dir(__import__("projections.catalogue", fromlist=["x"]))
    if name.startswith(("TASK_", "APPROVAL_"))
}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (they may name types in prose)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    where = path.relative_to(ROOT)
    found = []
    compared = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and node.value in TYPES
            and id(node) not in docs
            # "log" and "finding" are words too (a WIT function, a field): caught when compared
            and ("." in node.value or id(node) in compared)
        ):
            found.append(f"{where}:{node.lineno}: the type string {node.value!r}")
        elif isinstance(node, ast.Attribute) and node.attr in STATE_MACHINE_NAMES:
            found.append(f"{where}:{node.lineno}: {node.attr} (task/approval type)")
        elif isinstance(node, ast.ImportFrom) and node.module == "projections.catalogue":
            names = {a.name for a in node.names} & STATE_MACHINE_NAMES
            if names:
                found.append(f"{where}:{node.lineno}: imports {sorted(names)}")
    return found


def test_no_node_module_names_an_event_type_or_reads_task_state_from_types() -> None:
    offences = [
        offence for path in sorted((ROOT / "node").rglob("*.py")) for offence in _offences(path)
    ]
    assert offences == [], "\n".join(offences)


def test_the_check_sees_what_it_looks_for(tmp_path: Path) -> None:
    """The checker itself: a string compare and a constant compare are both caught."""
    probe = ROOT / "node" / "_probe_event_types.py"
    probe.write_text(
        '"""Docstring naming task.created is fine."""\n'
        "from projections import catalogue as c\n"
        "def f(kind):\n"
        '    return kind == "task.created" or kind == c.APPROVAL_DECIDED\n'
    )
    try:
        found = _offences(probe)
    finally:
        probe.unlink()
    assert len(found) == 2 and "'task.created'" in found[0] and "APPROVAL_DECIDED" in found[1]
