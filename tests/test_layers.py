"""Imports run downhill: a package imports only those below it in ARCHITECTURE.md's layer order.

Every ``import`` statement counts, the ones inside functions too: a lazy import still ties the
importing package to the imported one.  The root ``crisscross`` package runs before any of its
subpackages whatever imports them; importing it or its ``__version__`` adds no arrow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tools.dvc_code_deps import import_statements

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {p.name for p in (ROOT / "crisscross").iterdir() if (p / "__init__.py").exists()} | {"pipelines"}
LAYERS_LINE = re.compile(r"^layers: (.+)$", re.MULTILINE)


def layer_order() -> list[str]:
    """The packages bottom to top, from the ``layers:`` line of ARCHITECTURE.md."""
    found = LAYERS_LINE.search((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    assert found, "ARCHITECTURE.md has no 'layers: core → …' line"
    return [name.strip() for name in found.group(1).split("→")]


def package_of(path: Path) -> str:
    """``crisscross/<package>/…`` → package; ``pipelines/…`` (shipped as crisscross.pipelines) → pipelines."""
    parts = path.relative_to(ROOT).parts
    return "pipelines" if parts[0] == "pipelines" else parts[1] if len(parts) > 2 else ""


@dataclass(frozen=True)
class Arrow:
    where: str
    source: str
    target: str


def arrows() -> list[Arrow]:
    """Every import from one crisscross package into another."""
    found = []
    for path in sorted([*ROOT.glob("crisscross/**/*.py"), *ROOT.glob("pipelines/*.py")]):
        source = package_of(path)
        if not source:
            continue
        for line, names in import_statements(path):
            # the root package itself, and its attributes (``__version__``), are loaded before any package
            targets = {name.split(".")[1] for name in names if name.startswith("crisscross.")} & PACKAGES
            found += [Arrow(f"{path.relative_to(ROOT)}:{line}", source, target) for target in sorted(targets - {source})]
    return found


def test_the_layer_line_names_every_package_once() -> None:
    order = layer_order()
    assert sorted(order) == sorted(PACKAGES)
    assert len(order) == len(set(order))


def test_every_import_runs_downhill() -> None:
    rank = {name: n for n, name in enumerate(layer_order())}
    found = arrows()
    assert len(found) > 100  # the walk sees the tree
    upward = [f"{a.where}: {a.source} → {a.target}" for a in found if rank.get(a.target, len(rank)) > rank[a.source]]
    assert upward == [], "imports running up the layers (ARCHITECTURE.md):\n" + "\n".join(upward)
