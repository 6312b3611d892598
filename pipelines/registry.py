"""The stage registry: every ``crisscross`` command, found in this package rather than listed by hand.

A command module declares its stage with one top-level statement of literal values,
``STAGE = Stage(name=..., order=..., description=...)``.  :func:`stages` reads those statements
from the package's sources without importing a command (each imports Beam, about a second), so
``crisscross --help``, every stage's params check (the known sections) and the tests iterate one
table, and ``crisscross <stage>`` imports only the module it runs.
"""

from __future__ import annotations

import ast
import pkgutil
import re
import tokenize
from dataclasses import dataclass
from functools import cache
from io import StringIO
from pathlib import Path

DECLARATION = re.compile(r"^STAGE = Stage\(", re.MULTILINE)


@dataclass(frozen=True)
class Stage:
    """A ``crisscross`` command: ``name`` is its subcommand and its params section, ``order`` its
    place in ``crisscross --help`` (data-flow order), ``description`` the one line that list and
    its own ``--help`` show.  ``one_local_process``: its steps already spread over the cores of the
    process that runs them, and a second process on the same machine costs more than it takes over,
    so Beam's local runner runs it in one process however many are asked for
    (``crisscross.pipelines.stage.for_the_runner``)."""

    name: str
    order: int
    description: str
    one_local_process: bool = False


@cache
def _declared() -> dict[str, tuple[Stage, str]]:
    """Each stage by name, in ``order``, with the module that declares it."""
    found: dict[str, tuple[Stage, str]] = {}
    folder = Path(__file__).parent  # this package's: the registry is one of its modules
    for module in pkgutil.iter_modules([str(folder)]):
        path = folder / f"{module.name}.py"
        stage = declaration(path.read_text(encoding="utf-8"), str(path)) if path.is_file() else None
        if stage is None:
            continue
        if stage.name in found:
            raise ValueError(f"stage {stage.name!r} is declared twice: {found[stage.name][1]} and {module.name}")
        found[stage.name] = (stage, f"{__package__}.{module.name}")
    return dict(sorted(found.items(), key=lambda item: (item[1][0].order, item[0])))


def declaration(source: str, where: str) -> Stage | None:
    """The ``STAGE = Stage(...)`` of a module's source, read as literals, or None for a module
    that declares none (``stage``, ``cli``)."""
    match = DECLARATION.search(source)
    if match is None:
        return None
    rest = source[match.start() :]
    end = next(token.end for token in tokenize.generate_tokens(StringIO(rest).readline) if token.type == tokenize.NEWLINE)
    call = ast.parse("".join(rest.splitlines(keepends=True)[: end[0]])).body[0].value  # type: ignore[attr-defined]
    try:
        return Stage(*map(ast.literal_eval, call.args), **{k.arg: ast.literal_eval(k.value) for k in call.keywords})
    except ValueError as error:
        raise ValueError(f"{where}: STAGE must be declared with literal values ({error})") from None


def stages() -> dict[str, Stage]:
    """Every stage by name, in ``crisscross --help``'s order."""
    return {name: stage for name, (stage, _) in _declared().items()}


def module_of(name: str) -> str:
    """The module of stage ``name`` (one of :func:`stages`), which ``crisscross <name>`` imports and runs."""
    return _declared()[name][1]
