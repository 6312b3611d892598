"""The bison composite: the CHOOSE round's rated pairs → VERIFY-TRIPLE candidates; with the
VERIFY-TRIPLE round's rated items too → the accepted COCO-BISON triples and their yields.

Both steps are whole-table work (joins of a round's rated items with its judgments and the
captions table), so each is one element; refused rows go to the quarantine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.aggregate.bison import accepted_triples
from crisscross.aggregate.round import KEPT_JUDGMENTS
from crisscross.beam.common import REJECTED, route
from crisscross.candidates.bison import chosen_captions
from crisscross.core import io
from crisscross.ingest.records import caption_images

STAGE = "bison"
RATED = "rated.parquet"


@dataclass(frozen=True)
class BisonInputs:
    choose: str  # the CHOOSE round's aggregate output
    items: str
    verified: str | None  # the VERIFY-TRIPLE round's aggregate output, once it ran


class BisonOutputs(NamedTuple):
    chosen: beam.PCollection  # one (list[Chosen], counts)
    triples: beam.PCollection  # one (list[Triple], counts), or nothing without a verified round
    rejected: beam.PCollection


def image_of(items: str) -> dict[str, str]:
    return caption_images(io.read_parquet(io.join(items, "captions.parquet")))


def _chosen(inputs: BisonInputs):
    path = io.join(inputs.choose, RATED)
    chosen, counts, rejected = chosen_captions(io.read_parquet(path).to_pylist(), image_of(inputs.items), path)
    yield beam.pvalue.TaggedOutput("chosen", (chosen, counts))
    yield from rejected


def _triples(inputs: BisonInputs):
    verified = str(inputs.verified)
    path = io.join(verified, RATED)
    triples, counts, rejected = accepted_triples(
        io.read_parquet(path).to_pylist(),
        io.read_parquet(io.join(inputs.choose, KEPT_JUDGMENTS)).to_pandas(),
        io.read_parquet(io.join(verified, KEPT_JUDGMENTS)).to_pandas(),
        image_of(inputs.items),
        path,
    )
    yield beam.pvalue.TaggedOutput("triples", (triples, counts))
    yield from rejected


class AssembleBison(beam.PTransform):
    def __init__(self, inputs: BisonInputs) -> None:
        super().__init__()
        self._inputs = inputs

    def expand(self, pbegin: beam.pvalue.PBegin) -> BisonOutputs:
        inputs = pbegin | "Inputs" >> beam.Create([self._inputs])
        chosen = route("Chosen", inputs, STAGE, _chosen, many=True, tags=("chosen",))
        rejected: tuple[Any, ...] = (chosen[REJECTED],)
        if self._inputs.verified:
            triples = route("Triples", inputs, STAGE, _triples, many=True, tags=("triples",))
            found, rejected = triples.triples, (*rejected, triples[REJECTED])
        else:
            found = pbegin | "NoTriples" >> beam.Create([])
        return BisonOutputs(chosen.chosen, found, rejected | "AllRejected" >> beam.Flatten())
