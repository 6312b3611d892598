"""Build a release folder: the tables, the card, Croissant metadata, checksums, version and changelog.

The release is whole-table work — joins across rounds, a diff against the previous release,
checksums of finished files — and, unlike the other whole-table stages (tasks, annotate,
aggregate: one element of their composite, so they run where the runner runs them), it runs in
the launching process, as plain pandas / pyarrow: it holds the pseudonym key, which must never be
shipped to workers, and it publishes a persisted DVC output.  The request and plan are in
:mod:`~crisscross.release.request`, what ``release.json`` records in
:mod:`~crisscross.release.provenance`, the Croissant assembly in :mod:`~crisscross.release.croissant`
and the Karpathy merge in :mod:`~crisscross.release.merge`.  Its output is built in a staging
folder (:func:`crisscross.core.io.staged_directory`), checked with ``verify`` and
``mlcroissant``, and swapped in only then: a crash leaves the previous release intact.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from crisscross.core import io
from crisscross.core.errors import InputError, ParamError
from crisscross.formats.cxc import CXC_FILES, cxc_csv
from crisscross.formats.eccv import ECCV_FILES
from crisscross.formats.manifest import (
    ATTRIBUTION,
    CARD,
    CHANGELOG,
    CROISSANT,
    DATA,
    INFO,
    MERGED,
    SUMS,
    is_release,
    release_files,
    sums_text,
    verify,
)
from crisscross.formats.verify import RELEASE_COLUMNS, verify_csv
from crisscross.release import card, croissant, hub, labels, merge
from crisscross.release.contents import Contents, collect, cxc_rows, no_rounds, verify_maps
from crisscross.release.load import Release, load_release
from crisscross.release.parts import PARTS, Part, read_parts, units, write_part
from crisscross.release.provenance import metadata_fingerprint, release_date, release_info
from crisscross.release.pseudonyms import load_salt
from crisscross.release.request import Plan, ReleaseRequest, release_name
from crisscross.release.versions import SIMULATED_LABEL, ReleaseDiff, Version, changelog_entry, choose_version, diff_pairs, diff_tables
from crisscross.tasktypes.verify import VERIFY

POSITIVES_REQUIRED = tuple(ECCV_FILES.values())
POSITIVES_OPTIONAL = ("positives.parquet", "bias_audit.json")


def read_contents(request: ReleaseRequest) -> tuple[Contents, tuple[Part, ...]]:
    """The rounds' tables and the parts; a release needs at least one of them."""
    unknown = sorted(set(request.parts) - set(PARTS.names()))
    if unknown:
        raise ParamError(f"unknown release part {unknown[0]!r}; known: {', '.join(PARTS.names())}")
    if not request.rounds and not request.parts:
        raise ParamError(
            "nothing to release: give --rated (rated rounds), --bison (a bison --verified output), --entities (a boxes output) "
            "or --machine-labels (a triage output)"
        )
    if request.rounds and request.items is None:
        raise ParamError("--rated needs --items (the ingest output the rounds were built from)")
    salt = load_salt(request.settings.salt_env, request.settings.salt_file, str(request.out))
    contents = collect(request.rounds, request.items, salt) if request.rounds and request.items else no_rounds()
    return contents, read_parts(request.parts, salt, {"entities_source": request.settings.entities_source})


def plan(request: ReleaseRequest) -> Plan:
    contents, parts = read_contents(request)
    labels.kept_apart(contents, parts)
    simulated = contents.simulated or any(p.simulated for p in parts)  # Plan.simulated, needed before the plan exists
    if simulated and not request.simulated:
        raise ParamError("the judgments are SIMULATED: pass --simulated to release them (the version is then labelled -simulated)")
    if request.simulated and not simulated:
        raise ParamError("--simulated given but no judgment is simulated: leave the flag out for a release of people's judgments")
    if simulated and SIMULATED_LABEL not in request.out.name.lower():
        raise ParamError(
            f"a simulated release must be named so: put 'simulated' in the output folder name (e.g. {request.out.parent / (request.out.name + '-simulated')})"
        )
    diff, previous, changelog = None, None, ""
    if request.previous is not None:
        if is_release(request.previous):
            before = load_release(request.previous)
            diff = release_diff(before, contents.pairs, part_units(parts), metadata_fingerprint(request))
            previous = Version.parse(before.version)
            changelog = (request.previous / CHANGELOG).read_text(encoding="utf-8") if (request.previous / CHANGELOG).is_file() else ""
        elif request.previous.resolve() != request.out.resolve() or request.previous.exists():
            raise InputError(f"--previous {request.previous} is not a release folder (no {INFO} and {SUMS})")
    version = choose_version(request.version, previous, diff, simulated=simulated)
    return Plan(contents, version, release_date(request.date), diff, previous, changelog, parts)


