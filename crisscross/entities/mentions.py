"""The mentions table: one row per noun-phrase mention of a caption, chunked or read from a release.

A caption's mentions come from the rule chunker (:mod:`crisscross.entities.chunker`) or, for a
Flickr30k Entities ``Sentences`` file, from its brackets (with their chain ids and types, so a
release can be replayed).  Every mention is checked against its caption's words: a span outside
the caption, an empty mention, words that are not the caption's, or a type the paper does not
know is a ``Rejected``, never a row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from crisscross.core.quarantine import Rejected, reject
from crisscross.core.settings import setting
from crisscross.entities.chunker import TYPES, Chunk, chunk, mention_type

NOT_VISUAL = "notvisual"  # the release's type of mentions with no box and no scene
KNOWN_TYPES = (*TYPES, NOT_VISUAL)
CHUNKER = "chunker"
SENTENCES = "sentences"


@dataclass(frozen=True)
class MentionSettings:
    """``params.yaml`` ``mentions:``."""

    strict: bool = setting(False)  # any quarantined caption or mention fails the stage


@dataclass(frozen=True, order=True)
class Caption:
    image_id: str
    position: int  # the caption's line in its image's Sentences file (caption order)
    caption_id: str
    file_name: str  # the image file; its stem names the Sentences / Annotations files
    text: str  # whitespace-tokenised caption


@dataclass(frozen=True, order=True)
class Mention:
    image_id: str
    caption_id: str
    index: int  # the mention's order in its caption
    first: int  # first word (0-based) of the caption's whitespace tokens
    end: int  # one past the last word
    text: str
    types: str  # the paper's categories, "/"-joined as the release writes them ("vehicles/scene")
    given_chain: str  # the chain id a Sentences file gave, "" for a chunked mention
    source: str  # CHUNKER or SENTENCES

    @property
    def mention_id(self) -> str:
        return f"{self.caption_id}#m{self.index}"

    @property
    def kind(self) -> str:
        """The first category: the one metrics and box rules use."""
        return self.types.split("/")[0]

    @property
    def head(self) -> str:
        """The last word: Flickr30k Entities' head noun (chain verification splits by it)."""
        return self.text.split()[-1].lower() if self.text.split() else ""


MENTIONS_SCHEMA = pa.schema(
    [
        ("image_id", pa.string()),
        ("caption_id", pa.string()),
        ("index", pa.int32()),
        ("first", pa.int32()),
        ("end", pa.int32()),
        ("text", pa.string()),
        ("types", pa.string()),
        ("given_chain", pa.string()),
        ("source", pa.string()),
    ]
)
CAPTIONS_SCHEMA = pa.schema(
    [("image_id", pa.string()), ("position", pa.int32()), ("caption_id", pa.string()), ("file_name", pa.string()), ("text", pa.string())]
)


def check_mention(mention: Mention, words: Sequence[str], source: str) -> Mention | Rejected:
    """The mention if its span and words are its caption's and its types are known."""

    def bad(reason: str, detail: str) -> Rejected:
        return reject("mention", mention.mention_id, reason, detail, source, asdict(mention))

    if mention.end <= mention.first or not mention.text.strip():
        return bad("empty-mention", f"words [{mention.first}, {mention.end}) hold nothing")
    if mention.first < 0 or mention.end > len(words):
        return bad("span-outside-caption", f"words [{mention.first}, {mention.end}) of a caption of {len(words)} words")
    if " ".join(words[mention.first : mention.end]) != mention.text:
        return bad("text-mismatch", f"{mention.text!r} is not words [{mention.first}, {mention.end}) of the caption")
    unknown = [t for t in mention.types.split("/") if t not in KNOWN_TYPES]
    if unknown:
        return bad("unknown-type", f"type(s) {unknown}; known: {list(KNOWN_TYPES)}")
    return mention


def chunked_mentions(caption: Caption, source: str) -> tuple[list[Mention | Rejected], dict[str, int]]:
    """A caption's mentions from the rule chunker, and what it left out by reason (pronoun, non-visual)."""
    words = caption.text.split()
    chunking = chunk(words)
    out: list[Mention | Rejected] = [
        check_mention(_from_chunk(caption, index, piece), words, source) for index, piece in enumerate(chunking.chunks)
    ]
    skipped: dict[str, int] = {}
    for reason, _ in chunking.skipped:
        skipped[reason] = skipped.get(reason, 0) + 1
    return out, skipped


def _from_chunk(caption: Caption, index: int, piece: Chunk) -> Mention:
    return Mention(
        caption.image_id, caption.caption_id, index, piece.first, piece.end, " ".join(piece.words), mention_type(piece.head), "", CHUNKER
    )


def mentions_table(mentions: Iterable[Mention]) -> pa.Table:
    return pa.Table.from_pylist([asdict(m) for m in sorted(mentions)], schema=MENTIONS_SCHEMA)


def captions_table(captions: Iterable[Caption]) -> pa.Table:
    return pa.Table.from_pylist([asdict(c) for c in sorted(captions)], schema=CAPTIONS_SCHEMA)


def mention_of(row: Mapping[str, Any]) -> Mention:
    return Mention(**{name: row[name] for name in MENTIONS_SCHEMA.names})


def caption_of(row: Mapping[str, Any]) -> Caption:
    return Caption(**{name: row[name] for name in CAPTIONS_SCHEMA.names})


def image_captions(image_id: str, rows: Iterable[Mapping[str, Any]], file_name: str, source: str) -> list[Caption | Rejected]:
    """An image's captions in caption-id order (their Sentences line); a caption without text is a ``Rejected``."""
    out: list[Caption | Rejected] = []
    for position, row in enumerate(sorted(rows, key=lambda r: str(r["caption_id"]))):
        text = row.get("text")
        if not isinstance(text, str) or not text.split():
            out.append(reject("caption", row["caption_id"], "null-text", "a caption without words has no mentions", source, dict(row)))
            continue
        out.append(Caption(image_id, position, str(row["caption_id"]), file_name, " ".join(text.split())))
    return out
