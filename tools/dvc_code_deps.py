"""Each DVC stage's code dependencies, computed from the imports of the command it runs.

``python tools/dvc_code_deps.py`` says which stages of ``dvc.yaml`` and ``workflows/*/dvc.yaml``
list other code than they run; ``--write`` rewrites those lists in place (data deps, params and
comments are kept).  ``tests/tools/test_dvc_code_deps.py`` fails while they differ.

A stage's code is the import closure of its command module (``crisscross <stage>`` →
``pipelines/<stage>.py``): every ``import`` statement followed, those inside functions too, since
a module imported on use still shapes the output.  Files with no statement but a docstring
(most ``__init__.py``) cannot change an output and are left out.  A package folder is listed whole
when the stage runs at least half of its code, and the shared vocabulary (``crisscross/core``,
``crisscross/formats``: ARCHITECTURE.md's bottom layers) whole when it runs any of it.  That keeps
the lists, and ``dvc.lock`` which DVC rereads around every stage, short, at the price of rerunning
a stage for an edit to a module it does not run in a package it mostly does.  Of the root ``crisscross/__init__.py`` only module-level imports
count: its lazy ``load_release`` is the public façade, which no stage calls.  The ``release``
stage depends on all the code: its ``release.json`` records the code's hash (``code_version``).
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CODE_ROOTS = ("crisscross", "pipelines")
WHOLE_CODE = frozenset({"release"})  # commands whose output records the hash of all the code
SHARED = (ROOT / "crisscross" / "core", ROOT / "crisscross" / "formats")  # listed whole when used at all
ROOTS = tuple(ROOT / name for name in CODE_ROOTS)  # never listed whole (but by the release)
DEP_LINE = re.compile(r"^(\s+)- (\S+)\s*$")


def pipelines() -> list[Path]:
    """Every DVC pipeline of the project: the root demo, then the workflows."""
    return [ROOT / "dvc.yaml", *sorted(ROOT.glob("workflows/*/dvc.yaml"))]


def module_file(module: str) -> Path | None:
    """The source file of a crisscross module (``crisscross.pipelines.x`` lives in ``pipelines/``)."""
    parts = module.split(".")
    if parts[0] != "crisscross":
        return None
    base, rest = (ROOT / "pipelines", parts[2:]) if parts[1:2] == ["pipelines"] else (ROOT / "crisscross", parts[1:])
    for candidate in (base.joinpath(*rest).with_suffix(".py") if rest else None, base.joinpath(*rest, "__init__.py")):
        if candidate is not None and candidate.exists():
            return candidate
    return None


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


@cache
def runs_code(path: Path) -> bool:
    """Whether a file holds more than its docstring and ``from __future__`` imports."""
    for node in _tree(path).body:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        if not (docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__")):
            return True
    return False


def import_statements(path: Path, *, top_level: bool = False) -> Iterator[tuple[int, list[str]]]:
    """(line, modules named) of every import statement of a file, those inside functions too unless
    ``top_level``; ``from package import name`` names ``package`` and ``package.name`` (a module or not)."""
    tree = _tree(path)
    for node in tree.body if top_level else ast.walk(tree):
        if isinstance(node, ast.Import):
            yield node.lineno, [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]


def imported_modules(path: Path) -> set[str]:
    """The crisscross modules one file imports, with their parent packages (which run first)."""
    found: set[str] = set()
    for _, names in import_statements(path, top_level=path == ROOT / "crisscross" / "__init__.py"):
        for name in names:
            parts = name.split(".")
            if parts[0] == "crisscross":
                found.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
    return found


@cache
def closure(module: str) -> frozenset[Path]:
    """Every crisscross source file that can run when ``module`` is imported and used."""
    seen: set[Path] = set()
    pending = [module, "crisscross"]
    while pending:
        path = module_file(pending.pop())
        if path is None or path in seen:
            continue
        seen.add(path)
        pending.extend(imported_modules(path))
    return frozenset(path for path in seen if runs_code(path))


@cache
def code_files(folder: Path) -> frozenset[Path]:
    return frozenset(path for path in folder.rglob("*.py") if runs_code(path))


def compact(files: frozenset[Path]) -> list[Path]:
    """The fewest paths covering ``files``: a folder when all of its code is in them."""
    paths: list[Path] = []

    def walk(folder: Path) -> None:
        inside = {f for f in files if f.is_relative_to(folder)}
        if not inside:
            return
        if inside == code_files(folder) or folder in SHARED or (folder not in ROOTS and 2 * len(inside) >= len(code_files(folder))):
            paths.append(folder)
            return
        paths.extend(sorted(f for f in inside if f.parent == folder))
        for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
            walk(sub)

    for name in CODE_ROOTS:
        walk(ROOT / name)
    return paths


def stage_code(command: str) -> list[Path]:
    """The code paths a stage running ``crisscross <command>`` depends on."""
    from crisscross.pipelines.registry import module_of

    if command in WHOLE_CODE:
        return [ROOT / name for name in CODE_ROOTS]
    return compact(closure(module_of(command)))


@dataclass(frozen=True)
class Stage:
    dvc_yaml: Path
    name: str
    command: str
    listed: tuple[str, ...]  # code deps as written (relative to the dvc.yaml's folder)

    def wanted(self) -> tuple[str, ...]:
        return tuple(Path(os.path.relpath(path, self.dvc_yaml.parent)).as_posix() for path in stage_code(self.command))


def is_code(dep: str, dvc_yaml: Path) -> bool:
    resolved = (dvc_yaml.parent / dep).resolve()
    return "${" not in dep and resolved.is_relative_to(ROOT) and resolved.relative_to(ROOT).parts[:1] in [(name,) for name in CODE_ROOTS]


def stages(dvc_yaml: Path, text: str | None = None) -> list[Stage]:
    """The stages of ``dvc_yaml`` (of ``text``, when given, as that file's content)."""
    found = []
    document = yaml.safe_load(dvc_yaml.read_text(encoding="utf-8") if text is None else text)
    for name, stage in document["stages"].items():
        words = shlex.split(stage["cmd"])
        if words[0] != "crisscross":
            raise SystemExit(f"{dvc_yaml.relative_to(ROOT)}: stage {name} does not run a crisscross command")
        listed = tuple(dep for dep in stage.get("deps", []) if is_code(dep, dvc_yaml))
        found.append(Stage(dvc_yaml, name, words[1], listed))
    return found


def rewrite(dvc_yaml: Path, text: str) -> str:
    """``text`` (``dvc_yaml``'s content) with every stage's code deps replaced by the computed
    ones, where its first code dep was (after its data deps, for a stage that lists none yet)."""
    wanted = {stage.name: stage.wanted() for stage in stages(dvc_yaml, text)}
    out: list[str] = []
    current: str | None = None
    section = ""  # the stage key the line is under: deps, params, outs …
    written: set[str] = set()
    after_data: dict[str, tuple[int, str]] = {}  # stage → where its last data dep ends, and its indent
    for line in text.splitlines(keepends=True):
        if re.match(r"^\S", line):  # a top-level key (stages, metrics, plots) or comment
            current = None
        elif re.match(r"^  (\w[\w-]*):\s*$", line):
            current = line.strip().rstrip(":")
        elif re.match(r"^    (\w+):", line):
            section = line.strip().split(":")[0]
        match = DEP_LINE.match(line) if section == "deps" else None
        if current in wanted and match and is_code(match.group(2), dvc_yaml):
            if current not in written:
                out.extend(f"{match.group(1)}- {path}\n" for path in wanted[current])
                written.add(current)
            continue
        out.append(line)
        if current in wanted and match:
            after_data[current] = (len(out), match.group(1))
    for name, (at, indent) in sorted(after_data.items(), key=lambda item: -item[1][0]):
        if name not in written:
            out[at:at] = [f"{indent}- {path}\n" for path in wanted[name]]
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the code deps of stages that differ")
    args = parser.parse_args(argv)
    differing = 0
    for dvc_yaml in pipelines():
        for stage in stages(dvc_yaml):
            if stage.listed != stage.wanted():
                differing += 1
                print(f"{dvc_yaml.relative_to(ROOT)} {stage.name}: lists {list(stage.listed)}, runs {list(stage.wanted())}")
        if args.write:
            dvc_yaml.write_text(rewrite(dvc_yaml, dvc_yaml.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"{differing} stage(s) {'rewritten' if args.write else 'differ'}")
    return 1 if differing and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