def part_units(parts: Sequence[Part]) -> dict[str, frozenset[tuple[str, ...]]]:
    return {k: v for p in parts for k, v in units(p.name, p.tables).items()}


def loaded_units(release: Release) -> dict[str, frozenset[tuple[str, ...]]]:
    """A loaded release's part units (the parts its ``release.json`` names)."""
    found: dict[str, frozenset[tuple[str, ...]]] = {}
    for name in sorted(release.info.get("parts") or {}):
        tables = {key.split("/", 1)[1]: frame for key, frame in release.frames.items() if key.startswith(f"{name}/")}
        found.update(units(name, tables))
    return found


def release_diff(
    before: Release, pairs: pd.DataFrame, after_units: Mapping[str, frozenset[tuple[str, ...]]], metadata: Mapping[str, Any]
) -> ReleaseDiff:
    """The diff of the new pairs and part units against a loaded release."""
    diff = diff_pairs(before.frames.get("pairs", no_rounds().pairs), pairs, before.info["metadata"], metadata)
    return ReleaseDiff(diff.types, diff.metadata_changed, diff_tables(loaded_units(before), after_units))


def build(request: ReleaseRequest) -> dict[str, Any]:
    """Write the release to ``request.out`` (atomically) and return its report.  Nothing changed
    against ``--previous`` (no pair, score or metadata): the previous release is the release, kept
    byte for byte (copied when ``--out`` is elsewhere), so a rebuild adds no empty changelog entry."""
    decided = plan(request)
    if decided.diff is not None and decided.diff.level == "none" and request.previous is not None:
        if request.previous.resolve() != request.out.resolve():
            with io.staged_directory(str(request.out)) as staging:
                shutil.copytree(request.previous, staging, dirs_exist_ok=True)
        info = json.loads((request.out / INFO).read_text(encoding="utf-8"))
        return {**info, "verified": verify(request.out), "level": "none", "reason": decided.diff.reason()}
    with io.staged_directory(str(request.out)) as staging:
        root = Path(staging)
        if request.rounds:
            write_data(root, request, decided.contents)
            for name, data in card.plots(decided.contents).items():
                _write(root / name, data)
        for part in decided.parts:
            write_part(root / DATA, part)
        if request.attribution is not None:
            _write(root / ATTRIBUTION, io.frame_csv_bytes(_attribution(request.attribution)))
        entry = changelog_entry(decided.version, decided.date, decided.diff, decided.previous_version)
        texts = _caption_texts(request.items) if request.items is not None else {}
        _write(root / CARD, card.render(decided.contents, _card_inputs(request, decided, root, entry, texts)).encode())
        _write(root / CROISSANT, croissant.release_croissant(root, request, decided))
        croissant.validate(root / CROISSANT, record_limit=1)
        info = release_info(root, request, decided)
        io.write_json(str(root / INFO), info)
        _write(root / CHANGELOG, _changelog(entry, decided).encode())
        _write(root / SUMS, sums_text(root).encode())
        checked = verify(root)
    return {
        **info,
        "verified": checked,
        "level": decided.diff.level if decided.diff else None,
        "reason": decided.diff.reason() if decided.diff else None,
    }


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    io.write_bytes(str(path), data)


def _parquet(path: Path, frame: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    io.write_parquet(str(path), pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False))


