"""The stage registry: every command module's ``STAGE``, read from its source without importing it."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import crisscross.pipelines
from crisscross.pipelines.registry import Stage, declaration, module_of, stages


def test_every_declared_stage_is_its_module_s_own_and_every_module_s_stage_is_listed() -> None:
    declared = {}
    for module in pkgutil.iter_modules(crisscross.pipelines.__path__):
        stage = getattr(importlib.import_module(f"crisscross.pipelines.{module.name}"), "STAGE", None)
        if isinstance(stage, Stage):
            declared[stage.name] = (stage, f"crisscross.pipelines.{module.name}")
    assert {name: (stage, module_of(name)) for name, stage in stages().items()} == declared
    orders = [stage.order for stage in stages().values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)  # one place each, in data-flow order


def test_a_declaration_is_read_across_lines_and_must_be_literal() -> None:
    source = 'import x\n\nSTAGE = Stage(\n    name="a-b",\n    order=5,\n    description="x → y (a, b)"  # why\n)\nOTHER = 1\n'
    assert declaration(source, "m.py") == Stage(name="a-b", order=5, description="x → y (a, b)")
    assert declaration("STAGE_NAME = 'x'\n", "m.py") is None
    with pytest.raises(ValueError, match="m.py: STAGE must be declared with literal values"):
        declaration('STAGE = Stage(name=NAME, order=1, description="d")\n', "m.py")


def test_the_help_imports_no_command() -> None:
    code = (
        "import sys\nfrom crisscross.pipelines import cli\ncli.usage()\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('crisscross.pipelines.', 'apache_beam')))))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == ["crisscross.pipelines.cli", "crisscross.pipelines.clients", "crisscross.pipelines.registry"]
