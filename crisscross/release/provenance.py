"""Where a release came from, as ``release.json`` records it: the code's hash, the inputs' hashes
(their own and their ``dvc.lock`` md5), the params, the date, the counts and the replication
each task type's labels had.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.util
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crisscross import __version__
from crisscross.core.errors import ParamError
from crisscross.formats.dvclock import recorded_outs
from crisscross.formats.manifest import (
    data_counts,
    file_sha256,
    tree_sha256,
)
from crisscross.release import card, hub, labels
from crisscross.release.request import Plan, ReleaseRequest, release_name


def release_date(given: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``given`` (YYYY-MM-DD), else ``$SOURCE_DATE_EPOCH``, else today in UTC."""
    environ = os.environ if environ is None else environ
    if given:
        try:
            return datetime.date.fromisoformat(given).isoformat()
        except ValueError:
            raise ParamError(f"release date {given!r} is not YYYY-MM-DD") from None
    epoch = environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        try:
            return datetime.datetime.fromtimestamp(int(epoch), datetime.UTC).date().isoformat()
        except ValueError:
            raise ParamError(f"SOURCE_DATE_EPOCH {epoch!r} is not a whole number of seconds") from None
    return datetime.datetime.now(datetime.UTC).date().isoformat()


def code_version() -> str:
    """``crisscross <version> (code <sha256 of its Python sources>)``: the code's content, not a git
    commit, so the same code gives the same release bytes at any commit (a commit cannot name
    itself in the ``dvc.lock`` it carries) and a consumer can still tell builds apart."""
    commands = importlib.util.find_spec("crisscross.pipelines")  # found, not imported: only its files are read
    assert commands is not None and commands.submodule_search_locations
    digest = hashlib.sha256()
    for root in (Path(__file__).resolve().parents[1], Path(next(iter(commands.submodule_search_locations))).resolve()):
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{root.name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return f"crisscross {__version__} (code {digest.hexdigest()[:12]})"


def lock_hashes(lock: Path | None) -> dict[str, str]:
    """Output path → md5 of every stage output recorded in ``dvc.lock`` (paths relative to its folder)."""
    if lock is None or not lock.is_file():
        return {}
    return {path: out.get("md5", "") for path, out in recorded_outs(lock).items()}


def input_hashes(request: ReleaseRequest) -> list[dict[str, Any]]:
    """Each input folder or file as given, its own sha256 (of the tree) and its md5 in ``dvc.lock``."""
    named = [(f"round {r.number} rated", r.rated) for r in request.rounds]
    named += [(f"round {r.number} judgments", r.judgments) for r in request.rounds if r.judgments]
    named += [(name, path) for name, path in sorted(request.parts.items())]
    named += [
        (role, path)
        for role, path in (
            ("items", request.items),
            ("positives", request.positives),
            ("karpathy", request.karpathy),
            ("embeddings", request.embeddings),
            ("attribution", request.attribution),
        )
        if path
    ]
    recorded = lock_hashes(request.lock)
    base = request.lock.resolve().parent if request.lock else Path.cwd()
    rows = []
    for role, path in named:
        key = os.path.normpath(os.path.relpath(path.resolve(), base))
        digest = tree_sha256(path) if path.is_dir() else file_sha256(path)
        rows.append({"role": role, "path": str(path), "sha256": digest, "dvc_md5": recorded.get(key)})
    return rows


def metadata_fingerprint(request: ReleaseRequest) -> dict[str, Any]:
    """Descriptive settings, the build params (without the release's own version, date, previous)
    and what the release declares for loaders (``hub.LOADERS``)."""
    params = {k: v for k, v in request.params.items() if k != "release"}
    return {
        **request.settings.metadata(),
        "build_params": json.loads(json.dumps(params, sort_keys=True, default=str)),
        "loaders": hub.LOADERS,
    }


def release_info(root: Path, request: ReleaseRequest, decided: Plan) -> dict[str, Any]:
    contents = decided.contents
    return {
        "name": release_name(request.settings.name, decided.simulated),
        "version": str(decided.version),
        "date": decided.date,
        "simulated": decided.simulated,
        "code_version": code_version(),
        "metadata": metadata_fingerprint(request),
        "params": json.loads(json.dumps(dict(request.params), sort_keys=True, default=str)),
        "inputs": input_hashes(request),
        "previous": str(decided.previous_version) if decided.previous_version else None,
        "bump": decided.diff.level if decided.diff else None,
        "summary": card.summary(contents),
        "replication": labels.replication(contents),
        "parts": {p.name: dict(p.counts) for p in decided.parts},
        "counts": data_counts(root),
    }
