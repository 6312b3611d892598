"""The decoys composite: images + captions + one text encoder's co-caption means → each target's
decoy (BISON §4.1 step 1).

The searchable images and their unit vectors are built once (a singleton side input); the exact
search runs per block of targets, spread over workers; refused images and passed-over neighbours
go to the quarantine.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.beam.common import REJECTED, route
from crisscross.candidates.bison import DecoySettings, Space, blocks, nearest, searchable
from crisscross.core import io
from crisscross.embed.sets import COCAPTION_MEAN, EmbeddingSet, set_dir

STAGE = "decoys"


class DecoysOutputs(NamedTuple):
    decoys: beam.PCollection  # Decoy, one per target that has one
    rejected: beam.PCollection


def load_space(items: str, embeddings: str, settings: DecoySettings) -> tuple[Space, list[Any]]:
    """The searchable images of an ingest output in the encoder's co-caption mean space, and the refused."""
    directory = set_dir(embeddings, "text", settings.encoder, COCAPTION_MEAN)
    images = io.read_parquet(io.join(items, "images.parquet")).select(["image_id", "path", "n_captions"]).to_pylist()
    captions = io.read_parquet(io.join(items, "captions.parquet")).select(["caption_id", "image_id", "text"]).to_pylist()
    return searchable(images, captions, EmbeddingSet.read(directory), settings.encoder, io.join(items, "images.parquet"))


def _space_and_rejects(paths: tuple[str, str], settings: DecoySettings):
    space, rejected = load_space(*paths, settings)
    yield beam.pvalue.TaggedOutput("space", space)
    yield from rejected


class FindDecoys(beam.PTransform):
    def __init__(self, items: str, embeddings: str, settings: DecoySettings) -> None:
        super().__init__()
        self._paths, self._settings = (items, embeddings), settings

    def expand(self, pbegin: beam.pvalue.PBegin) -> DecoysOutputs:
        settings, source = self._settings, set_dir(self._paths[1], "text", self._settings.encoder, COCAPTION_MEAN)
        loaded = route(
            "Searchable",
            pbegin | "Inputs" >> beam.Create([self._paths]),
            STAGE,
            _space_and_rejects,
            many=True,
            args=(settings,),
            tags=("space",),
        )
        space = beam.pvalue.AsSingleton(loaded.space)
        ranges = loaded.space | "Blocks" >> beam.FlatMap(lambda s: blocks(len(s.ids), settings.block))
        decoys, refused = route(
            "Nearest",
            ranges | "Reshuffle" >> beam.Reshuffle(),
            STAGE,
            lambda block, s: nearest(s, block[0], block[1], source),
            many=True,
            args=(space,),
        )
        rejected = (loaded[REJECTED], refused) | "AllRejected" >> beam.Flatten()
        return DecoysOutputs(decoys, rejected)
