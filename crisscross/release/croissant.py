"""``croissant.json``: the release described in MLCommons Croissant, written with ``mlcroissant``.

Every released file is a ``FileObject`` with its sha256 (``mlcroissant`` checks it when it loads
records); every Parquet table is also a ``RecordSet`` whose fields read its columns, typed as
its Arrow schema types them, so ``mlcroissant.Dataset("croissant.json").records("sts_test")`` yields
the rows of ``data/sts_test.parquet`` (a part's table under ``data/<part>/`` is ``<part>_<stem>``,
e.g. ``bison_triples``); so is a CSV with no Parquet copy (``ATTRIBUTION.csv``) and a CSV of another
shape than its Parquet file (CxC's ``sts_test.csv`` is ``sts_test_csv``), read as pandas types them;
folders of one file per image (Flickr30k Entities' Sentences and Annotations) are ``FileSet``s.  The Responsible-AI
fields say who rated (people or a simulated panel), with which instructions, on what platform and
with how many judgments per item; the description and the labels' record sets say how the labels
were obtained (:mod:`crisscross.release.labels`), machine labels apart.
"""

from __future__ import annotations

import csv
import datetime
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow.parquet as pq

from crisscross.campaign.triage import DECIDED_BY_MACHINE
from crisscross.core.errors import InputError
from crisscross.formats.manifest import (
    ATTRIBUTION,
    DATA,
    file_sha256,
    release_files,
)
from crisscross.formats.schema import SOURCE_PEOPLE, SOURCE_REPLAY, SOURCE_SIMULATED
from crisscross.release import labels
from crisscross.release.hub import DTYPES
from crisscross.release.request import Plan, ReleaseRequest, release_name
from crisscross.tasktypes import task_type

if TYPE_CHECKING:  # mlcroissant (0.5 s) loads when a release is described or checked, not with the command
    import mlcroissant as mlc

ENCODINGS = {
    ".csv": "text/csv",
    ".parquet": "application/x-parquet",
    ".json": "application/json",
    ".png": "image/png",
    ".md": "text/markdown",
}


@dataclass(frozen=True)
class CroissantInputs:
    name: str
    description: str
    version: str
    date: str
    licence_url: str
    citation: str
    url: str
    creator: str
    simulated: bool
    collection: str
    platform: str
    instructions: Sequence[str]
    raters_per_item: str
    agreement: Sequence[str]
    limitations: Sequence[str]
    biases: Sequence[str]
    keywords: Sequence[str] = ()
    machine_tools: Sequence[str] = ()  # rai:machineAnnotationTools, when a machine assigned labels
    descriptions: Mapping[str, str] = field(default_factory=dict)  # record set id → its description


def metadata(
    folder: Path, files: Sequence[str], inputs: CroissantInputs, file_sets: Mapping[str, tuple[str, str]] | None = None
) -> mlc.Metadata:
    """The release's Croissant metadata for ``files`` (relative paths) of ``folder``; ``file_sets``
    (folder → (file suffix, encoding)) are described as ``FileSet``s by a glob, not file by file
    (a Flickr30k Entities folder holds one file per image; ``SHA256SUMS`` lists each)."""
    import mlcroissant as mlc

    distribution: list[mlc.FileObject | mlc.FileSet] = [
        mlc.FileObject(
            id=name,
            name=name,
            content_url=name,
            encoding_formats=[ENCODINGS[PurePosixPath(name).suffix]],
            sha256=file_sha256(folder / name),
        )
        for name in files
    ]
    distribution += [
        mlc.FileSet(id=name, name=name, includes=[f"{name}/*.{suffix}"], encoding_formats=[encoding])
        for name, (suffix, encoding) in sorted((file_sets or {}).items())
    ]
    record_sets = [_record_set(folder, name, set_id, inputs.descriptions.get(set_id)) for name, set_id in _tables(folder, files)]
    published = datetime.datetime.fromisoformat(inputs.date)
    return mlc.Metadata(
        name=inputs.name,
        description=inputs.description,
        version=inputs.version,
        date_published=published,
        license=[inputs.licence_url],
        cite_as=inputs.citation,
        url=inputs.url,
        creators=[mlc.Organization(name=inputs.creator)],
        keywords=[
            "image-text similarity",
            "semantic textual similarity",
            "Crisscrossed Captions",
            "ECCV Caption",
            *inputs.keywords,
            *(["SIMULATED"] if inputs.simulated else []),
        ],
        distribution=distribution,
        record_sets=record_sets,
        data_collection=inputs.collection,
        data_collection_type=["Simulation"] if inputs.simulated else ["Crowdsourcing", "Human annotation"],
        data_annotation_protocol=list(inputs.instructions),
        data_annotation_platform=[inputs.platform],
        data_annotation_analysis=list(inputs.agreement),
        annotations_per_item=inputs.raters_per_item,
        machine_annotation_tools=list(inputs.machine_tools) or None,
        annotator_demographics=["Not collected."],
        personal_sensitive_information=[
            "Rater ids are pseudonyms (HMAC-SHA256 under a key kept outside the release; simulated raters under a public key); "
            "submission times are left out."
        ],
        data_limitations=list(inputs.limitations),
        data_biases=list(inputs.biases),
        data_use_cases=["Evaluating image-text, text-text and image-image retrieval and graded similarity (correlation) of models."],
        data_release_maintenance_plan="Semantic versions: patch for metadata, minor for added pairs or refined scores, major for removed pairs or flipped positives; every version is a git tag whose data DVC fetches.",
    )


