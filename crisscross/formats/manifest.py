"""What makes a release checkable: ``SHA256SUMS`` over every file, row counts in ``release.json``,
and :func:`verify`, which checks both and, given an :class:`~crisscross.formats.dvclock.Anchor`
(a hash recorded outside the release), the folder's DVC directory hash, and names every problem in
one line."""

from __future__ import annotations

import csv
import errno
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from crisscross.core import io
from crisscross.core.errors import InputError, one_line
from crisscross.formats.dvclock import Anchor, dir_md5

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
_SHOWN = 5  # problems a failed verify names before it counts the rest
FOLDER = io.file_kind(stat.S_IFDIR)
T = TypeVar("T")


class ReleaseCheckError(InputError):
    """A release folder does not match its own checksums or counts; the message names the file."""


def is_release(folder: str | Path) -> bool:
    """A release folder: ``release.json`` and ``SHA256SUMS`` (a release of COCO-BISON or Flickr30k
    Entities alone has no ``pairs.parquet``)."""
    return (Path(folder) / INFO).is_file() and (Path(folder) / SUMS).is_file()


def _digests(handle: IO[bytes], *algorithms: str) -> list[str]:
    hashes = [hashlib.new(name) for name in algorithms]
    while chunk := handle.read(_CHUNK):
        for digest in hashes:
            digest.update(chunk)
    return [digest.hexdigest() for digest in hashes]


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return _digests(handle, "sha256")[0]


def _shown(path: Path | str) -> str:
    """A path as a message shows it: quoted when it holds a line break or another control
    character, so a file's name can neither split the one-line error nor drive the terminal."""
    text = str(path)
    return text if text.isprintable() else ascii(text)


@dataclass(frozen=True)
class Entries:
    """What a folder holds, not following symlinks: its regular files (relative POSIX paths,
    sorted) and everything else (folders, symlinks, FIFOs, sockets, devices) with what it is."""

    files: list[str]
    others: dict[str, str]


def _kind(entry: os.DirEntry[str], root: Path) -> str:
    if entry.is_symlink():
        target = os.readlink(entry.path)
        leaving = not Path(os.path.realpath(entry.path)).is_relative_to(os.path.realpath(root))
        return f"a symlink to {_shown(target)}" + (", leaving the release" if leaving else "")
    return io.file_kind(entry.stat(follow_symlinks=False).st_mode)


def folder_entries(folder: Path) -> Entries:
    """Every entry under ``folder``; a sub-folder that cannot be listed is one line naming it."""
    files: list[str] = []
    others: dict[str, str] = {}
    pending = [""]
    while pending:
        prefix = pending.pop()
        try:
            with os.scandir(folder / prefix) as listing:
                for entry in listing:
                    name = prefix + entry.name
                    if entry.is_file(follow_symlinks=False):
                        files.append(name)
                    else:
                        others[name] = _kind(entry, folder)
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(name + "/")
        except OSError as error:
            raise ReleaseCheckError(f"{_shown(folder / prefix)}: cannot be listed ({error.strerror})") from None
    return Entries(sorted(files), dict(sorted(others.items())))


def release_files(folder: Path) -> list[str]:
    """Every regular file of a release folder, relative POSIX paths sorted, ``SHA256SUMS`` left out."""
    return [name for name in folder_entries(folder).files if name != SUMS]


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


def _count(path: Path) -> int:
    try:
        return ROW_COUNTERS[path.suffix](path)
    except (OSError, ValueError, RecursionError, csv.Error, pa.ArrowException) as error:
        raise ReleaseCheckError(f"{_shown(path)}: its rows cannot be counted ({_shown(one_line(error))})") from None


def data_counts(folder: Path) -> dict[str, int]:
    """Rows (CSV, Parquet) or top-level entries (JSON) of every data file: what ``verify`` re-counts;
    a file that cannot be counted is one line naming it."""
    counts = {}
    for name in release_files(folder):
        path = PurePosixPath(name)
        if path.parts[0] == DATA and path.suffix in ROW_COUNTERS:
            counts[name] = _count(folder / name)
    return counts


def parse_sums(text: str, where: str) -> dict[str, str]:
    """``SHA256SUMS`` → {relative path: hex}; a path that is not a plain one inside the release
    (absolute, with ``..``, ``.``, ``//``, a trailing ``/`` or a backslash) or that repeats is refused."""
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = _SUM_LINE.fullmatch(line)
        if not match:
            raise ReleaseCheckError(f"{where}:{number}: not a '<sha256>  <file>' line")
        digest, name = match.groups()
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or "\\" in name or name != path.as_posix() or not path.parts:
            raise ReleaseCheckError(f"{where}:{number}: file name {name!r} is absolute, climbs out of the release or is not a plain path")
        if name in sums:
            raise ReleaseCheckError(f"{where}:{number}: file name {name!r} repeats")
        sums[name] = digest
    return sums


def _read_regular(path: Path, use: Callable[[IO[bytes]], T]) -> T:
    """``use`` applied to ``path`` opened for reading, if it is a regular file (:func:`io.open_input`,
    following no symlink), so verify never leaves the folder nor blocks; anything else, or a read
    that fails, is one line naming the file."""
    try:
        with io.open_input(str(path), follow_symlinks=False) as handle:
            return use(handle)
    except io.NotARegularFileError:
        raise ReleaseCheckError(f"{_shown(path)}: not a regular file") from None
    except OSError as error:
        raise ReleaseCheckError(
            f"{_shown(path)}: cannot be read ({'a symlink' if error.errno == errno.ELOOP else error.strerror})"
        ) from None


