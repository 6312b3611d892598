"""The derive composite: rated STS / SIS pairs + captions → CxC C2I candidates, with provenance.

Rated rows come from a ``rated.parquet`` (the aggregate stage) or from CxC release files replayed
(``{task: path}``).  Each row is checked against the captions table (a singleton side input:
each caption's image, each image's captions) and either becomes a rated pair or a ``Rejected``;
rows of other task types (SITS, VERIFY) are counted, not derived from.  Pairs become their derived
directions in parallel; the selection by rank is one global step (like the sample stage's
constraint check), which draws captions only for the pairs it reaches, adds the original pairs
and checks the constraints, routing what breaks one to the quarantine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.beam.common import REJECTED, route
from crisscross.candidates.c2i import (
    CaptionIndex,
    DeriveSettings,
    cxc_rows,
    derive,
    enforce_constraints,
    is_intramodal,
    originals,
    pair_kind,
    quota_for,
    rated_pair,
    select,
)

STAGE = "derive"
COLUMNS_READ = ["item_id", "task_type", "id_a", "id_b", "agg_score", "sampling_method"]  # of rated.parquet (aggregate.round.RATED_COLUMNS)
IGNORED = "ignored:"  # prefix of the count of rows of another task type


class DeriveOutputs(NamedTuple):
    candidates: beam.PCollection  # one list of kept C2ICandidates
    rejected: beam.PCollection
    facts: beam.PCollection  # one dict: quota, selection per source, skips, rated pairs by kind


def _select(derived: list[Any], index: CaptionIndex, kinds: Mapping[str, int], settings: DeriveSettings, seed: int) -> Iterable[Any]:
    n_rated = sum(n for kind, n in kinds.items() if not kind.startswith(IGNORED))
    selection = select(derived, index, seed, quota_for(settings, n_rated), settings.c2c_share, settings.ranks, settings.depth)
    kept, rejected = enforce_constraints([*selection.candidates, *originals(index)])
    facts = {
        **selection.facts,
        "rated": {k: n for k, n in sorted(kinds.items()) if not k.startswith(IGNORED)},
        "ignored": {k[len(IGNORED) :]: n for k, n in sorted(kinds.items()) if k.startswith(IGNORED)},
        "directions": settings.directions,
    }
    yield beam.pvalue.TaggedOutput("kept_list", kept)
    yield beam.pvalue.TaggedOutput("facts", facts)
    yield from rejected


class DeriveC2I(beam.PTransform):
    """``rated``: a ``rated.parquet`` path, or ``{task type: CxC release file}`` to replay."""

    def __init__(self, rated: str | Mapping[str, str], captions_path: str, settings: DeriveSettings, seed: int) -> None:
        super().__init__()
        self._rated = rated if isinstance(rated, str) else dict(rated)
        self._captions, self._settings, self._seed = captions_path, settings, seed

    def _rows(self, pipeline: beam.Pipeline) -> tuple[beam.PCollection, beam.PCollection]:
        if isinstance(self._rated, str):
            path = self._rated
            rows = pipeline | "ReadRated" >> beam.io.ReadFromParquet(path, columns=COLUMNS_READ)
            return rows | "Source" >> beam.Map(lambda row: {**row, "source": path.rsplit("/", 1)[-1]}), pipeline | "NoReadRejects" >> (
                beam.Create([])
            )
        files = sorted(self._rated.items())
        mixed = (
            pipeline | "ReleaseFiles" >> beam.Create(files) | "ReadRelease" >> beam.FlatMapTuple(lambda task, path: cxc_rows(path, task))
        )
        return route("ReleaseRejects", mixed, STAGE)

    def expand(self, pbegin: beam.pvalue.PBegin) -> DeriveOutputs:
        pipeline, settings, seed = pbegin.pipeline, self._settings, self._seed
        index = beam.pvalue.AsSingleton(
            pipeline
            | "ReadCaptions" >> beam.io.ReadFromParquet(self._captions, columns=["caption_id", "image_id"])
            | "GatherCaptions" >> beam.combiners.ToList()
            | "CaptionIndex" >> beam.Map(CaptionIndex.from_rows)
        )
        rows, unreadable = self._rows(pipeline)
        intramodal = rows | "Intramodal" >> beam.Filter(is_intramodal)
        ignored = (
            rows
            | "Other" >> beam.Filter(lambda row: not is_intramodal(row))
            | "IgnoredKind" >> beam.Map(lambda row: f"{IGNORED}{row.get('task_type')}")
        )
        pairs, bad_pairs = route("Check", intramodal, STAGE, lambda row, idx: rated_pair(row, idx, "rated"), args=(index,))
        kinds = beam.pvalue.AsDict(
            ((pairs | "Kind" >> beam.Map(pair_kind, index)), ignored)
            | "Kinds" >> beam.Flatten()
            | "CountKinds" >> beam.combiners.Count.PerElement()
        )
        derived = pairs | "Derive" >> beam.FlatMap(derive, index, settings.directions)
        selected = route(
            "Select",
            derived | "GatherDerived" >> beam.combiners.ToList(),
            STAGE,
            _select,
            many=True,
            args=(index, kinds, settings, seed),
            tags=("kept_list", "facts"),
        )
        rejected = (unreadable, bad_pairs, selected[REJECTED]) | "AllRejected" >> beam.Flatten()
        return DeriveOutputs(candidates=selected.kept_list, rejected=rejected, facts=selected.facts)