def record_set_id(name: str) -> str:
    """``data/sts_test.csv`` → ``sts_test``, ``data/bison/triples.csv`` → ``bison_triples``."""
    parts = PurePosixPath(name).with_suffix("").parts
    return "_".join(parts[1:] if parts[0] == "data" and len(parts) > 1 else parts)


def _tables(folder: Path, files: Sequence[str]) -> list[tuple[str, str]]:
    """(file, record set id) of every table: each Parquet file; a CSV with no Parquet copy
    (``ATTRIBUTION.csv``); a CSV of its own shape beside its Parquet file, the CxC files'
    published ids and columns (``sts_test.csv`` → ``sts_test_csv``).  A CSV that is its Parquet
    file's copy, same columns, has no record set of its own: the rows are the Parquet's."""
    found = []
    for name in files:
        twin = str(PurePosixPath(name).with_suffix(".parquet"))
        if name.endswith(".parquet") or (name.endswith(".csv") and twin not in files):
            found.append((name, record_set_id(name)))
        elif name.endswith(".csv"):
            with (folder / name).open(newline="", encoding="utf-8") as handle:
                header = next(csv.reader(handle), [])
            if header != pq.read_schema(folder / twin).names:
                found.append((name, f"{record_set_id(name)}_csv"))
    return found


def _record_set(folder: Path, name: str, stem: str, description: str | None) -> mlc.RecordSet:
    """A table's record set: one field per column, of its Parquet file's Arrow type (64-bit floats
    and integers as such, so loaders keep every digit; a column with no values, Arrow's null type,
    is text: the release's optional columns are), or for a CSV the type pandas reads."""
    import mlcroissant as mlc

    if name.endswith(".csv"):
        kinds = {"f": mlc.DataType.FLOAT, "i": mlc.DataType.INTEGER, "u": mlc.DataType.INTEGER, "b": mlc.DataType.BOOL}  # numpy dtype kind
        frame = pd.read_csv(folder / name, keep_default_na=False, na_values=[""], dtype_backend="numpy_nullable")
        columns = [(column, kinds.get(frame[column].dtype.kind, mlc.DataType.TEXT)) for column in frame.columns]
    else:
        logical = [(column.name, DTYPES.get(str(column.type), "string")) for column in pq.read_schema(folder / name)]
        columns = [(column, mlc.DataType.TEXT if kind == "string" else getattr(mlc.DataType, kind.upper())) for column, kind in logical]
    fields = [
        mlc.Field(
            id=f"{stem}/{column}",
            name=column,
            data_types=[data_type],
            source=mlc.Source(file_object=name, extract=mlc.Extract(column=column)),
        )
        for column, data_type in columns
    ]
    return mlc.RecordSet(id=stem, name=stem, description=description, fields=fields)


def to_json(meta: mlc.Metadata) -> dict[str, Any]:
    """The JSON-LD; a metadata object ``mlcroissant`` finds invalid is refused with its first issue."""
    if meta.issues.errors:
        raise InputError(f"croissant.json would not validate: {sorted(meta.issues.errors)[0]}")
    return meta.to_json()


