"""The localize composite: final chains + boxes + mentions + images → phrases with their proposals.

Inputs are joined per image; each image's phrases get their proposals (simulated, or looked up
in the proposals file, a singleton side input) in parallel (a phrase of an image missing from the images table is rejected); the metrics are one global step
over all phrases (AP pools a type's proposals over every image).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam

from crisscross.beam.common import route
from crisscross.core import io
from crisscross.core.errors import InputError, ParamError
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.registry import Registry
from crisscross.entities.localize import LocalizeSettings, Phrase, ScoredBox, evaluate, image_phrases, read_proposals, simulate_proposals

STAGE = "localize"


def _phrases(
    joined: tuple[str, Mapping[str, Any]],
    settings: LocalizeSettings,
    seed: int,
    given: Mapping[tuple[str, int], Sequence[ScoredBox]] | None,
) -> Iterator[tuple[Phrase, list[ScoredBox]] | Rejected]:
    image_id, parts = joined
    images = list(parts["images"])
    if not images:
        for row in parts["chains"]:
            key = f"{row['caption_id']}#m{row['index']}"
            yield reject("phrase", key, "unknown-image", f"no image {image_id} in the images table", "chains.parquet", dict(row))
        return
    types = {(m["caption_id"], int(m["index"])): m["types"] for m in parts["mentions"]}
    size = (int(images[0]["width"] or 0), int(images[0]["height"] or 0))
    for phrase in image_phrases(list(parts["chains"]), list(parts["boxes"]), types):
        if given is None:
            yield phrase, simulate_proposals(phrase, size, settings, seed)
        else:
            yield phrase, list(given.get((phrase.caption_id, phrase.index), []))


def _evaluate(pairs: list[tuple[Phrase, list[ScoredBox]]], k: int) -> dict[str, dict[str, float]]:
    pairs = sorted(pairs, key=lambda p: (p[0].caption_id, p[0].index))
    return evaluate([p for p, _ in pairs], {(p.caption_id, p.index): boxes for p, boxes in pairs}, k)


PROPOSALS: Registry[tuple[beam.PCollection | None, beam.PCollection]] = Registry("proposal source")  # localize.proposals


@PROPOSALS.register("simulate")
def _simulated(pipeline: beam.Pipeline, path: str | None) -> tuple[None, beam.PCollection]:
    """No proposals here: :class:`LocalizePhrases` simulates them per phrase."""
    return None, pipeline | "NoRejects" >> beam.Create([])


@PROPOSALS.register("file")
def _from_file(pipeline: beam.Pipeline, path: str | None) -> tuple[beam.PCollection, beam.PCollection]:
    """``--proposals``: one dict of the file's proposals, and its malformed lines, rejected."""
    if not path:
        raise ParamError("localize.proposals is file: give --proposals PATH")
    if not io.exists(path):
        raise InputError(f"no proposals file {path}")
    files = pipeline | "ProposalFile" >> beam.Create([path])
    proposals, rejected = route("ReadProposals", files, STAGE, lambda p: list(read_proposals(io.read_bytes(p), p)), many=True)
    return proposals | "ProposalList" >> beam.combiners.ToList() | "ProposalDict" >> beam.Map(dict), rejected


class LocalizePhrases(beam.PTransform):
    """Paths of the final chains, boxes, mentions and images tables; ``given``: the proposals (one dict) or None to simulate."""

    def __init__(self, paths: Mapping[str, str], settings: LocalizeSettings, seed: int, given: beam.PCollection | None) -> None:
        super().__init__()
        self._paths, self._settings, self._seed, self._given = dict(paths), settings, seed, given

    def expand(self, pbegin: beam.pvalue.PBegin) -> tuple[beam.PCollection, beam.PCollection]:
        keyed = {
            name: pbegin.pipeline
            | f"Read{name.title()}" >> beam.io.ReadFromParquet(path)
            | f"Key{name.title()}" >> beam.Map(lambda row: (row["image_id"], row))
            for name, path in sorted(self._paths.items())
        }
        given = beam.pvalue.AsSingleton(self._given) if self._given is not None else None
        joined = keyed | "Join" >> beam.CoGroupByKey()
        pairs, rejected = route("Phrases", joined, STAGE, _phrases, many=True, args=(self._settings, self._seed, given))
        return pairs | "Gather" >> beam.combiners.ToList() | "Evaluate" >> beam.Map(_evaluate, self._settings.k), rejected