def write_data(root: Path, request: ReleaseRequest, contents: Contents) -> None:
    """The rounds' files under ``data/``."""
    data = root / DATA
    pairs = contents.pairs
    _parquet(data / "pairs.parquet", pairs)
    mode = request.settings.cxc_rows
    for split in contents.splits:
        for task, spec in CXC_FILES.items():
            rows = pairs[(pairs["task_type"] == task) & (pairs["split"] == split)]
            if rows.empty:
                continue
            _write(data / spec.name(split), cxc_csv(task, cxc_rows(contents, task, split, mode)))
            _parquet(data / f"{task.lower()}_{split}.parquet", rows)
        verified = pairs[(pairs["task_type"] == VERIFY.name) & (pairs["split"] == split)]
        if not verified.empty:
            _write(data / f"verify_{split}.csv", verify_csv(verified, "published_a", "published_b", RELEASE_COLUMNS))
            _parquet(data / f"verify_{split}.parquet", verified)
    verified_anywhere = pairs[pairs["task_type"] == VERIFY.name]
    if not verified_anywhere.empty:  # ECCV Caption's maps of verified positives
        image_to_caption, caption_to_image = verify_maps(pairs)
        io.write_json(str(data / "verify_image_to_caption.json"), image_to_caption)
        io.write_json(str(data / "verify_caption_to_image.json"), caption_to_image)
    if request.positives is not None:
        copy_positives(request.positives, data)
    _parquet(data / "judgments.parquet", contents.judgments)
    _write(data / "raters.csv", io.frame_csv_bytes(contents.raters))
    _parquet(data / "raters.parquet", contents.raters)
    exclusions = contents.raters[contents.raters["excluded"].astype(bool)][["round", "rater", "task_type", "judgments", "reasons"]]
    _write(data / "qc_exclusions.csv", io.frame_csv_bytes(exclusions))
    _parquet(data / "qc_exclusions.parquet", exclusions)
    merged = merge.karpathy_merge(data, request, contents)
    if merged is not None:
        _write(data / MERGED, (json.dumps(merged, sort_keys=True) + "\n").encode())


def copy_positives(folder: Path, data: Path) -> None:
    """The positives stage's ECCV-shaped maps (required), positives table and bias audit (when present)."""
    for name in POSITIVES_REQUIRED:
        if not (folder / name).is_file():
            raise InputError(f"no {folder / name}: run the positives stage first (or leave --positives out)")
    for name in (*POSITIVES_REQUIRED, *POSITIVES_OPTIONAL):
        if (folder / name).is_file():
            shutil.copyfile(folder / name, data / name)


