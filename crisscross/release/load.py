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
from crisscross.release.manifest import DATA, INFO


@dataclass(frozen=True)
class Release:
    """A loaded release: ``tables`` (Arrow) and ``frames`` (pandas) by file stem (``pairs``,
    ``judgments``, ``sts_test``, ``verify_test``, ``raters``, ``qc_exclusions``, …), ``info``
    (``release.json``) and the ECCV-shaped positive maps by file stem."""

    path: Path
    info: dict[str, Any]
    tables: dict[str, pa.Table]
    maps: dict[str, dict[str, list[Any]]] = field(default_factory=dict)

    @cached_property
    def frames(self) -> dict[str, pd.DataFrame]:
        return {name: table.to_pandas() for name, table in self.tables.items()}

    @property
    def version(self) -> str:
        return str(self.info["version"])

    @property
    def simulated(self) -> bool:
        return bool(self.info["simulated"])


def is_release(folder: str | Path) -> bool:
    return (Path(folder) / INFO).is_file() and (Path(folder) / DATA / "pairs.parquet").is_file()


def load_release(path: str | Path) -> Release:
    """Every Parquet table of ``<path>/data`` (CSV files are the same rows in CxC's shape; Parquet
    keeps types), the JSON positive maps, and ``release.json``."""
    root = Path(path)
    if not is_release(root):
        raise InputError(f"{root} is not a crisscross release folder (no {INFO} and {DATA}/pairs.parquet)")
    info = json.loads((root / INFO).read_text(encoding="utf-8"))
    tables = {p.stem: pq.read_table(p) for p in sorted((root / DATA).glob("*.parquet"))}
    maps = {}
    for p in sorted((root / DATA).glob("*_to_*.json")):
        maps[PurePosixPath(p.name).stem] = json.loads(p.read_text(encoding="utf-8"))
    return Release(root, info, tables, maps)