def validate(path: Path, record_limit: int | None = None) -> Mapping[str, int]:
    """Load ``croissant.json`` with ``mlcroissant`` and read each record set (checking sha256s):
    records per set, up to ``record_limit`` each."""
    import mlcroissant as mlc

    previous = logging.root.manager.disable
    logging.disable(logging.INFO)  # mlcroissant logs every file it opens at INFO on the root logger
    try:
        dataset = mlc.Dataset(jsonld=path)
        counts = {}
        for record_set in dataset.metadata.record_sets:
            n = 0
            for _ in dataset.records(record_set.id):
                n += 1
                if record_limit is not None and n >= record_limit:
                    break
            counts[record_set.id] = n
    finally:
        logging.disable(previous)
    return counts


PLATFORMS = {
    SOURCE_SIMULATED: "a simulated rater panel (crisscross annotate, source: simulate); no people rated",
    SOURCE_PEOPLE: "people's judgments imported from an annotation tool's export (crisscross annotate, source: import)",
    SOURCE_REPLAY: "judgments replayed from an earlier release (crisscross annotate, source: replay)",
    DECIDED_BY_MACHINE: "a calibrated machine (crisscross triage): labels beyond cuts certified on the raters' audit, kept apart in their own record set; no person assigned them",
}


def release_croissant(root: Path, request: ReleaseRequest, decided: Plan) -> bytes:
    """``croissant.json`` of a release folder: its metadata, files and record sets, from the request and plan."""
    s, contents, simulated = request.settings, decided.contents, decided.simulated
    kinds = sorted({k for facts in contents.facts.values() for k in facts})
    sources = sorted(set(contents.judgments["source"]) | {p.source for p in decided.parts})
    collection = [p.collection for p in decided.parts]
    if request.rounds:
        collection.insert(
            0,
            "Candidate pairs sampled by encoder similarity (Crisscrossed Captions) and machine annotators (ECCV Caption), rated per task type in batches with gold items.",
        )
    replication, machine = labels.obtained(contents, decided.parts)
    told = [
        "SIMULATED: the judgments come from a simulated rater panel, not people." if simulated else "",
        f"How the labels were obtained: {'; '.join(replication.values())}." if replication else "",
        machine,
    ]
    machine_part = labels.machine_part(decided.parts)
    descriptions = {  # the Parquet table's record set and, where it has one of its own shape, its CxC-shaped CSV's
        f"{kind.lower()}_{split}{csv_shape}": line
        for kind, line in replication.items()
        for split in contents.splits
        for csv_shape in ("", "_csv")
    }
    if machine_part is not None:  # a table's notes are its CSV's (the Parquet copy is "the same as" it)
        descriptions.update(
            {record_set_id(f"{DATA}/{machine_part.name}/{n}"): text for n, text in machine_part.notes.items() if n.endswith(".csv")}
        )
    inputs = CroissantInputs(
        name=release_name(s.name, simulated),
        description=" ".join(filter(None, [s.description, *told])),
        version=str(decided.version),
        date=decided.date,
        licence_url=s.licence_url,
        citation="\n".join([s.citation, *(p.citation for p in decided.parts if p.citation)]),
        url=s.url,
        creator=s.creator,
        simulated=simulated,
        collection=" ".join(collection),
        keywords=[p.title for p in decided.parts],
        platform="; ".join(PLATFORMS.get(x, x) for x in sources),
        instructions=[f"{k}: {task_type(k).title}. {task_type(k).instructions}" for k in kinds],
        raters_per_item="; ".join(replication.values()),
        agreement=[
            f"Krippendorff's alpha ({f['alpha_level']}) {k}: {f['alpha']}"
            for facts in contents.facts.values()
            for k, f in sorted(facts.items())
        ],
        limitations=list(s.limitations) + (["SIMULATED judgments, not people."] if simulated else []),
        biases=["See data/bias_audit.json."]
        if request.positives is not None and (request.positives / "bias_audit.json").is_file()
        else ["Not audited for this build."],
        machine_tools=[machine_part.collection] if machine_part is not None else [],
        descriptions=descriptions,
    )
    file_sets = {f"{DATA}/{p.name}/{folder}": spec for p in decided.parts for folder, spec in p.file_sets.items()}
    files = [
        n
        for n in release_files(root)
        if (n.startswith((f"{DATA}/", "plots/")) or n == ATTRIBUTION) and str(Path(n).parent.as_posix()) not in file_sets
    ]
    meta = metadata(root, files, inputs, file_sets)
    return (json.dumps(to_json(meta), indent=2, sort_keys=True, default=str) + "\n").encode()
