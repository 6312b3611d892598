"""What makes a release checkable: ``SHA256SUMS`` over every file, row counts in ``release.json``,
and :func:`verify`, which checks both and names the first file that does not match."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow.parquet as pq

from crisscross.core.errors import InputError

SUMS = "SHA256SUMS"
INFO = "release.json"
DATA = "data"
# the other files of a release folder beside data/
MERGED = "dataset_coco_cxc.json"  # the Karpathy-shaped document with CxC's scores
CHANGELOG = "CHANGELOG.md"
CARD = "README.md"
CROISSANT = "croissant.json"
ATTRIBUTION = "ATTRIBUTION.csv"
_SUM_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)", re.ASCII)
_CHUNK = 1 << 20


class ReleaseCheckError(InputError):
    """A release folder does not match its own checksums or counts; the message names the file."""


def is_release(folder: str | Path) -> bool:
    """A release folder: ``release.json`` and ``SHA256SUMS`` (a release of COCO-BISON or Flickr30k
    Entities alone has no ``pairs.parquet``)."""
    return (Path(folder) / INFO).is_file() and (Path(folder) / SUMS).is_file()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def release_files(folder: Path) -> list[str]:
    """Every file of a release folder, relative POSIX paths sorted, ``SHA256SUMS`` left out."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.relative_to(folder).as_posix() != SUMS)


def sums_text(folder: Path) -> str:
    """``sha256sum``-compatible lines (``sha256sum -c SHA256SUMS`` checks them too)."""
    return "".join(f"{file_sha256(folder / name)}  {name}\n" for name in release_files(folder))


def tree_sha256(folder: Path) -> str:
    """One hash of a folder's files and their relative paths (input fingerprints without DVC)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{file_sha256(path)}  {path.relative_to(folder).as_posix()}\n".encode())
    return digest.hexdigest()


def _csv_rows(path: Path) -> int:
    with path.open(newline="", encoding="utf-8") as handle:
        return max(sum(1 for _ in csv.reader(handle)) - 1, 0)


def _parquet_rows(path: Path) -> int:
    return pq.ParquetFile(path).metadata.num_rows


def _json_entries(path: Path) -> int:
    value = json.loads(path.read_text(encoding="utf-8"))
    return len(value) if isinstance(value, (dict, list)) else 1


ROW_COUNTERS: dict[str, Callable[[Path], int]] = {".csv": _csv_rows, ".parquet": _parquet_rows, ".json": _json_entries}


def data_counts(folder: Path) -> dict[str, int]:
    """Rows (CSV, Parquet) or top-level entries (JSON) of every data file: what ``verify`` re-counts."""
    counts = {}
    for name in release_files(folder):
        path = PurePosixPath(name)
        if path.parts[0] == DATA and path.suffix in ROW_COUNTERS:
            counts[name] = ROW_COUNTERS[path.suffix](folder / name)
    return counts


def parse_sums(text: str, where: str) -> dict[str, str]:
    """``SHA256SUMS`` → {relative path: hex}; a path that is absolute or climbs out is refused."""
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = _SUM_LINE.fullmatch(line)
        if not match:
            raise ReleaseCheckError(f"{where}:{number}: not a '<sha256>  <file>' line")
        digest, name = match.groups()
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or "\\" in name or name in sums:
            raise ReleaseCheckError(f"{where}:{number}: file name {name!r} is absolute, climbs out of the release or repeats")
        sums[name] = digest
    return sums


def verify(folder: str | Path) -> dict[str, Any]:
    """Check a release folder: every file listed in ``SHA256SUMS`` with a matching hash, no file
    unlisted, and the row counts ``release.json`` records.  Returns a summary; any mismatch raises
    :class:`ReleaseCheckError` naming the file."""
    root = Path(folder)
    if not (root / SUMS).is_file():
        raise ReleaseCheckError(f"{root} is not a release folder: it has no {SUMS}")
    sums = parse_sums((root / SUMS).read_text(encoding="utf-8"), str(root / SUMS))
    present = release_files(root)
    unlisted = sorted(set(present) - set(sums))
    if unlisted:
        raise ReleaseCheckError(f"{root / unlisted[0]}: not listed in {SUMS} ({len(unlisted)} unlisted file(s))")
    for name, digest in sums.items():
        path = root / name
        if not path.is_file():
            raise ReleaseCheckError(f"{path}: listed in {SUMS} but missing")
        if file_sha256(path) != digest:
            raise ReleaseCheckError(f"{path}: sha256 does not match {SUMS} (the file was changed after release)")
    info = json.loads((root / INFO).read_text(encoding="utf-8"))
    expected: Mapping[str, int] = info.get("counts", {})
    found = data_counts(root)
    for name in sorted(set(expected) | set(found)):
        if expected.get(name) != found.get(name):
            raise ReleaseCheckError(f"{root / name}: {found.get(name)} rows, {INFO} says {expected.get(name)}")
    return {
        "name": info.get("name"),
        "version": info.get("version"),
        "files": len(sums),
        "bytes": sum((root / n).stat().st_size for n in sums),
        "rows": sum(found.values()),
    }
