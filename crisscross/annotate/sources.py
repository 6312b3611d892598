"""Judgment sources: where a round's judgments come from, chosen by name (``annotate.source``).

``import``   judgment files people made (``--judgments`` files or folders, in ``annotate.format``),
             or the rater app's database (format ``store``: ``--judgments`` is its path or URL),
             validated against the tasks (:mod:`crisscross.annotate.validate`);
``replay``   earlier judgments: a judgments parquet, or ``cxc:<folder>`` for the published CxC
             release (:func:`~crisscross.annotate.providers.load_cxc_release`);
``simulate`` a seeded simulated panel over a reference text encoder's vectors (``--items``,
             an ingest output, gives it the captions of each image for BISON's task types).

Each source is called with the tasks table and returns :class:`Collected`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from crisscross.annotate.formats import JUDGMENT_FORMATS, DatabaseFormat
from crisscross.annotate.providers import NO_JUDGMENT, Replay, load_cxc_release, repeats_report, unjudged_table
from crisscross.annotate.simulate import SimulateParams, simulate_from_embeddings
from crisscross.annotate.store import redact
from crisscross.annotate.validate import validate
from crisscross.core import io
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.registry import Registry
from crisscross.formats.schema import DEFAULT_RULES, SOURCE_PEOPLE, JudgmentRules

CXC_PREFIX = "cxc:"


class Collected(NamedTuple):
    judgments: pa.Table  # JUDGMENTS_SCHEMA
    unjudged: pa.Table  # UNJUDGED_SCHEMA
    rejected: list[Rejected]
    facts: dict[str, Any]  # what the source itself reports


@dataclass(frozen=True)
class SimulateSettings(SimulateParams):
    """``annotate.simulate``: the simulated panel, and the reference encoder through whose vectors its raters see the pairs."""

    encoder: str = "use-m3"


@dataclass(frozen=True)
class SourceSettings:
    """What a source may need: the ``--judgments``, ``--embeddings`` and ``--items`` arguments and its params."""

    judgments: tuple[str, ...] = ()
    embeddings: str | None = None
    items: str | None = None  # the ingest output: the captions of each image (BISON CHOOSE)
    format: str = "csv"
    replay_split: str = "test"
    simulate: SimulateSettings = field(default_factory=SimulateSettings)
    seed: int = 0
    rules: JudgmentRules = DEFAULT_RULES  # what an imported judgment's values may be, as the rater app checks them


Source = Callable[[pa.Table], Collected]
JUDGMENT_SOURCES: Registry[Source] = Registry("judgment source")


def _files(paths: tuple[str, ...]) -> tuple[list[Path], list[Rejected]]:
    """The judgment files to read, and a ``not-a-regular-file`` reject for each FIFO, socket or
    device inside a given folder (never opened).  A path given itself is read as it is: a
    special file there is the reader's one-line error."""
    found: list[Path] = []
    refused: list[Rejected] = []
    for path in map(Path, paths):
        if path.is_dir():
            for entry in sorted(p for p in path.rglob("*") if not p.is_dir()):
                kind = io.not_regular(str(entry))
                if kind:
                    error = io.refusal(str(entry), kind)
                    refused.append(reject("file", str(entry), error.reason, str(error), str(entry), {"path": str(entry)}))
                else:
                    found.append(entry)
        elif path.exists():
            found.append(path)
        else:
            raise FileNotFoundError(f"no judgment file or folder {path}")
    if not found:
        raise FileNotFoundError(f"no judgment files under {', '.join(paths) or '(no --judgments given)'}")
    return found, refused


@JUDGMENT_SOURCES.register("import")
def import_files(settings: SourceSettings) -> Source:
    reader = JUDGMENT_FORMATS.create(settings.format)

    def collect(tasks: pa.Table) -> Collected:
        records: list[Any] = []
        if isinstance(reader, DatabaseFormat):
            if not settings.judgments:
                raise FileNotFoundError(f"annotate import, format {settings.format}: give the database as --judgments (a path or URL)")
            for location in settings.judgments:
                records += reader.read_database(location)
            facts: dict[str, Any] = {"databases": [redact(location) for location in settings.judgments]}
        else:
            files, records = _files(settings.judgments)
            for path in files:
                records += reader.read(str(path), io.read_bytes(str(path)))
            facts = {"files": [str(f) for f in files]}
        judgments, rejected = validate(records, tasks, SOURCE_PEOPLE, settings.rules)
        frame = tasks.to_pandas()
        missing = frame[~frame["item_id"].isin(set(judgments.column("item_id").to_pylist()))]
        unjudged = unjudged_table(missing, NO_JUDGMENT, ["no valid judgment in the imported judgments"] * len(missing))
        return Collected(judgments, unjudged, rejected, facts)

    return collect


@JUDGMENT_SOURCES.register("replay")
def replay(settings: SourceSettings) -> Source:
    if len(settings.judgments) != 1:
        raise ValueError("annotate replay: give exactly one --judgments (a judgments parquet or cxc:<folder>)")
    source = settings.judgments[0]

    def collect(tasks: pa.Table) -> Collected:
        rejected: list[Rejected] = []
        if source.startswith(CXC_PREFIX):
            release = load_cxc_release(source[len(CXC_PREFIX) :], settings.replay_split)
            earlier, rejected = release.judgments, list(release.rejected)
        else:
            earlier = io.read_parquet(source)
        provided = Replay(earlier)(tasks)
        facts = {"source_rows": earlier.num_rows, "repeats": repeats_report(provided.judgments)}
        return Collected(provided.judgments, provided.unjudged, rejected, facts)

    return collect


@JUDGMENT_SOURCES.register("simulate")
def simulate(settings: SourceSettings) -> Source:
    if not settings.embeddings:
        raise ValueError("annotate simulate: --embeddings (the embed output) is required")
    encoder = settings.simulate.encoder
    items = settings.items
    if items is not None and not io.exists(io.join(items, "captions.parquet")):
        raise FileNotFoundError(f"annotate simulate: --items {items} holds no captions.parquet: give the ingest output")

    def collect(tasks: pa.Table) -> Collected:
        provided = simulate_from_embeddings(settings.embeddings, encoder, settings.seed, settings.simulate, items)(tasks)
        return Collected(provided.judgments, provided.unjudged, [], {"reference_encoder": encoder})

    return collect


def collect(tasks_path: str, source: str, settings: SourceSettings) -> list[Any]:
    """The annotate stage's whole-table step: the named source's (judgments, unjudged, facts) for
    the tasks at ``tasks_path``, then its rejects."""
    collected = JUDGMENT_SOURCES.create(source, settings=settings)(io.read_parquet(tasks_path))
    return [(collected.judgments, collected.unjudged, collected.facts), *collected.rejected]
