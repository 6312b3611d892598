"""What differs by task type lives in its class (``crisscross/tasktypes/``): no module outside the
package branches on a type's name, and every registered type has every part the pipeline asks for."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from crisscross.tasktypes import missing_parts, task_types, type_names
from crisscross.tasktypes.base import TaskType

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "crisscross" / "tasktypes"
TYPE_CLASSES = {type(kind).__name__ for kind in task_types()}  # STS, …, VERIFY_TRIPLE, as the type files name them
NAMES_MODULE = "crisscross.tasktypes.names"  # the names for tests and benchmarks, never for the library


def _sources() -> list[Path]:
    found = [*sorted((ROOT / "crisscross").rglob("*.py")), *sorted((ROOT / "pipelines").rglob("*.py"))]
    return [path for path in found if PACKAGE not in path.parents]


def _names_a_type(node: ast.AST, imported: set[str]) -> bool:
    """Whether an expression mentions a task type by name: ``"STS"``, ``STS.name``, a name the file
    imported from the task-type names, or an ``isinstance`` test against a type class."""
    for part in ast.walk(node):
        if isinstance(part, ast.Constant) and isinstance(part.value, str) and part.value in type_names():
            return True
        if isinstance(part, ast.Name) and part.id in imported:
            return True
    return False


def _branches(tree: ast.AST) -> list[ast.AST]:
    """Every test that decides which code runs."""
    tests: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.IfExp | ast.While):
            tests.append(node.test)
        elif isinstance(node, ast.comprehension):
            tests += node.ifs
        elif isinstance(node, ast.match_case):
            tests.append(node.pattern)
    return tests


def _imported_type_names(tree: ast.AST) -> set[str]:
    """Names a file imported that stand for a type: its class, or anything from the names module."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("crisscross.tasktypes"):
            for alias in node.names:
                if node.module == NAMES_MODULE or alias.name in TYPE_CLASSES:
                    found.add(alias.asname or alias.name)
    return found


def offending_lines() -> list[str]:
    offences = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = _imported_type_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == NAMES_MODULE:
                offences.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {NAMES_MODULE} (for tests and benchmarks only)")
        for test in _branches(tree):
            if _names_a_type(test, imported):
                offences.append(f"{path.relative_to(ROOT)}:{test.lineno}: {ast.unparse(test)[:100]}")
    return offences


def test_no_module_outside_the_task_type_package_branches_on_a_type_name():
    offences = offending_lines()
    assert offences == [], "branches on a task type's name (ask the type instead, crisscross/tasktypes):\n" + "\n".join(offences)


def test_the_check_catches_if_while_comprehension_and_match():
    """The check itself: each way of naming a type in a branch is caught, a selection of rows is not."""
    source = """
from crisscross.tasktypes.verify import VERIFY
if kind == "VERIFY": pass
label = "a" if row.task_type == VERIFY.name else "b"
rows = [r for r in rows if r["task_type"] == "STS"]
while kind != "SIS": pass
match kind:
    case "CHOOSE": pass
verified = pairs[pairs["task_type"] == VERIFY.name]
"""
    tree = ast.parse(source)
    imported = _imported_type_names(tree)
    caught = sorted(test.lineno for test in _branches(tree) if _names_a_type(test, imported))
    assert caught == [3, 4, 5, 6, 8]


@pytest.mark.parametrize("kind", task_types(), ids=lambda kind: kind.name)
def test_every_registered_type_has_every_part(kind):
    assert missing_parts(kind) == []
    assert kind.instructions.strip() and kind.title.strip() and len(kind.side_labels) == 2
    if kind.scale is None:  # raters pick from the batch's answers or from the item's own options
        assert kind.batch_answers() is not None or type(kind).options is not TaskType.options
    assert kind.positive_rule()
