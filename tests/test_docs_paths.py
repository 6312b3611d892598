"""ARCHITECTURE.md names only files, modules and names that exist, so a move or a split cannot leave it pointing nowhere."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
ARCHITECTURE = (PROJECT / "ARCHITECTURE.md").read_text()
TOP_FOLDERS = ("crisscross", "pipelines", "tests", "tools", "benchmarks", "workflows", "notebooks", "data")
PHASES = tuple(p.name for p in (PROJECT / "crisscross").iterdir() if (p / "__init__.py").is_file())
QUOTED = re.compile(r"`([^`\s]+)`")
PLACEHOLDER = re.compile(r"<\w+>|(^|/)[A-Z](\.py)?$|[*{]")  # `crisscross/<phase>/`, `crisscross/beam/X.py`


def quoted() -> list[str]:
    return [token.rstrip(".,;:") for token in QUOTED.findall(ARCHITECTURE) if not PLACEHOLDER.search(token)]


@cache
def top_level_names(path: Path) -> frozenset[str]:
    """What a module defines at its top level: functions, classes, assigned names and imports."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)


def module_file(dotted: str) -> Path | None:
    """The file of ``crisscross/<phase>/<module>`` (``pipelines/<module>``), or of its package."""
    path = PROJECT / dotted
    for candidate in (path.with_name(path.name + ".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_every_repository_path_it_names_exists() -> None:
    named = [token for token in quoted() if token.split("/")[0] in TOP_FOLDERS and "/" in token]
    missing = [token for token in named if not (PROJECT / token).exists() and module_file(token) is None]  # `pipelines/stage`: a module
    assert not missing, f"ARCHITECTURE.md names paths the tree does not hold: {missing}"


def test_every_module_and_name_it_points_into_exists() -> None:
    """``annotate/store.py``, ``core/rng``, ``formats/schema.JudgmentRules``, ``pipelines/stage``: the
    module exists, and so does the name after its dot."""
    missing = []
    for token in quoted():
        match = re.fullmatch(rf"(?:crisscross/)?((?:{'|'.join(PHASES)})(?:/\w+)+|pipelines/\w+)(?:\.py)?(?:\.(\w+))?", token)
        if not match:
            continue
        module, name = match.groups()
        root = "" if module.startswith("pipelines/") else "crisscross/"
        path = module_file(root + module)
        if path is None or (name is not None and name not in top_level_names(path)):
            missing.append(token)
    assert not missing, f"ARCHITECTURE.md names modules or names the code does not hold: {missing}"


def test_every_module_the_layout_table_lists_exists() -> None:
    """A row ``| `crisscross/<phase>/` | `module` (what it holds), … |`` names modules of that phase."""
    missing = []
    for phase, row in re.findall(r"^\| `crisscross/(\w+)/` \| (.*)$", ARCHITECTURE, re.M):
        for module in re.findall(r"`(\w+)/?` \(", row):
            if module_file(f"crisscross/{phase}/{module}") is None:
                missing.append(f"{phase}/{module}")
    assert not missing, f"ARCHITECTURE.md's layout table lists modules the tree does not hold: {missing}"


def test_no_doc_holds_a_placeholder() -> None:
    """A section written later is not a section: no marker left in the docs a user reads."""
    marker = re.compile(r"\b(TODO|TBD|FIXME|XXX|SKELETON[-\w]*|[A-Z]+-FIGURES)\b")
    for doc in ("README.md", "ARCHITECTURE.md", "benchmarks/README.md"):
        found = marker.search((PROJECT / doc).read_text(encoding="utf-8"))
        assert found is None, f"{doc} holds the placeholder {found.group(0) if found else ''}"
