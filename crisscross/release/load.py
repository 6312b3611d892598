"""``crisscross.load_release(path)``: a release folder's tables in one call, as Arrow and pandas."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from crisscross.core.errors import InputError
from crisscross.formats.manifest import DATA, INFO, SUMS, is_release


@dataclass(frozen=True)
class Release:
    """A loaded release: ``tables`` (Arrow) and ``frames`` (pandas) by file stem (``pairs``,
    ``judgments``, ``sts_test``, ``verify_test``, ``raters``, ``qc_exclusions``, …; a part's as
    ``bison/triples``, ``entities/boxes``, ``entities/chains``, ``machine_labels/labels``), ``info`` (``release.json``), the
    ECCV-shaped positive maps by file stem and a part's JSON documents (``bison/bison_annotations``)."""

    path: Path
    info: dict[str, Any]
    tables: dict[str, pa.Table]
    maps: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    documents: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def frames(self) -> dict[str, pd.DataFrame]:
        return {name: table.to_pandas() for name, table in self.tables.items()}

    @property
    def version(self) -> str:
        return str(self.info["version"])

    @property
    def simulated(self) -> bool:
        return bool(self.info["simulated"])

    def files(self, folder: str) -> list[Path]:
        """The files of a folder under ``data/`` (e.g. ``entities/Annotations``), sorted."""
        return sorted(p for p in (self.path / DATA / folder).iterdir() if p.is_file())


def load_release(path: str | Path) -> Release:
    """Every Parquet table of ``<path>/data`` and of its parts' folders (CSV files are the same
    rows; Parquet keeps types), the JSON positive maps, the parts' JSON documents and ``release.json``."""
    root = Path(path)
    if not is_release(root):
        raise InputError(f"{root} is not a crisscross release folder (no {INFO} and {SUMS})")
    info = json.loads((root / INFO).read_text(encoding="utf-8"))
    data = root / DATA
    tables = read_tables(data)
    maps = {}
    for p in sorted(data.glob("*_to_*.json")):
        maps[PurePosixPath(p.name).stem] = json.loads(p.read_text(encoding="utf-8"))
    documents = {_key(data, p): json.loads(p.read_text(encoding="utf-8")) for p in sorted(data.glob("*/*.json"))}
    return Release(root, info, tables, maps, documents)


def read_tables(data: Path) -> dict[str, pa.Table]:
    """The Parquet tables of a ``data/`` folder and of its parts' folders, by key (``pairs``, ``bison/triples``)."""
    return {_key(data, p): pq.read_table(p) for p in sorted([*data.glob("*.parquet"), *data.glob("*/*.parquet")])}


def _key(data: Path, path: Path) -> str:
    return path.relative_to(data).with_suffix("").as_posix()
