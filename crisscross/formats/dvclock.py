"""``dvc.lock`` as a release's anchor: the outputs it records, DVC's directory hash, and which
recorded hash a release folder must have.

``SHA256SUMS`` sits inside the release, so a file edited together with its line there still
checks out.  DVC records every output's directory hash in ``dvc.lock``, which git keeps (and a
tag names), outside the folder: :func:`chosen_anchor` finds that hash, from the ``dvc.lock`` of
the DVC repository holding the folder (the builder), from a ``dvc.lock`` read from the tag (a
consumer's ``--lock``) or given as it is (``--md5``), and ``verify`` compares it with the folder's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from crisscross.core import io
from crisscross.core.errors import InputError, ParamError, one_line

LOCK = "dvc.lock"
DIR = ".dir"
_MD5_DIR = re.compile(r"[0-9a-f]{32}\.dir", re.ASCII)
# how far below a DVC repository's root its dvc.lock files are sought: the root's and workflows/<name>/dvc.lock
_DEPTH = 2
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML has it: the root dvc.lock is 60 kB


@dataclass(frozen=True)
class Anchor:
    """Directory hashes (``<md5>.dir``) recorded outside a release, each by what recorded it
    (``the hash dvc.lock records for releases/demo-simulated``), and where they were read: the
    folder must have one of them (one, found by its path or name, unless a lock read away from
    the release names neither)."""

    hashes: dict[str, str]
    where: str

    def matched(self, md5: str) -> str | None:
        """What verify says of a folder whose directory hash is ``md5``: which record it matches."""
        return next((f"matches {record}" for record, recorded in self.hashes.items() if recorded == md5), None)

    def mismatch(self, md5: str) -> str:
        if len(self.hashes) == 1:
            ((record, recorded),) = self.hashes.items()
            return f"its DVC directory hash is {md5}, not {recorded}, {record}"
        return f"its DVC directory hash {md5} is none of the {len(self.hashes)} directory hashes {self.where} records"


def dir_md5(md5s: Mapping[str, str]) -> str:
    """DVC's hash of a folder (``hash: md5`` in ``dvc.lock``) from the md5 of each file by its
    relative POSIX path: the md5 of the JSON list of ``{"md5", "relpath"}`` sorted by path, with
    ``.dir`` appended, as ``dvc_data``'s ``Tree.digest`` computes it."""
    entries = [{"md5": md5s[name], "relpath": name} for name in sorted(md5s)]
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode(), usedforsecurity=False).hexdigest() + DIR


def recorded_outs(lock: Path) -> dict[str, dict[str, Any]]:
    """Every stage output ``dvc.lock`` records, by its path (normalised, relative to the lock's
    folder); a file that is not a ``dvc.lock`` is one line naming it."""
    try:
        document = yaml.load(io.read_bytes(str(lock)).decode("utf-8"), Loader=_LOADER) or {}  # a FIFO is refused, never waited on
    except (OSError, UnicodeDecodeError, RecursionError, yaml.YAMLError) as error:
        raise InputError(f"{lock}: cannot be read as a dvc.lock ({one_line(error)})") from None
    stages = (document.get("stages") or {}) if isinstance(document, dict) else None
    if not isinstance(stages, dict) or not all(isinstance(s, dict) and isinstance(s.get("outs") or [], list) for s in stages.values()):
        raise InputError(f"{lock}: not a dvc.lock (no 'stages' map with 'outs' lists)")
    outs = [out for stage in stages.values() for out in stage.get("outs") or []]
    if not all(isinstance(out, dict) and isinstance(out.get("path"), str) for out in outs):
        raise InputError(f"{lock}: not a dvc.lock (an output without a 'path')")
    return {os.path.normpath(out["path"]): out for out in outs}


def _is_dir_hash(out: Mapping[str, Any]) -> bool:
    return out.get("hash") == "md5" and bool(_MD5_DIR.fullmatch(str(out.get("md5"))))


def anchor_in(lock: Path, folder: Path, *, by_name: bool, shown: str | None = None) -> Anchor | None:
    """The hash ``lock`` records for ``folder``: the output whose path is the folder; with
    ``by_name`` (a lock read away from the release, e.g. from a tag, the folder maybe renamed by
    ``dvc get -o``), else the outputs of the folder's name, else every directory output."""
    outs = recorded_outs(lock)
    shown = shown or str(lock)
    base, target = lock.resolve().parent, folder.resolve()
    chosen = [path for path in outs if (base / path).resolve() == target]
    if not chosen and by_name:
        chosen = [path for path in outs if Path(path).name == target.name] or [path for path, out in outs.items() if _is_dir_hash(out)]
    for path in chosen:
        if not _is_dir_hash(outs[path]):
            raise InputError(
                f"{lock}: {path} has no DVC 3 directory hash ('hash: md5' and 'md5: <32 hex>.dir'), so it cannot anchor a release"
            )
    return Anchor({f"the hash {shown} records for {path}": str(outs[path]["md5"]) for path in chosen}, shown) if chosen else None


def dvc_root(folder: Path) -> Path | None:
    """The DVC repository holding ``folder``: the nearest folder above it with a ``.dvc/``."""
    return next((p for p in folder.resolve().parents if (p / ".dvc").is_dir()), None)


def _subfolders(folder: Path) -> list[Path]:
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        return sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False) and not e.name.startswith("."))
    return []


def repo_locks(root: Path) -> list[Path]:
    """The ``dvc.lock`` files of a DVC repository: at its root and up to two folders below
    (``workflows/<name>/dvc.lock``), hidden folders skipped; regular files only."""
    levels = [[root]]
    for _ in range(_DEPTH):
        levels.append([child for folder in levels[-1] for child in _subfolders(folder)])
    return [folder / LOCK for level in levels for folder in level if (folder / LOCK).is_file()]


def find_anchor(folder: Path) -> Anchor | None:
    """The hash recorded for ``folder`` by a ``dvc.lock`` of the DVC repository holding it (the
    builder's case); None outside a DVC repository or when no lock lists the folder."""
    root = dvc_root(folder)
    for lock in repo_locks(root) if root else []:
        found = anchor_in(lock, folder, by_name=False, shown=os.path.relpath(lock))
        if found:
            return found
    return None


def chosen_anchor(folder: Path, *, lock: Path | None = None, md5: str | None = None) -> Anchor | None:
    """The anchor ``release verify`` checks ``folder`` against: ``md5`` as given, the hash
    ``lock`` records for the folder (see :func:`anchor_in`), or the one found by :func:`find_anchor`."""
    if lock is not None and md5 is not None:
        raise ParamError("give --lock or --md5, not both")
    if md5 is not None:
        value = md5 if md5.endswith(DIR) else md5 + DIR
        if not _MD5_DIR.fullmatch(value):
            raise ParamError(f"--md5 {md5!r} is not a DVC directory hash ('<32 hex>.dir', as dvc.lock records it)")
        return Anchor({"the hash given with --md5": value}, "--md5")
    if lock is not None:
        found = anchor_in(lock, folder, by_name=True)
        if found is None:
            raise InputError(f"{lock} records no directory output: it cannot anchor a release")
        return found
    return find_anchor(folder)