def _attribution(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read the attribution file {path}: {error}") from error


def _image_licences(path: Path | None) -> dict[str, int]:
    if path is None:
        return {}
    frame = _attribution(path)
    column = next((c for c in frame.columns if "licen" in c.lower()), None)
    if column is None:
        raise InputError(f"{path}: no licence column (a column whose name contains 'licence' or 'license')")
    return {str(k): int(v) for k, v in frame.groupby(column).size().items()}


def _encoders(request: ReleaseRequest) -> tuple[tuple[str, str, str], ...]:
    if request.embeddings is None:
        embed = request.params.get("embed") or {}
        names = [("text", n) for n in embed.get("text_encoders", [])] + [("image", n) for n in embed.get("image_encoders", [])]
        return tuple((m, n, "not recorded (no --embeddings)") for m, n in names)
    found = set()
    for path in sorted(request.embeddings.rglob("meta.json")):
        meta = json.loads(path.read_text(encoding="utf-8"))
        found.add((str(meta.get("modality", "")), str(meta.get("encoder", "")), str(meta.get("version", ""))))
    return tuple(sorted(found))


def _caption_texts(items: Path) -> dict[str, str]:
    captions = pd.read_parquet(items / "captions.parquet", columns=["caption_id", "text"])
    return dict(zip(captions["caption_id"], captions["text"], strict=True))


FILE_NOTES = {
    "pairs.parquet": "every rated pair of every round: canonical and published ids, split, sampling method, score or label, n, mean, std, positive",
    "judgments.parquet": "every judgment: pseudonymous rater, score or answer, seconds, batch, source, status (kept, excluded-rater, gold)",
    "raters.csv": "rater statistics per round and task type (gold accuracy, leave-one-out correlation, median seconds, straight-lining), excluded, reasons",
    "raters.parquet": "the same as raters.csv",
    "qc_exclusions.csv": "the (rater, task type) pairs quality control excluded, with the rules they failed",
    "qc_exclusions.parquet": "the same as qc_exclusions.csv",
    "verify_image_to_caption.json": "ECCV-shaped map: image id → captions people verified as matching",
    "verify_caption_to_image.json": "ECCV-shaped map: caption id → images people verified as matching",
    "eccv_image_to_caption.json": "ECCV-shaped positives (verified + original + CxC) from the positives stage",
    "eccv_caption_to_image.json": "ECCV-shaped positives (verified + original + CxC) from the positives stage",
    "positives.parquet": "the positives stage's table: image_id, caption_id, source",
    "bias_audit.json": "the positives stage's bias audit",
    MERGED: "Karpathy's dataset_coco.json with CxC's cxc_scores attached, as CxC's merge script writes it",
}


def _describe(name: str) -> str:
    stem = Path(name).name
    if stem in FILE_NOTES:
        return FILE_NOTES[stem]
    kind, _, rest = Path(name).stem.partition("_")
    shape = (
        "CxC's CSV shape (published ids, agg_score, sampling_method)"
        if name.endswith(".csv") and kind.upper() in CXC_FILES
        else "all columns"
    )
    return f"{kind.upper()} pairs of the {rest} split, {shape}"


def _card_inputs(request: ReleaseRequest, decided: Plan, root: Path, entry: str, texts: Mapping[str, str]) -> card.CardInputs:
    s = request.settings
    data_files = [n for n in release_files(root) if n.startswith(f"{DATA}/")]
    files = {n: _describe(n) for n in data_files}
    files.update({n: text for n, text in card.PLOTS.items() if (root / n).is_file()})
    files.update(
        {
            CROISSANT: "Croissant metadata (with Responsible-AI fields)",
            INFO: "version, date, code version, build params, input hashes, row counts",
            CHANGELOG: "changes per version",
            SUMS: "SHA-256 of every file",
        }
    )
    if request.attribution is not None:
        files[ATTRIBUTION] = "per-image licence and attribution from the source"
    for part in decided.parts:
        files = {n: t for n, t in files.items() if not n.startswith(f"{DATA}/{part.name}/")}
        files.update({f"{DATA}/{part.name}/{n}": text for n, text in part.notes.items()})
    replication, machine = labels.obtained(decided.contents, decided.parts)
    return card.CardInputs(
        title=s.title,
        name=release_name(s.name, decided.simulated),
        version=str(decided.version),
        date=decided.date,
        description=s.description,
        licence=s.licence,
        licence_url=s.licence_url,
        citation=s.citation,
        url=s.url,
        limitations=s.limitations,
        encoders=_encoders(request),
        rules=dict((request.params.get("aggregate") or {}).get("rules") or {}),
        image_licences=_image_licences(request.attribution),
        attribution_file=request.attribution.name if request.attribution else "",
        files=files,
        examples=card.example_pairs(decided.contents, texts),
        changelog_entry=entry,
        simulated=decided.simulated,
        sections=[card.Section(p.title, p.card, [f"{p.name}/{t}" for t in sorted(p.tables)], p.citation) for p in decided.parts],
        replication=tuple(replication.values()),
        machine_labels=machine,
        front_matter=hub.front_matter(root),
    )


def _changelog(entry: str, decided: Plan) -> str:
    """The new entry above the previous release's entries."""
    earlier = decided.previous_changelog.split("\n", 2)[2] if decided.previous_changelog.startswith("# ") else decided.previous_changelog
    return f"# Changelog\n\n{entry}\n{earlier}".rstrip() + "\n"


def diff_releases(a: Path, b: Path) -> tuple[ReleaseDiff, str]:
    """``crisscross release diff A B``: the diff of B against A and its changelog text."""
    before, after = load_release(a), load_release(b)
    diff = release_diff(before, after.frames.get("pairs", no_rounds().pairs), loaded_units(after), after.info["metadata"])
    text = changelog_entry(Version.parse(after.version), after.info["date"], diff, Version.parse(before.version))
    return diff, text
