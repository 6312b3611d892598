"""The package ships every subpackage of the tree, and the stage commands as ``crisscross.pipelines``; DVC's YAML parser is the C one."""

from __future__ import annotations

import tomllib
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def test_every_package_in_the_tree_is_listed_and_pipelines_ships_inside_crisscross() -> None:
    config = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["setuptools"]
    in_tree = {".".join(p.parent.relative_to(PROJECT).parts) for p in (PROJECT / "crisscross").rglob("__init__.py")}
    assert set(config["packages"]) == in_tree | {"crisscross.pipelines"}
    assert config["package-dir"] == {"crisscross.pipelines": "pipelines"}
    assert not any(name.split(".")[0] == "pipelines" for name in config["packages"])


def test_the_command_runs_from_crisscross_pipelines() -> None:
    from crisscross.pipelines import cli

    assert Path(cli.__file__).resolve() == PROJECT / "pipelines" / "cli.py"
    scripts = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"crisscross": "crisscross.pipelines.cli:run"}


def test_dvc_reads_yaml_with_ruamel_s_c_parser() -> None:
    """``ruamel.yaml.clib`` (a dependency: ruamel.yaml 0.19 no longer requires it) is the module
    ruamel.yaml's safe loader takes its C parser from; an upgrade that stops finding it makes every
    DVC command read its YAML in Python again."""
    from ruamel.yaml.main import CParser

    assert CParser is not None
