"""``crisscross release``: the rated rounds → a versioned, checksummed, documented dataset release.

``crisscross release --rated A,B,C --items DIR --out DIR [...]`` builds one
(:mod:`crisscross.release.build`), ``--bison DIR``, ``--entities DIR`` and ``--machine-labels DIR`` add
COCO-BISON triples, Flickr30k Entities boxes and a triage's machine labels, each under ``data/<part>/``
(with or without rated rounds); ``crisscross release verify DIR`` checks a release's checksums
and counts, and its directory hash against the one ``dvc.lock`` records (``--lock``, ``--md5``, or found
beside it); ``crisscross release diff A B`` prints what changed from A to B and the bump it needs.
The release is whole-table work (joins, a diff, checksums), so no Beam pipeline runs here.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

from crisscross.core.errors import ParamError
from crisscross.formats.dvclock import chosen_anchor
from crisscross.formats.manifest import verify
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import configure_logging, load_params, read_params
from crisscross.release.build import build, diff_releases
from crisscross.release.parts import BISON, ENTITIES, MACHINE_LABELS
from crisscross.release.request import ReleaseRequest, ReleaseSettings, rounds_from

STAGE = Stage(
    name="release",
    order=230,
    description="rated rounds → versioned release (CxC files, card, Croissant, checksums); release verify DIR, release diff A B",
)
# what an unanchored verify passes without a word: it says so, and --anchored makes it fail
UNANCHORED = "a file edited together with SHA256SUMS would pass: --lock or --md5 anchor it"
STALE = "--anchored makes this fail"


def _paths(text: str | None) -> list[str]:
    return [p for p in (text or "").split(",") if p]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"crisscross {STAGE.name}", description=STAGE.description)
    p.add_argument(
        "--rated", default=None, help="aggregate outputs, one per round, comma-joined (build/rated,build/sits/rated,build/verify/rated)"
    )
    p.add_argument("--judgments", default=None, help="annotate outputs in the same order, comma-joined: adds gold and excluded judgments")
    p.add_argument("--items", default=None, help="the ingest output (splits, caption text); needed with --rated")
    p.add_argument("--bison", default=None, help="a `bison --verified` output: COCO-BISON triples under data/bison/")
    p.add_argument(
        "--entities", default=None, help="a `boxes` output: Flickr30k Entities Sentences/, Annotations/ and tables under data/entities/"
    )
    p.add_argument(
        "--machine-labels",
        default=None,
        help="a `triage` output: the machine's labels with their provenance under data/machine_labels/, apart from people's",
    )
    p.add_argument("--out", required=True, help="release folder (replaced atomically on success)")
    p.add_argument("--params", default=None, help="params YAML; its 'release' section is read and the whole file is recorded")
    p.add_argument(
        "--version", default=None, help="MAJOR.MINOR.PATCH, or 'auto' for the smallest the diff allows (default: release.version)"
    )
    p.add_argument("--date", default=None, help="release date YYYY-MM-DD (default: release.date, then $SOURCE_DATE_EPOCH, then today)")
    p.add_argument("--previous", default=None, help="the release this one follows (default: release.previous); may be --out itself")
    p.add_argument("--simulated", action="store_true", help="required to release simulated judgments (labelled -simulated)")
    p.add_argument("--positives", default=None, help="the positives stage output (ECCV-shaped maps, bias audit)")
    p.add_argument("--karpathy", default=None, help="Karpathy dataset_coco.json for the CxC merge (default: built from --items)")
    p.add_argument("--embeddings", default=None, help="the embed stage output, for encoder names and versions on the card")
    p.add_argument("--attribution", default=None, help="per-image licence CSV of the source (e.g. data/demo/ATTRIBUTION.csv)")
    p.add_argument("--lock", default="dvc.lock", help="dvc.lock whose output hashes are recorded (skipped when absent)")
    return p


def main(argv: list[str]) -> dict[str, Any]:
    if argv[:1] == ["verify"]:
        return verify_command(argv[1:])
    if argv[:1] == ["diff"]:
        return diff_command(argv[1:])
    configure_logging()
    started = time.perf_counter()
    flags = parser().parse_args(argv)
    settings, _ = load_params(flags.params, STAGE.name, ReleaseSettings)
    optional = lambda value: Path(value) if value else None
    previous = flags.previous or settings.previous
    request = ReleaseRequest(
        rounds=rounds_from(_paths(flags.rated), _paths(flags.judgments)),
        items=optional(flags.items),
        out=Path(flags.out.rstrip("/")),
        settings=settings,
        params=read_params(flags.params),
        version=flags.version or settings.version,
        date=flags.date or settings.date,
        simulated=flags.simulated,
        previous=optional(previous),
        positives=optional(flags.positives),
        karpathy=optional(flags.karpathy),
        embeddings=optional(flags.embeddings),
        attribution=optional(flags.attribution),
        lock=optional(flags.lock),
        parts={
            name: Path(folder)
            for name, folder in ((BISON, flags.bison), (ENTITIES, flags.entities), (MACHINE_LABELS, flags.machine_labels))
            if folder
        },
    )
    report = build(request)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines = [
        f"{STAGE.name}: {report['name']} {report['version']} in {time.perf_counter() - started:.1f}s, peak RSS {peak:.0f} MiB → {request.out}"
    ]
    if report["previous"]:
        lines.append(f"  bump: {report['level']} against {report['previous']} ({report['reason']})")
    for kind, facts in report["summary"].items():
        lines.append(f"  {kind}: {facts['pairs']:,} pairs, {facts['positives']:,} positive")
    for name, counts in report.get("parts", {}).items():
        lines.append(f"  {name}: " + ", ".join(f"{v:,} {k}" for k, v in counts.items() if isinstance(v, int)))
    checked = report["verified"]
    lines.append(f"  verified: {checked['files']} files, {checked['bytes']:,} bytes, {checked['rows']:,} rows")
    if report["simulated"]:
        lines.append("  SIMULATED: these judgments come from simulated raters, not people")
    print("\n".join(lines), flush=True)
    return report


def verify_command(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        prog=f"crisscross {STAGE.name} verify",
        description="Check a release's SHA256SUMS, the counts in its release.json and, anchored outside the release, the "
        "directory hash DVC recorded for it: found in the dvc.lock of the DVC repository holding the folder, or given.",
    )
    p.add_argument("folder")
    p.add_argument(
        "--lock",
        default=None,
        help="a dvc.lock that records the release (e.g. `dvc get REPO dvc.lock --rev TAG`): its output at the folder's path, else of its name",
    )
    p.add_argument("--md5", default=None, help="the release's directory hash as dvc.lock records it (<32 hex>.dir)")
    p.add_argument("--anchored", action="store_true", help="fail unless the release is checked against a hash recorded outside it")
    flags = p.parse_args(argv)
    folder = Path(flags.folder)
    anchor = chosen_anchor(folder, lock=Path(flags.lock) if flags.lock else None, md5=flags.md5)
    if anchor is None and flags.anchored:
        raise ParamError(f"--anchored: no dvc.lock of a DVC repository holding {folder} records it; give --lock or --md5")
    # An anchor given (--lock, --md5) or demanded (--anchored) must match.  One found in the repository
    # may be stale (a release rebuilt by hand, or on a CPU whose kernels give other bytes): said, not failed.
    strict = flags.anchored or flags.lock is not None or flags.md5 is not None
    checked = verify(folder, anchor if strict else None)
    matched = anchor.matched(checked["md5"]) if anchor is not None else None
    if anchor is None:
        said = f"no anchor: checksums only ({UNANCHORED})"
    elif matched:
        said = f"{matched} ({checked['md5']})"
    else:
        said = f"but {anchor.mismatch(checked['md5'])}: rebuilt since `dvc repro` recorded it, or edited ({STALE})"
    print(
        f"{flags.folder}: {checked['name']} {checked['version']} OK — {checked['files']} files, {checked['bytes']:,} bytes, "
        f"{checked['rows']:,} rows; {said}"
    )
    return checked


def diff_command(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        prog=f"crisscross {STAGE.name} diff", description="What changed from release A to release B, and the version bump it needs."
    )
    p.add_argument("a")
    p.add_argument("b")
    flags = p.parse_args(argv)
    diff, text = diff_releases(Path(flags.a), Path(flags.b))
    sys.stdout.write(text)
    return {"level": diff.level, "reason": diff.reason()}
