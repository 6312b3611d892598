"""Flickr30k Entities' released files, read and written, so a release can be replayed and re-released.

* ``Sentences/<image>.txt``: one caption per line, each mention bracketed as
  ``[/EN#<chain>/<type>[/<type>…] words]`` (e.g. ``[/EN#1/people Two young guys] look at …``).
* ``Annotations/<image>.xml``: PASCAL-VOC-like; ``<size>`` (width, height, depth) and one
  ``<object>`` per box with one ``<name>`` per chain it belongs to and a ``<bndbox>`` of 1-based
  pixel corners, or per box-less chain an ``<object>`` with ``<name>``, ``<scene>`` and
  ``<nobndbox>`` flags.

In memory boxes are 0-based ``(xmin, ymin, xmax, ymax)`` as the release's own reader returns
them; the writers add the 1 back, so reading then writing gives the same file back.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from crisscross.core.errors import InputError
from crisscross.core.ids import FlickrIdScheme, IdFormError, IdScheme
from crisscross.core.quarantine import Rejected
from crisscross.entities.mentions import SENTENCES, Caption, Mention, check_mention

_OPEN = re.compile(r"\[/EN#([^/\s\]]+)/(\S+)$")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]*")  # a file name without a folder part or a leading dot ("..")

Box = tuple[int, int, int, int]  # 0-based xmin, ymin, xmax, ymax (inclusive pixel corners)


class SentenceError(InputError):
    """A Sentences line whose brackets do not parse; the message names the file and line."""


@dataclass(frozen=True)
class Phrase:
    first: int
    end: int
    chain: str
    types: str


def parse_sentence(line: str, where: str) -> tuple[list[str], list[Phrase]]:
    """A Sentences line's caption words and its bracketed phrases."""
    words: list[str] = []
    phrases: list[Phrase] = []
    open_phrase: tuple[int, str, str] | None = None
    for token in line.split():
        if open_phrase is None and token.startswith("[/EN#"):
            match = _OPEN.match(token)
            if not match:
                raise SentenceError(f"{where}: malformed mention opening {token!r}")
            open_phrase = (len(words), match.group(1), match.group(2))
            continue
        if open_phrase is not None and token.endswith("]"):
            if token[:-1]:
                words.append(token[:-1])
            first, chain, types = open_phrase
            phrases.append(Phrase(first, len(words), chain, types))
            open_phrase = None
            continue
        words.append(token)
    if open_phrase is not None:
        raise SentenceError(f"{where}: mention [/EN#{open_phrase[1]} … is not closed with ]")
    return words, phrases


def read_sentences(text: str, image_id: str, file_name: str, caption_ids: Sequence[str], where: str) -> tuple[list[Caption], list[Mention]]:
    """A Sentences file's captions (line order) and mentions; ``caption_ids`` names its lines."""
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) != len(caption_ids):
        raise SentenceError(f"{where}: {len(lines)} captions, expected {len(caption_ids)}")
    captions, mentions = [], []
    for position, (line, caption_id) in enumerate(zip(lines, caption_ids, strict=True)):
        words, phrases = parse_sentence(line, f"{where}:{position + 1}")
        captions.append(Caption(image_id, position, caption_id, file_name, " ".join(words)))
        for index, phrase in enumerate(phrases):
            text = " ".join(words[phrase.first : phrase.end])
            mentions.append(Mention(image_id, caption_id, index, phrase.first, phrase.end, text, phrase.types, phrase.chain, SENTENCES))
    return captions, mentions


RELEASE_NAMESPACE = "entities"  # ids of a release image whose file is not a Flickr photo number


def release_ids(stem: str, n_captions: int) -> tuple[str, list[str]]:
    """The image id and caption ids of a release file ``<stem>``: Flickr30k ids (``<photo>.jpg#<line>``)
    for a Flickr photo number, else ``entities:img:<stem>`` and ``entities:cap:<stem>#<line>``."""
    if stem.isascii() and stem.isdigit():  # "١٢" is digits to str.isdigit, but no Flickr photo number
        scheme = FlickrIdScheme()
        return scheme.image(stem), [scheme.caption(scheme.caption_native(stem, i)) for i in range(n_captions)]
    plain = IdScheme(RELEASE_NAMESPACE)
    return plain.image(stem), [plain.caption(f"{stem}#{i}") for i in range(n_captions)]


