"""The coref composite: mentions → coreference chains per image, with the questions they took.

Mentions are grouped by image and each image is resolved in parallel (chains never cross
images); the link and verification counts come out as one summed tuple.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.entities.coref import CorefSettings, resolve
from crisscross.entities.mentions import Mention, mention_of

STAGE = "coref"
COUNTS = ("links_asked", "naive_links", "verified", "split")


class CorefOutputs(NamedTuple):
    chains: beam.PCollection  # Chain per element
    counts: beam.PCollection  # one dict of COUNTS


def _resolve(group: tuple[str, Iterable[Mention]], settings: CorefSettings, seed: int) -> Iterator[Any]:
    image_id, mentions = group
    result = resolve(image_id, list(mentions), settings.oracle(seed))
    yield beam.pvalue.TaggedOutput("counts", (result.links_asked, result.naive_links, result.verified, result.rejected))
    yield from result.chains


def _sum(rows: Iterable[tuple[int, ...]]) -> dict[str, int]:
    totals = [0] * len(COUNTS)
    for row in rows:
        totals = [a + b for a, b in zip(totals, row, strict=True)]
    return dict(zip(COUNTS, totals, strict=True))


class ResolveCoreference(beam.PTransform):
    def __init__(self, mentions_path: str, settings: CorefSettings, seed: int) -> None:
        super().__init__()
        self._path, self._settings, self._seed = mentions_path, settings, seed

    def expand(self, pbegin: beam.pvalue.PBegin) -> CorefOutputs:
        outputs = (
            pbegin.pipeline
            | "ReadMentions" >> beam.io.ReadFromParquet(self._path)
            | "Mention" >> beam.Map(mention_of)
            | "ByImage" >> beam.Map(lambda m: (m.image_id, m))
            | "Group" >> beam.GroupByKey()
            | "Resolve" >> beam.FlatMap(_resolve, self._settings, self._seed).with_outputs("counts", main="chains")
        )
        counts = outputs.counts | "GatherCounts" >> beam.combiners.ToList() | "Sum" >> beam.Map(_sum)
        return CorefOutputs(outputs.chains, counts)