def _json_object(path: Path) -> dict[str, Any]:
    value = io.json_document(_read_regular(path, lambda handle: handle.read()), _shown(path), ReleaseCheckError)
    if not isinstance(value, dict):
        raise ReleaseCheckError(f"{_shown(path)}: not a JSON object")
    return value


def _info(path: Path) -> dict[str, Any]:
    """``release.json`` with the fields verify reads checked: a name and version, counts by file."""
    info = _json_object(path)
    counts = info.get("counts", {})
    if not (isinstance(info.get("name"), str) and isinstance(info.get("version"), str)):
        raise ReleaseCheckError(f"{_shown(path)}: 'name' and 'version' are not both text")
    if not (isinstance(counts, dict) and all(isinstance(n, int) and not isinstance(n, bool) for n in counts.values())):
        raise ReleaseCheckError(f"{_shown(path)}: 'counts' is not a map of file → row count")
    return info


# the release's own JSON documents verify reads, each with what it checks
_DOCUMENTS: dict[str, Callable[[Path], dict[str, Any]]] = {INFO: _info, CROISSANT: _json_object}


def _listing_problems(root: Path, sums: Mapping[str, str], entries: Entries) -> tuple[list[str], dict[str, str]]:
    """What is wrong with the folder's files against ``SHA256SUMS``, and the md5 of every regular
    file (DVC's directory hash is made of them): one read per file for both hashes."""
    problems: dict[str, str] = {}
    md5s: dict[str, str] = {}
    for name in entries.files:
        try:
            sha256, md5s[name] = _read_regular(root / name, lambda handle: _digests(handle, "sha256", "md5"))
        except ReleaseCheckError as error:
            problems[name] = str(error)
            continue
        if name in sums and sums[name] != sha256:
            problems[name] = f"{_shown(root / name)}: sha256 does not match {SUMS} (the file was changed after release)"
        elif name not in sums and name != SUMS:
            problems[name] = f"{_shown(root / name)}: not listed in {SUMS}"
    for name in sums.keys() - set(entries.files):
        what = f"is {entries.others[name]}" if name in entries.others else "missing"
        problems[name] = f"{_shown(root / name)}: listed in {SUMS} but {what}"
    for name, kind in entries.others.items():
        if name not in sums and kind != FOLDER:
            problems[name] = f"{_shown(root / name)}: {kind}; a release holds regular files only"
    return [problems[name] for name in sorted(problems)], md5s


def verify(folder: str | Path, anchor: Anchor | None = None) -> dict[str, Any]:
    """Check a release folder: regular files only, each listed in ``SHA256SUMS`` with a matching
    hash, ``release.json`` and ``croissant.json`` JSON objects, the row counts ``release.json``
    records and, given an ``anchor``, the folder's DVC directory hash.  Returns a summary (with the
    folder's ``md5`` and the record it matched, ``anchor``); anything wrong raises :class:`ReleaseCheckError`, one line naming each problem."""
    root = Path(folder)
    if not root.is_dir():
        raise ReleaseCheckError(f"{_shown(root)} is not a release folder: no such folder")
    entries = folder_entries(root)
    absent = [name for name in (SUMS, INFO) if name not in entries.files and name not in entries.others]
    if absent:
        raise ReleaseCheckError(f"{_shown(root)} is not a release folder: it has no {' and no '.join(absent)}")
    try:
        text = _read_regular(root / SUMS, lambda handle: handle.read()).decode("utf-8")
    except UnicodeDecodeError:
        raise ReleaseCheckError(f"{_shown(root / SUMS)}: not UTF-8 text") from None
    sums = parse_sums(text, _shown(root / SUMS))
    problems, md5s = _listing_problems(root, sums, entries)
    documents: dict[str, dict[str, Any]] = {}
    for name, read in _DOCUMENTS.items():
        try:
            documents.update({name: read(root / name)} if name in md5s else {})  # a regular file, read once already
        except ReleaseCheckError as error:
            problems.append(str(error))
    info = documents.get(INFO, {})
    found: dict[str, int] = {}
    if not problems:  # counts of files that match their checksums, against a release.json that does
        try:
            found = data_counts(root)
        except ReleaseCheckError as error:
            problems.append(str(error))
        else:
            expected: Mapping[str, int] = info.get("counts", {})
            problems += [
                f"{_shown(root / name)}: {found.get(name)} rows, {INFO} says {expected.get(name)}"
                for name in sorted(set(expected) | set(found))
                if expected.get(name) != found.get(name)
            ]
    md5 = dir_md5(md5s)
    matched = anchor.matched(md5) if anchor is not None else None
    if anchor is not None and matched is None:
        problems.append(f"{anchor.mismatch(md5)} (a file was changed, added or removed since, or it was rebuilt without `dvc repro`)")
    if problems:
        more = f"; and {len(problems) - _SHOWN} more" if len(problems) > _SHOWN else ""
        raise ReleaseCheckError(f"{_shown(root)} fails verify, {len(problems)} problem(s): " + "; ".join(problems[:_SHOWN]) + more)
    return {
        "name": info["name"],
        "version": info["version"],
        "files": len(sums),
        "bytes": sum((root / n).stat().st_size for n in sums),
        "rows": sum(found.values()),
        "md5": md5,
        "anchor": matched,
    }