def sentences_file(path: str, text: str) -> tuple[list[Caption], list[Mention | Rejected]]:
    """A release's ``Sentences/<image>.txt``: its captions (ids by :func:`release_ids`) and their checked mentions."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".txt")
    try:
        image_id, caption_ids = release_ids(stem, len([line for line in text.split("\n") if line.strip()]))
    except IdFormError as error:  # a blank name: no image id
        raise SentenceError(f"{path}: the file name gives no image id ({error})") from error
    captions, mentions = read_sentences(text, image_id, f"{stem}.jpg", caption_ids, path)
    words = {c.caption_id: c.text.split() for c in captions}
    return captions, [check_mention(m, words[m.caption_id], f"{path}:{m.caption_id}") for m in mentions]


def linked_away(path: str) -> str | None:
    """Where a release file really is when a symlink takes it out of its folder, else None (an
    object-store URI has no links, and the folder's glob yields no "..")."""
    if "://" in path:
        return None
    target, folder = os.path.realpath(path), os.path.realpath(os.path.dirname(path) or ".")
    return None if target.startswith(folder.rstrip("/") + "/") else target


def format_sentence(words: Sequence[str], phrases: Sequence[Phrase]) -> str:
    """A caption line with its phrases bracketed (phrases must not overlap)."""
    starts = {p.first: p for p in phrases}
    ends = {p.end - 1 for p in phrases}
    out = []
    for i, word in enumerate(words):
        if i in starts:
            out.append(f"[/EN#{starts[i].chain}/{starts[i].types}")
        out.append(f"{word}]" if i in ends else word)
    return " ".join(out)


def write_sentences(lines: Sequence[tuple[Sequence[str], Sequence[Phrase]]]) -> bytes:
    return "".join(format_sentence(words, phrases) + "\n" for words, phrases in lines).encode()


@dataclass(frozen=True)
class AnnotatedObject:
    names: tuple[str, ...]  # the chains the box (or flag) belongs to
    box: Box | None
    scene: bool = False
    nobox: bool = False


@dataclass(frozen=True)
class Annotation:
    file_name: str
    width: int
    height: int
    depth: int
    objects: tuple[AnnotatedObject, ...]

    def boxes(self) -> dict[str, list[Box]]:
        """Each chain's boxes, as the release's reader returns them."""
        out: dict[str, list[Box]] = {}
        for obj in self.objects:
            if obj.box is not None:
                for name in obj.names:
                    out.setdefault(name, []).append(obj.box)
        return out


def _int(element: ET.Element, tag: str, where: str) -> int:
    found = element.find(tag)
    if found is None or found.text is None:
        raise InputError(f"{where}: <{element.tag}> has no <{tag}>")
    try:
        return int(found.text.strip())
    except ValueError as error:
        raise InputError(f"{where}: <{tag}> is {found.text!r}, not an integer") from error


def read_annotation(data: bytes, where: str) -> Annotation:
    """An Annotations file; a DTD (entity expansion, external entities) is refused, not parsed."""
    try:
        root = fromstring(data, forbid_dtd=True)
    except ET.ParseError as error:
        raise InputError(f"{where}: not XML ({error})") from error
    except DefusedXmlException as error:
        raise InputError(f"{where}: refused: {error}") from error
    size = root.find("size")
    if size is None:
        raise InputError(f"{where}: no <size>")
    objects = []
    for obj in root.findall("object"):
        names = tuple((n.text or "").strip() for n in obj.findall("name"))
        if not names or not all(names):
            raise InputError(f"{where}: an <object> without a chain <name>")
        bndbox = obj.find("bndbox")
        if bndbox is not None:
            box = tuple(_int(bndbox, tag, where) - 1 for tag in ("xmin", "ymin", "xmax", "ymax"))
            objects.append(AnnotatedObject(names, box))  # type: ignore[arg-type]
        else:
            scene = obj.find("scene") is not None and _int(obj, "scene", where) > 0
            nobox = obj.find("nobndbox") is not None and _int(obj, "nobndbox", where) > 0
            objects.append(AnnotatedObject(names, None, scene, nobox))
    depth = _int(size, "depth", where) if size.find("depth") is not None else 3
    file_name = (root.findtext("filename") or "").strip()
    if file_name and not _PLAIN_NAME.fullmatch(file_name):
        raise InputError(f"{where}: <filename> {file_name!r} is not a plain file name")
    return Annotation(file_name, _int(size, "width", where), _int(size, "height", where), depth, tuple(objects))


def write_annotation(annotation: Annotation) -> bytes:
    """The release's layout: tab-indented, one ``<object>`` per box or box-less chain."""
    lines = ["<annotation>", f"\t<filename>{escape(annotation.file_name)}</filename>", "\t<size>"]
    lines += [
        f"\t\t<width>{annotation.width}</width>",
        f"\t\t<height>{annotation.height}</height>",
        f"\t\t<depth>{annotation.depth}</depth>",
    ]
    lines += ["\t</size>"]
    for obj in annotation.objects:
        lines.append("\t<object>")
        lines += [f"\t\t<name>{escape(name)}</name>" for name in obj.names]  # a chain id from a Sentences file may hold & or <
        if obj.box is not None:
            lines.append("\t\t<bndbox>")
            lines += [f"\t\t\t<{tag}>{value + 1}</{tag}>" for tag, value in zip(("xmin", "ymin", "xmax", "ymax"), obj.box, strict=True)]
            lines.append("\t\t</bndbox>")
        else:
            lines += [f"\t\t<scene>{int(obj.scene)}</scene>", f"\t\t<nobndbox>{int(obj.nobox)}</nobndbox>"]
        lines.append("\t</object>")
    lines.append("</annotation>")
    return ("\n".join(lines) + "\n").encode()
