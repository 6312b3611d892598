"""The sample composite: neighbour tables + captions → CxC intramodal candidates, with provenance.

Neighbour rows become (unordered pair, evidence); grouping by pair unites what several encoders
and both ends of a pair found.  Caption draws read the captions of each image from a side input
keyed by image; the co-caption quota reads the ``c2c_isim`` count as a singleton side input.
Finally all candidates meet in one place for the constraint check (self pairs, duplicates in
either order, pairs in two methods), whose rejects are routed to the quarantine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.beam.common import REJECTED, route
from crisscross.candidates.cxc import (
    C2C_ISIM,
    I2I_CSIM,
    caption_pair_for_images,
    cocaption_pairs,
    enforce_constraints,
    image_pair,
    neighbour_pairs,
)

STAGE = "sample"


class SampleOutputs(NamedTuple):
    candidates: beam.PCollection  # one list of kept Candidates
    rejected: beam.PCollection


def _pairs(pipeline: beam.Pipeline, label: str, tables: Mapping[str, str], top: int) -> beam.PCollection:
    """(pair, evidences) from every neighbour table of one method, grouped by pair."""
    parts = [
        pipeline
        | f"Read[{label}:{space}]" >> beam.io.ReadFromParquet(path)
        | f"Pairs[{label}:{space}]" >> beam.FlatMap(lambda row, space=space: neighbour_pairs([row], space, top))
        for space, path in sorted(tables.items())
    ]
    return parts | f"All[{label}]" >> beam.Flatten() | f"ByPair[{label}]" >> beam.GroupByKey()


def _quota(n_isim: int, ratio: float) -> int:
    return int(round(n_isim * ratio))


def _keep(candidates: list[Any], allow_cross_method: bool) -> Iterable[Any]:
    kept, rejected = enforce_constraints(candidates, allow_cross_method)
    yield beam.pvalue.TaggedOutput("kept_list", kept)
    yield from rejected


class SampleCandidates(beam.PTransform):
    def __init__(
        self,
        i2i_tables: Mapping[str, str],
        c2c_tables: Mapping[str, str],
        captions_path: str,
        top_i2i: int,
        top_c2c: int,
        cocaption_ratio: float,
        seed: int,
        allow_cross_method: bool,
    ) -> None:
        super().__init__()
        self._i2i, self._c2c, self._captions = dict(i2i_tables), dict(c2c_tables), captions_path
        self._top_i2i, self._top_c2c, self._ratio, self._seed = top_i2i, top_c2c, cocaption_ratio, seed
        self._allow_cross = allow_cross_method

    def expand(self, pbegin: beam.pvalue.PBegin) -> SampleOutputs:
        pipeline, seed, ratio = pbegin.pipeline, self._seed, self._ratio
        captions = beam.pvalue.AsDict(
            pipeline
            | "ReadCaptions" >> beam.io.ReadFromParquet(self._captions, columns=["caption_id", "image_id"])
            | "ByImage" >> beam.Map(lambda row: (row["image_id"], row["caption_id"]))
            | "GroupCaptions" >> beam.GroupByKey()
            | "SortCaptions" >> beam.MapTuple(lambda image, ids: (image, sorted(ids)))
        )
        i2i = _pairs(pipeline, I2I_CSIM, self._i2i, self._top_i2i) | "ImagePairs" >> beam.MapTuple(
            lambda pair, ev: image_pair(I2I_CSIM, pair, ev)
        )
        isim, no_captions = route(
            "DrawCaptions",
            _pairs(pipeline, C2C_ISIM, self._c2c, self._top_c2c),
            STAGE,
            lambda keyed, by_image: caption_pair_for_images(keyed[0], keyed[1], by_image, seed),
            args=(captions,),
        )
        n_isim = isim | "CountIsim" >> beam.combiners.Count.Globally()
        cocaption = (
            pipeline
            | "Once" >> beam.Create([None])
            | "Cocaption"
            >> beam.FlatMap(
                lambda _, n, by_image: cocaption_pairs(by_image, _quota(n, ratio), seed),
                beam.pvalue.AsSingleton(n_isim),
                captions,
            )
        )
        checked = route(
            "Constraints",
            (i2i, isim, cocaption) | "AllCandidates" >> beam.Flatten() | "Gather" >> beam.combiners.ToList(),
            STAGE,
            _keep,
            many=True,
            args=(self._allow_cross,),
            tags=("kept_list",),
        )
        rejected = (no_captions, checked[REJECTED]) | "AllRejected" >> beam.Flatten()
        return SampleOutputs(candidates=checked.kept_list, rejected=rejected)
