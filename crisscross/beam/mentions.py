"""The mentions composite: captions (an ingest output) or a release's Sentences files → mentions.

Items: captions are grouped by image (a caption's line in its image's Sentences file is its rank
by caption id), then each caption is chunked in parallel.  A release: each ``Sentences/*.txt`` is
parsed in parallel, keeping its chains and types; a file whose brackets do not parse is one
``Rejected`` (``malformed-sentences``), and so is a FIFO, socket, device or directory named like
one (``not-a-regular-file``), which is never opened.  Pronouns and non-visual terms the chunker leaves out are counted, not rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.beam.common import route
from crisscross.core import io
from crisscross.core.errors import one_line
from crisscross.core.quarantine import reject
from crisscross.entities.files import SentenceError, linked_away, sentences_file
from crisscross.entities.mentions import Caption, chunked_mentions, image_captions

STAGE = "mentions"
CAPTION, SKIPPED = "caption", "skipped"


class MentionOutputs(NamedTuple):
    mentions: beam.PCollection
    captions: beam.PCollection
    skipped: beam.PCollection  # one dict {reason: count}
    rejected: beam.PCollection


def _chunk(caption: Caption, source: str) -> Iterator[Any]:
    mentions, skipped = chunked_mentions(caption, source)
    yield beam.pvalue.TaggedOutput(CAPTION, caption)
    for reason, n in skipped.items():
        yield beam.pvalue.TaggedOutput(SKIPPED, (reason, n))
    yield from mentions


def _sentences(path: str) -> Iterator[Any]:
    target = linked_away(path)
    if target is not None:
        yield reject("sentences", path, "outside-folder", f"a link to {target}, outside the release's Sentences/", path, {"path": path})
        return
    try:
        captions, mentions = sentences_file(path, io.read_bytes(path).decode("utf-8"))
    except io.NotARegularFileError as error:
        yield reject("sentences", path, error.reason, str(error), path, {"path": path})
        return
    except (SentenceError, UnicodeDecodeError) as error:
        yield reject("sentences", path, "malformed-sentences", one_line(error), path, {"path": path})
        return
    for caption in captions:
        yield beam.pvalue.TaggedOutput(CAPTION, caption)
    yield from mentions


class ExtractMentions(beam.PTransform):
    """``items``: an ingest output folder; ``sentences``: the release's Sentences file paths (one of the two)."""

    def __init__(self, items: str | None = None, sentences: list[str] | None = None) -> None:
        super().__init__()
        self._items, self._sentences = items, sorted(sentences or [])

    def expand(self, pbegin: beam.pvalue.PBegin) -> MentionOutputs:
        pipeline = pbegin.pipeline
        if self._items is None:
            parsed = route("Parse", pipeline | "Files" >> beam.Create(self._sentences), STAGE, _sentences, many=True, tags=(CAPTION,))
            no_skips = pipeline | "NoSkips" >> beam.Create([]) | "SkipCounts" >> _Counts()
            return MentionOutputs(parsed.kept, parsed[CAPTION], no_skips, parsed.rejected)
        files = beam.pvalue.AsDict(
            pipeline
            | "ReadImages" >> beam.io.ReadFromParquet(io.join(self._items, "images.parquet"), columns=["image_id", "file_name"])
            | "FileNames" >> beam.Map(lambda row: (row["image_id"], row["file_name"]))
        )
        captions, no_text = route(
            "Captions",
            pipeline
            | "ReadCaptions"
            >> beam.io.ReadFromParquet(io.join(self._items, "captions.parquet"), columns=["caption_id", "image_id", "text"])
            | "ByImage" >> beam.Map(lambda row: (row["image_id"], row))
            | "Group" >> beam.GroupByKey(),
            STAGE,
            lambda kv, names: image_captions(kv[0], kv[1], names.get(kv[0], ""), "captions.parquet"),
            many=True,
            args=(files,),
        )
        chunked = route("Chunk", captions, STAGE, _chunk, many=True, args=("captions.parquet",), tags=(CAPTION, SKIPPED))
        rejected = (no_text, chunked.rejected) | "AllRejected" >> beam.Flatten()
        return MentionOutputs(chunked.kept, chunked[CAPTION], chunked[SKIPPED] | "SkipCounts" >> _Counts(), rejected)


class _Counts(beam.PTransform):
    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return pcoll | beam.CombinePerKey(sum) | beam.combiners.ToDict()
