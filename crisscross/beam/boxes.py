"""The boxes composite: chains + mentions + captions + images → boxes, merged, per image.

The four inputs are keyed by image and joined (``CoGroupByKey``); each image runs its chains
through the box tasks (or takes their imported Label Studio boxes, a singleton side input) and
merges them, in parallel.  Chains that go to review, chains of mentions or images the tables do
not hold, boxes outside their image and imported boxes of chains that do not exist are rejected.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from crisscross.beam.common import route
from crisscross.core import io
from crisscross.core.errors import InputError
from crisscross.core.quarantine import Rejected, reject
from crisscross.entities import labelstudio
from crisscross.entities.boxes import BoxSettings
from crisscross.entities.coref import Chain
from crisscross.entities.mentions import caption_of, mention_of
from crisscross.entities.merge import Imported, annotate_image
from crisscross.entities.outputs import release_image

STAGE = "boxes"


def _image(
    joined: tuple[str, Mapping[str, Any]], settings: BoxSettings, seed: int, imported: Mapping[str, Imported] | None
) -> Iterator[Any]:
    image_id, parts = joined
    images = list(parts["images"])
    if not parts["chains"] and not parts["captions"]:
        return  # an image none of whose captions reached the mentions output: no release files
    if not images:
        for chain in sorted({row["chain"] for row in parts["chains"]}):
            yield reject("chain", f"{image_id}#{chain}", "unknown-image", f"no image {image_id} in the images table", "chains.parquet", {})
        return
    mentions = {(m.caption_id, m.index): m for m in (mention_of(r) for r in parts["mentions"])}
    groups: dict[str, list[Any]] = {}
    for row in sorted(parts["chains"], key=lambda r: (r["caption_id"], r["index"])):
        mention = mentions.get((row["caption_id"], row["index"]))
        if mention is None:
            detail = f"mention {row['caption_id']}#m{row['index']} of chain {row['chain']} is not in the mentions table"
            yield reject("chain", f"{image_id}#{row['chain']}", "unknown-mention", detail, "chains.parquet", dict(row))
            continue
        groups.setdefault(row["chain"], []).append(mention)
    chains = [Chain(image_id, chain, tuple(members)) for chain, members in groups.items()]
    captions = [caption_of(r) for r in parts["captions"]]
    yield from annotate_image(images[0], captions, chains, settings, seed, imported, "chains.parquet")


class AnnotateBoxes(beam.PTransform):
    """Paths of the coref chains and the mentions and captions tables; ``images``: the ingest images
    table's path, or image rows (a release's annotations: file name, width, height); ``imported``:
    one dict of imported chains (:data:`crisscross.entities.merge.Imported`), or None to simulate."""

    def __init__(
        self,
        chains: str,
        mentions: str,
        captions: str,
        images: str | beam.PCollection,
        settings: BoxSettings,
        seed: int,
        imported: beam.PCollection | None,
    ) -> None:
        super().__init__()
        self._paths = {"chains": chains, "mentions": mentions, "captions": captions}
        self._images, self._settings, self._seed, self._imported = images, settings, seed, imported

    def expand(self, pbegin: beam.pvalue.PBegin) -> tuple[beam.PCollection, beam.PCollection]:
        pipeline = pbegin.pipeline
        tables = {name: pipeline | f"Read{name.title()}" >> beam.io.ReadFromParquet(path) for name, path in self._paths.items()}
        tables["images"] = (
            pipeline | "ReadImages" >> beam.io.ReadFromParquet(self._images) if isinstance(self._images, str) else self._images
        )
        keyed = {name: rows | f"Key{name.title()}" >> beam.Map(lambda row: (row["image_id"], row)) for name, rows in sorted(tables.items())}
        joined = keyed | "Join" >> beam.CoGroupByKey()
        if self._imported is None:
            return route("Annotate", joined, STAGE, _image, many=True, args=(self._settings, self._seed, None))
        results, rejected = route(
            "Annotate", joined, STAGE, _image, many=True, args=(self._settings, self._seed, beam.pvalue.AsSingleton(self._imported))
        )
        keys = (
            tables["chains"]
            | "ChainKeys" >> beam.Map(lambda row: f"{row['image_id']}#{row['chain']}")
            | "KeyList" >> beam.combiners.ToList()
        )
        unknown = self._imported | "UnknownChains" >> beam.FlatMap(_unknown_chains, beam.pvalue.AsSingleton(keys))
        return results, (rejected, unknown) | "AllRejected" >> beam.Flatten()


class ImportedBoxes(beam.PTransform):
    """A Label Studio export of the box tasks as one dict of imported chains
    (:data:`crisscross.entities.merge.Imported`), and its malformed tasks, rejected."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def expand(self, pbegin: beam.pvalue.PBegin) -> tuple[beam.PCollection, beam.PCollection]:
        files = pbegin | "ImportFile" >> beam.Create([self._path])
        boxes, rejected = route("ReadExport", files, STAGE, lambda p: list(labelstudio.read_export(io.read_bytes(p), p)), many=True)
        chains = (
            boxes
            | "ImportList" >> beam.combiners.ToList()
            | "ImportDict" >> beam.Map(lambda pairs: {key: (None, tuple(found)) for key, found in pairs})
        )
        return chains, rejected


class ReleaseBoxes(beam.PTransform):
    """A Flickr30k Entities release's ``Annotations/*.xml`` as image rows and one dict of imported chains."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self._folder = folder

    def expand(self, pbegin: beam.pvalue.PBegin) -> tuple[beam.PCollection, beam.PCollection]:
        pattern = io.join(self._folder, "Annotations", "*.xml")
        paths = sorted(m.path for r in FileSystems.match([pattern]) for m in r.metadata_list)
        if not paths:
            raise InputError(f"no {pattern}: --release must be a Flickr30k Entities folder with Annotations/")
        parsed = pbegin | "AnnotationFiles" >> beam.Create(paths) | "ReadAnnotations" >> beam.Map(release_image)
        images = parsed | "ReleaseImages" >> beam.Map(lambda pair: pair[0])
        chains = (
            parsed
            | "ReleaseChains" >> beam.Map(lambda pair: pair[1])
            | "ReleaseList" >> beam.combiners.ToList()
            | "ReleaseDict" >> beam.Map(lambda parts: {k: v for part in parts for k, v in part.items()})
        )
        return images, chains


def _unknown_chains(imported: Mapping[str, Imported], keys: list[str]) -> list[Rejected]:
    """Imported boxes of a chain the chains table does not hold: quarantined, not silently unused."""
    known = set(keys)
    return [
        reject(
            "chain",
            key,
            "unknown-chain",
            "imported boxes for a chain that is not in chains.parquet",
            "import",
            {"boxes": [list(b) for b in boxes]},
        )
        for key, (_, boxes) in sorted(imported.items())
        if key not in known
    ]
