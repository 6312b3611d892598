"""Readers: one source file → :class:`ImageRecord`, :class:`CaptionRecord` and :class:`Rejected`.

Stages choose a reader by name and build it from options, ``READERS.create(name, **options)``,
then call ``reader.read(path)`` (a Beam ``FlatMap`` can call it directly).  Every reader accepts
``split``: when given it overrides the split the source states; otherwise the source's split is
used, or ``""`` when the source has none.

What every reader guarantees, so nothing is lost between the source and the quarantine:

* ``source`` is ``<file name>:<n>``: the 1-based physical line for JSONL and CSV, the 1-based row
  for Parquet, and the element path (``images[3]``, ``images[3].sentences[1]``, ``annotations[7]``)
  inside a JSON document; ``position`` orders the records of one file (line, row or index).
* A row that cannot become records becomes one ``Rejected`` (kind ``row``; ``image`` or ``caption``
  for elements of a JSON document) with a reason code: ``bad-encoding`` (the line, or a Parquet
  string, is not UTF-8, or a JSON ``\\udXXX`` escape gives an id or text half a surrogate pair,
  which UTF-8 cannot encode; files are decoded line by line so one bad line does not lose the file),
  ``malformed-row`` (invalid JSON, not an object, a wrong cell count, a value of the wrong type or
  one Python cannot hold, such as a Parquet timestamp past the year 9999), ``missing-field``,
  ``bad-id`` (an id in none of the forms its scheme accepts) and ``conflicting-image`` (a later row
  gives an image another file name or split; its caption is still emitted, the first row wins).
* Caption text is passed through untouched.  Absent or null text becomes ``None``: validation
  rejects it (``null-text``) in one place for every reader.
* A file that cannot be opened (or is not a regular file: a FIFO, socket, device or directory is
  never read), a JSON document that does not parse (including one nested too deeply or holding an
  integer too long for Python), a CSV whose header line cannot be read and a Parquet file that
  cannot be decoded raise :class:`SourceFileError`, whose message is one line naming the file.
  No other exception leaves a reader, whatever the bytes (``tests/ingest/test_fuzz_readers.py``:
  property-based tests on random, mutated and structurally valid files).

Line and row formats repeat an image on every caption row; readers emit each image once, from
its first row.  Duplicate ids are not resolved here: validation keeps the first of them.

A :class:`LineReader` (every record from one line) can also read its file in parts, so several
workers share one file: part ``p`` of ``n`` parses the lines of every ``n``-th block of
:data:`PART_LINES` lines.  A part cannot know an image's first row in the whole file, so it gives
each image as an :class:`ImageSighting`; :func:`settle_image` makes of an image's sightings
exactly the records and rejects the whole file gives, naming the parts to read again
(:meth:`LineReader.contradictions`) in the rare case a part's first row of an image itself
contradicts the file's.
"""

from __future__ import annotations

import codecs
import functools
import io
import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import IO, Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes

from crisscross.core.csv_records import csv_records
from crisscross.core.errors import UserError, one_line
from crisscross.core.ids import IMAGE_KIND, CocoIdScheme, FlickrIdScheme, IdScheme, scheme_for
from crisscross.core.io import JSON_ERRORS, PARQUET_ERRORS, NotARegularFileError, json_document, open_input
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.registry import Registry
from crisscross.core.settings import setting
from crisscross.ingest.records import CaptionRecord, ImageRecord

Item = ImageRecord | CaptionRecord | Rejected


class SourceFileError(UserError, RuntimeError):
    """A whole input file is unusable: it cannot be opened, or it is not the document it should be."""


class Reader(ABC):
    """Turns one file into records; built by :data:`READERS` from keyword options, its fields
    (checked against their types and choices by the registry, as ``ingest.reader_options``)."""

    split: str | None

    @abstractmethod
    def read(self, path: str) -> Iterator[Item]: ...

    def _split(self, stated: object) -> str:
        if self.split is not None:
            return self.split
        if stated is None:
            return ""
        if not isinstance(stated, str):
            raise _RowError("malformed-row", f"split {stated!r} is a {type(stated).__name__}, not a string")
        return stated


READERS: Registry[Reader] = Registry("reader", options=True)


# --- rows -------------------------------------------------------------------------------------


class _RowError(Exception):
    """One row cannot become records; the reader turns it into a ``Rejected``."""

    def __init__(self, reason: str, detail: str, key: str = "") -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.key = key


class _Row(NamedTuple):
    source: str
    position: int
    fields: dict[str, Any]


def _file_name(path: str) -> str:
    return PurePosixPath(path).name  # also right for gs://bucket/dir/file


# What pyarrow raises for bytes that are no readable Parquet: ArrowInvalid (a ValueError),
# OSError, and other ArrowExceptions (ArrowNotImplementedError, ArrowTypeError, …).
# What turning an Arrow value into a Python one raises: UnicodeDecodeError (a ValueError) for a
# string that is not UTF-8, which Arrow does not check on read; OverflowError for a date or time
# beyond Python's range (a timestamp past the year 9999).
_CONVERSION_ERRORS = (ValueError, OverflowError, pa.ArrowException)


def _open(path: str) -> IO[bytes]:
    """The source file (decompressed by its extension, ``.gz`` …); a FIFO, device or directory is refused."""
    try:
        return open_input(path, CompressionTypes.AUTO)
    except NotARegularFileError as e:
        raise SourceFileError(str(e)) from e
    except OSError as e:
        raise SourceFileError(f"cannot open input file {path}: {one_line(e)}") from e


PART_LINES = 4096  # lines per block of a part (LineReader.read_part): parts share the file evenly, an image's rows stay together


def _owned(part: int, parts: int) -> Callable[[int], bool]:
    """Whether a (1-based) line belongs to part ``part`` of ``parts``: every ``parts``-th block of :data:`PART_LINES`."""
    return lambda number: parts == 1 or (number - 1) // PART_LINES % parts == part


READ_BLOCK = 1 << 20  # bytes per read of a line source (_raw_lines)


def _raw_lines(handle: IO[bytes], block: int = READ_BLOCK) -> Iterator[bytes]:
    """The lines ``handle.readline`` gives, without their ``\\n``, read ``block`` bytes at a time:
    ``readline`` reads 8 KiB at a time, and each read lets go of the interpreter lock, which the
    parsing thread must then wait to take back from the threads that check image files."""
    pending: list[bytes] = []  # the start of a line longer than the blocks read so far
    for data in iter(functools.partial(handle.read, block), b""):
        first, *lines = data.split(b"\n")
        if not lines:
            pending.append(first)
            continue
        yield b"".join([*pending, first])
        *whole, last = lines
        yield from whole
        pending = [last]
    if any(pending):
        yield b"".join(pending)


def _decoded_lines(path: str, part: int = 0, parts: int = 1) -> Iterator[tuple[int, str] | Rejected]:
    """``(line number, text)`` per line of the part (:func:`_owned`); a line that is not UTF-8
    becomes a ``bad-encoding`` reject."""
    name, owned = _file_name(path), _owned(part, parts)
    with _open(path) as handle:
        for number, raw in enumerate(_raw_lines(handle), start=1):
            if not owned(number):
                continue
            if number == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            raw = raw.rstrip(b"\r\n")
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                original = raw.decode("utf-8", errors="backslashreplace")
                yield reject("row", "", "bad-encoding", f"not UTF-8: {e}", f"{name}:{number}", json.dumps(original))


def _jsonl_rows(path: str, part: int = 0, parts: int = 1) -> Iterator[_Row | Rejected]:
    name = _file_name(path)
    for line in _decoded_lines(path, part, parts):
        if isinstance(line, Rejected):
            yield line
            continue
        number, text = line
        if not text.strip():
            continue  # a blank line holds no record
        source = f"{name}:{number}"
        try:
            row = json.loads(text)
        except JSON_ERRORS as e:
            yield reject("row", "", "malformed-row", f"invalid JSON: {one_line(e)}", source, json.dumps(text))
            continue
        if not isinstance(row, dict):
            yield reject("row", "", "malformed-row", f"a JSON {type(row).__name__}, not an object", source, json.dumps(text))
            continue
        yield _Row(source, number, row)


def _csv_rows(path: str, needed: Iterable[str]) -> Iterator[_Row | Rejected]:
    """Rows of a CSV file whose first line is a header holding the ``needed`` columns."""
    name = _file_name(path)
    pending: list[Rejected] = []  # bad-encoding rejects, yielded in file order

    def good_lines() -> Iterator[tuple[int, str]]:
        for line in _decoded_lines(path):
            if isinstance(line, Rejected):
                pending.append(line)
            else:
                yield line[0], line[1] + "\n"

    records = csv_records(good_lines())
    header = next(records, None)
    if header is not None and header.error is not None:
        raise SourceFileError(f"{path}: the first line must be a readable CSV header ({one_line(header.error)})") from header.error
    if header is None or header.cells is None or pending or header.line != 1:
        raise SourceFileError(f"{path}: the first line must be a readable CSV header")
    columns = header.cells
    missing = sorted(set(needed) - set(columns))
    if missing:
        raise SourceFileError(f"{path}: no column(s) {', '.join(missing)} in header {columns}")
    for record in records:
        yield from pending
        pending.clear()
        if record.cells == []:
            continue  # a blank line holds no record
        source = f"{name}:{record.line}"
        problem = f"invalid CSV: {record.error}" if record.error is not None else ""
        if record.cells is not None and len(record.cells) != len(columns):
            problem = f"{len(record.cells)} cells, header has {len(columns)}"
        if problem:
            yield reject("row", "", "malformed-row", problem, source, json.dumps(record.text.removesuffix("\n")))
            continue
        yield _Row(source, record.line, dict(zip(columns, record.cells, strict=True)))
    yield from pending


def _parquet_rows(path: str, needed: Iterable[str]) -> Iterator[_Row | Rejected]:
    name = _file_name(path)
    with _open(path) as handle:
        data = handle.read()
    try:
        parquet = pq.ParquetFile(io.BytesIO(data))
        names = parquet.schema_arrow.names
    except PARQUET_ERRORS as e:
        raise SourceFileError(f"{path} is not a Parquet file: {one_line(e)}") from e
    missing = sorted(set(needed) - set(names))
    if missing:
        raise SourceFileError(f"{path}: no column(s) {', '.join(missing)} in {names}")
    number = 0
    batches = parquet.iter_batches()
    while True:
        try:  # a damaged page is found only when its batch is decoded
            batch = next(batches, None)
        except PARQUET_ERRORS as e:
            raise SourceFileError(f"{path}: cannot decode the Parquet rows after row {number}: {one_line(e)}") from e
        if batch is None:
            break
        for row in _batch_rows(batch, set(needed)):
            number += 1
            if isinstance(row, _Unconvertible):
                yield reject("row", "", row.reason, row.detail, f"{name}:{number}", row.record)
            else:
                yield _Row(f"{name}:{number}", number, row)


class _Unconvertible(NamedTuple):
    """A Parquet row with a value Python cannot represent in a column the reader needs; ``record``
    shows such values as Arrow writes them."""

    reason: str
    detail: str
    record: dict[str, Any]


def _batch_rows(batch: pa.RecordBatch, needed: set[str]) -> list[dict[str, Any] | _Unconvertible]:
    """The batch's rows as dicts; when one cannot be converted, rows are converted one by one, so
    only those with an unconvertible value in a ``needed`` column go to the quarantine (a value
    elsewhere is kept as Arrow's text of it)."""
    try:
        return batch.to_pylist()
    except _CONVERSION_ERRORS:
        return [_convert_row(batch.slice(i, 1), needed) for i in range(batch.num_rows)]


def _convert_row(one: pa.RecordBatch, needed: set[str]) -> dict[str, Any] | _Unconvertible:
    row: dict[str, Any] = {}
    problems: list[tuple[str, BaseException]] = []
    for column_name, column in zip(one.schema.names, one.columns):
        try:
            row[column_name] = column.to_pylist()[0]
        except _CONVERSION_ERRORS as e:
            if column_name in needed:
                problems.append((column_name, e))
            row[column_name] = _arrow_text(column)
    if not problems:
        return row
    column_name, error = problems[0]
    reason = "bad-encoding" if isinstance(error, UnicodeDecodeError) else "malformed-row"
    return _Unconvertible(reason, f"column {column_name!r}: {one_line(error)}", row)


def _arrow_text(column: pa.Array) -> str:
    """One value as text without making it a Python value: bytes of a string, else Arrow's format."""
    try:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            return column.cast(pa.large_binary()).to_pylist()[0].decode("utf-8", errors="backslashreplace")
        return column.to_string(skip_new_lines=True)
    except _CONVERSION_ERRORS:
        return f"<unprintable {column.type}>"


def _json_document(path: str) -> Any:
    with _open(path) as handle:
        return json_document(handle.read(), path, SourceFileError)


# --- fields -----------------------------------------------------------------------------------


def _required(row: Mapping[str, Any], name: str, key: str = "") -> Any:
    value = row.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise _RowError("missing-field", f"no value for {name!r}", key)
    return value


def _id(parse: Callable[[object], str], value: object, what: str, key: str = "") -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _RowError("bad-id", f"{what} {value!r} is a {type(value).__name__}, not a string or integer", key)
    try:
        return parse(value)
    except ValueError as e:  # IdFormError, or an integer id longer than Python converts
        raise _RowError("bad-id", f"{what}: {one_line(e)}", key) from e


@functools.lru_cache(maxsize=1 << 17, typed=True)
def _image_id(scheme: IdScheme, value: str | int) -> str:
    """``scheme.parse_image(value)``, remembered for the last 131,072 values: every caption row
    names its image, so a caption file names each image several times (five in COCO)."""
    return scheme.parse_image(value)


def _string(value: object, what: str, key: str = "") -> str:
    if not isinstance(value, str):
        raise _RowError("malformed-row", f"{what} {value!r} is a {type(value).__name__}, not a string", key)
    return value


def _text(value: object, what: str, key: str) -> str | None:
    return None if value is None else _string(value, what, key)


def _flickr_caption(image_id: str, index: int) -> str:
    """``f30k:cap:<photo>#<index>`` of a parsed Flickr image id.

    Built from the image id, not the file name as written: the file name was accepted by
    ``parse_image``, which also takes surrounding blanks, a directory or the canonical form, all
    of which ``caption_native`` would refuse.
    """
    try:
        return _FLICKR.caption(_FLICKR.caption_native(_FLICKR.native(image_id, IMAGE_KIND), index))
    except ValueError as e:  # an index longer than Python converts
        raise _RowError("bad-id", f"caption id: {one_line(e)}") from e


def _first_text(candidates: Iterable[str | None]) -> str | None:
    """The first candidate with visible text, else the first that is not null (blank), else None."""
    present = [c for c in candidates if c is not None]
    return next((c for c in present if c.strip()), present[0] if present else None)


def _index(value: object, what: str, key: str = "") -> int:
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        try:
            return int(value)
        except ValueError as e:  # more digits than Python converts
            raise _RowError("bad-id", f"{what}: {one_line(e)}", key) from e
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _RowError("bad-id", f"{what} {value!r} is not a non-negative integer", key)
    return value


class _Fields(NamedTuple):
    """What one caption row says: its caption and the image it describes."""

    image_id: str
    file_name: str
    caption_id: str
    text: str | None
    split: str


def _found(rows: Iterable[_Row | Rejected], convert: Callable[[dict[str, Any]], _Fields]) -> Iterator[tuple[_Row, _Fields] | Rejected]:
    """Each row with what it says, or the reject saying why it says nothing usable."""
    for row in rows:
        if isinstance(row, Rejected):
            yield row
            continue
        try:
            found = convert(row.fields)
            _encodable(found.image_id, found.file_name, found.caption_id, found.text, found.split)
        except _RowError as e:
            yield reject("row", _utf8_key(e.key), e.reason, e.detail, row.source, row.fields)
            continue
        yield row, found


def _agrees(first: ImageRecord, file_name: str, split: str) -> bool:
    """Whether a row gives its image the file name and split of the image's first row (else: ``conflicting-image``)."""
    return (first.file_name, first.split) == (file_name, split)


def _conflicting_image(first: ImageRecord, file_name: str, split: str, source: str, fields: dict[str, Any]) -> Rejected:
    """The reject of a row that does not agree with its image's first row (:func:`_agrees`)."""
    detail = f"file_name {file_name!r}, split {split!r} here, but {first.file_name!r}, split {first.split!r} at {first.source}"
    return reject("image", first.image_id, "conflicting-image", detail, source, fields)


class _Contradicting(NamedTuple):
    """A row of a part that gives its image another file name or split than the part's first row of it."""

    file_name: str
    split: str
    source: str
    fields: dict[str, Any]


def _caption_rows(
    rows: Iterable[_Row | Rejected],
    convert: Callable[[dict[str, Any]], _Fields],
    contradicting: dict[str, list[_Contradicting]] | None = None,
) -> Iterator[Item]:
    """Records from rows that each hold one caption and its image; each image is emitted once.
    With ``contradicting``, a row that does not agree with its image's first row is kept there, by
    image id, instead of rejected (a part's, :func:`_sighted_caption_rows`)."""
    images: dict[str, ImageRecord] = {}
    for usable in _found(rows, convert):
        if isinstance(usable, Rejected):
            yield usable
            continue
        row, found = usable
        first = images.get(found.image_id)
        if first is None:
            first = ImageRecord(found.image_id, found.file_name, found.split, row.source, row.position)
            images[found.image_id] = first
            yield first
        elif not _agrees(first, found.file_name, found.split):
            if contradicting is None:
                yield _conflicting_image(first, found.file_name, found.split, row.source, row.fields)
            else:
                contradicting.setdefault(found.image_id, []).append(_Contradicting(found.file_name, found.split, row.source, row.fields))
        yield CaptionRecord(found.caption_id, found.image_id, found.text, found.split, row.source, row.position)


class ImageSighting(NamedTuple):
    """An image as one part of a file gives it (:meth:`LineReader.read_part`): its record from the
    part's first row of it, and the part's rows that contradict that row."""

    part: int
    image: ImageRecord
    contradicting: tuple[_Contradicting, ...]


def _sighted_caption_rows(rows: Iterable[_Row | Rejected], convert: Callable[[dict[str, Any]], _Fields], part: int) -> Iterator[Any]:
    """:func:`_caption_rows` of one part: its captions and row rejects, then one :class:`ImageSighting` per image."""
    images: list[ImageRecord] = []
    contradicting: dict[str, list[_Contradicting]] = {}
    for item in _caption_rows(rows, convert, contradicting):
        if isinstance(item, ImageRecord):
            images.append(item)
        else:
            yield item
    for image in images:
        yield ImageSighting(part, image, tuple(contradicting.get(image.image_id, ())))


def settle_image(sightings: Iterable[ImageSighting]) -> tuple[ImageRecord, list[Rejected], list[int]]:
    """One image's sightings from the parts of a file → its record (the file's first row of it), the
    ``conflicting-image`` rejects of rows that contradict that row, and the parts whose own first row
    contradicts it: which of their rows do is not known from the sighting, so those parts are read
    again for the image (:meth:`LineReader.contradictions`)."""
    ordered = sorted(sightings, key=lambda sighting: sighting.image.position)
    first = ordered[0].image
    rejected, again = [], []
    for sighting in ordered:
        if _agrees(first, sighting.image.file_name, sighting.image.split):
            rejected += [_conflicting_image(first, *row) for row in sighting.contradicting]
        else:
            again.append(sighting.part)
    return first, rejected, again


def _element(kind: str, source: str, element: object, build: Callable[[dict[str, Any]], Item]) -> Item:
    """The record an element of a JSON document describes, or the one reject saying why not."""
    if not isinstance(element, dict):
        record = json.dumps(element) if isinstance(element, str) else element  # reject() takes a str as JSON already
        return reject(kind, "", "malformed-row", f"a JSON {type(element).__name__}, not an object", source, record)
    try:
        item = build(element)
        if isinstance(item, ImageRecord):
            _encodable(item.image_id, item.file_name, item.split)
        elif isinstance(item, CaptionRecord):
            _encodable(item.caption_id, item.image_id, item.text, item.split)
        return item
    except _RowError as e:
        return reject(kind, _utf8_key(e.key), e.reason, e.detail, source, element)


def _encodable(*values: str | None) -> None:
    """Refuse text UTF-8 cannot encode: a JSON ``\\udXXX`` escape can write half a surrogate pair,
    which decodes to a Python string but can never be written to Parquet or any UTF-8 file."""
    for value in values:
        if value is not None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise _RowError("bad-encoding", f"{value!r} holds a lone surrogate, which UTF-8 cannot encode: {e.reason}") from e


def _utf8_key(key: str) -> str:
    """A reject's key (an id read from the row) as text UTF-8 can encode, surrogates escaped."""
    return key.encode("utf-8", errors="backslashreplace").decode("utf-8")


# --- readers ----------------------------------------------------------------------------------


class LineReader(Reader):
    """A reader of JSON Lines whose every record comes from one line (``_fields`` reads it), so the
    file can be read in parts (module docstring)."""

    def read(self, path: str) -> Iterator[Item]:
        return _caption_rows(_jsonl_rows(path), self._fields)

    def read_part(self, path: str, part: int, parts: int) -> Iterator[Item | ImageSighting]:
        """Part ``part`` of ``parts``: its captions and rejects, then an :class:`ImageSighting` per image."""
        return _sighted_caption_rows(_jsonl_rows(path, part, parts), self._fields, part)

    def contradictions(self, path: str, part: int, parts: int, firsts: Mapping[str, ImageRecord]) -> Iterator[Rejected]:
        """The ``conflicting-image`` rejects of the part's rows of the images in ``firsts`` (their
        records, as :func:`settle_image` settled them): the part read again."""
        for usable in _found(_jsonl_rows(path, part, parts), self._fields):
            if isinstance(usable, Rejected) or usable[1].image_id not in firsts:
                continue
            row, found = usable
            first = firsts[found.image_id]
            if not _agrees(first, found.file_name, found.split):
                yield _conflicting_image(first, found.file_name, found.split, row.source, row.fields)

    @abstractmethod
    def _fields(self, row: dict[str, Any]) -> _Fields: ...


_COCO = CocoIdScheme()
_FLICKR = FlickrIdScheme()
_COCO_IMAGE = functools.partial(_image_id, _COCO)
_FLICKR_IMAGE = functools.partial(_image_id, _FLICKR)

# Karpathy's sentid is his own running caption index, not an MS-COCO annotation id.
KARPATHY_COCO_CAPTIONS = "coco-karpathy"

TEXT_FIELDS = {
    "tok": ("caption_tok",),
    "raw": ("caption_raw",),
    "tok-then-raw": ("caption_tok", "caption_raw"),
    "raw-then-tok": ("caption_raw", "caption_tok"),
}


@READERS.register("coco-karpathy-jsonl")
@dataclass(frozen=True, kw_only=True)
class CocoKarpathyJsonl(LineReader):
    """COCO captions with Karpathy ids, one caption per line (``test5k.jsonl``, ``val5k_partial.jsonl``).

    Fields ``image_id``, ``file_name``, ``caption_id`` (the MS-COCO caption annotation id, so ids are
    ``coco:cap:<id>``), ``caption_tok``, ``caption_raw``.  ``text`` chooses which text is used; the
    ``-then-`` modes fall back to the other field when the first is null or blank.  The lines hold
    no split, so records get the ``split`` option, or ``""``.
    """

    split: str | None = None
    text: str = setting("tok-then-raw", choices=tuple(TEXT_FIELDS))

    def _fields(self, row: dict[str, Any]) -> _Fields:
        caption_id = _id(_COCO.parse_caption, _required(row, "caption_id"), "caption_id")
        image_id = _id(_COCO_IMAGE, _required(row, "image_id", caption_id), "image_id", caption_id)
        file_name = _string(_required(row, "file_name", caption_id), "file_name", caption_id)
        text = _first_text(_text(row.get(name), name, caption_id) for name in TEXT_FIELDS[self.text])
        return _Fields(image_id, file_name, caption_id, text, self._split(None))


@READERS.register("flickr30k-karpathy-jsonl")
@dataclass(frozen=True, kw_only=True)
class Flickr30kKarpathyJsonl(LineReader):
    """Flickr30k captions, one per line (``karpathy_imgid``, ``file_name``, ``caption_index``, ``caption_tok``).

    Images are ``f30k:img:<photo>`` from the file name and captions ``f30k:cap:<photo>#<index>``,
    the ``<photo>.jpg#<index>`` form Flickr30k and its derivatives publish.
    """

    split: str | None = None

    def _fields(self, row: dict[str, Any]) -> _Fields:
        file_name = _string(_required(row, "file_name"), "file_name")
        image_id = _id(_FLICKR_IMAGE, file_name, "file_name")
        index = _index(_required(row, "caption_index"), "caption_index")
        caption_id = _flickr_caption(image_id, index)
        text = _text(row.get("caption_tok"), "caption_tok", caption_id)
        return _Fields(image_id, file_name, caption_id, text, self._split(None))


@READERS.register("coco-captions")
@dataclass(frozen=True, kw_only=True)
class CocoCaptions(Reader):
    """Official COCO ``captions_*.json``: ``images`` (``id``, ``file_name``) and ``annotations``
    (``id``, ``image_id``, ``caption``), ids in the ``coco`` namespace.

    Every listed image is emitted, with or without annotations, so validation can report images
    that have no captions instead of them vanishing here.
    """

    split: str | None = None

    def read(self, path: str) -> Iterator[Item]:
        name = _file_name(path)
        document = _json_document(path)
        if not isinstance(document, dict) or not all(isinstance(document.get(k), list) for k in ("images", "annotations")):
            raise SourceFileError(f"{path} is not a COCO captions file: it needs 'images' and 'annotations' lists")
        for i, element in enumerate(document["images"]):
            source = f"{name}:images[{i}]"
            yield _element("image", source, element, lambda e: self._image(e, source, i))  # noqa: B023 (called at once by _element)
        for i, element in enumerate(document["annotations"]):
            source = f"{name}:annotations[{i}]"
            yield _element("caption", source, element, lambda e: self._caption(e, source, i))  # noqa: B023 (called at once by _element)

    def _image(self, element: dict[str, Any], source: str, position: int) -> ImageRecord:
        image_id = _id(_COCO.parse_image, _required(element, "id"), "id")
        file_name = _string(_required(element, "file_name", image_id), "file_name", image_id)
        return ImageRecord(image_id, file_name, self._split(None), source, position)

    def _caption(self, element: dict[str, Any], source: str, position: int) -> CaptionRecord:
        caption_id = _id(_COCO.parse_caption, _required(element, "id"), "id")
        image_id = _id(_COCO_IMAGE, _required(element, "image_id", caption_id), "image_id", caption_id)
        text = _text(element.get("caption"), "caption", caption_id)
        return CaptionRecord(caption_id, image_id, text, self._split(None), source, position)


@READERS.register("karpathy-json")
@dataclass(frozen=True, kw_only=True)
class KarpathyJson(Reader):
    """Karpathy's ``dataset_coco.json`` / ``dataset_flickr30k.json`` (``images[].sentences[]``).

    Text is ``raw``, else the ``tokens`` joined by spaces; the split is Karpathy's
    (``train``/``val``/``test``/``restval``) unless the ``split`` option overrides it.

    Ids.  Flickr30k: ``f30k:img:<photo>`` and ``f30k:cap:<photo>#<index in sentences>``.
    COCO: images are ``coco:img:<cocoid>`` (the MS-COCO image id; parsed from ``filename`` when
    ``cocoid`` is absent).  Captions are **not** in the ``coco`` namespace: ``coco:cap:<N>`` must
    always mean MS-COCO caption annotation N (rendered ``COCO_val2014:sentid:<N>`` for CxC), but
    Karpathy's ``sentid`` is his own running index and his file carries no annotation id.  So his
    captions are ``coco-karpathy:cap:<sentid>``; they can never be mistaken for, or joined to,
    CxC or ECCV caption ids.  Read captions that must join those with ``coco-captions`` or
    ``coco-karpathy-jsonl``.
    """

    split: str | None = None

    def read(self, path: str) -> Iterator[Item]:
        name = _file_name(path)
        document = _json_document(path)
        if not isinstance(document, dict) or not isinstance(document.get("images"), list):
            raise SourceFileError(f"{path} is not a Karpathy dataset file: it needs an 'images' list")
        dataset = document.get("dataset")
        if dataset not in ("coco", "flickr30k"):
            raise SourceFileError(f"{path}: 'dataset' must be 'coco' or 'flickr30k', got {dataset!r}")
        captions = IdScheme(KARPATHY_COCO_CAPTIONS) if dataset == "coco" else _FLICKR
        caption_position = 0  # captions are numbered across the whole file
        for i, element in enumerate(document["images"]):
            source = f"{name}:images[{i}]"
            image = _element("image", source, element, lambda e: self._image(e, source, i, dataset))  # noqa: B023 (called at once by _element)
            yield image
            if isinstance(image, Rejected):
                continue  # its sentences are inside the rejected record
            for j, sentence in enumerate(element["sentences"]):
                at = f"{source}.sentences[{j}]"
                yield _element("caption", at, sentence, lambda s: self._caption(s, at, j, caption_position, image, captions))  # noqa: B023 (called at once by _element)
                caption_position += 1

    def _image(self, element: dict[str, Any], source: str, position: int, dataset: str) -> ImageRecord:
        filename = _string(_required(element, "filename"), "filename")
        if not isinstance(element.get("sentences"), list):
            raise _RowError("missing-field", "no 'sentences' list")
        if dataset == "coco":
            cocoid = element.get("cocoid")
            image_id = _id(_COCO.parse_image, filename if cocoid is None else cocoid, "cocoid")
        else:
            image_id = _id(_FLICKR.parse_image, filename, "filename")
        filepath = _string(element.get("filepath") or "", "filepath", image_id)
        file_name = f"{filepath}/{filename}" if filepath else filename
        return ImageRecord(image_id, file_name, self._split(element.get("split")), source, position)

    def _caption(
        self, element: dict[str, Any], source: str, index: int, position: int, image: ImageRecord, captions: IdScheme
    ) -> CaptionRecord:
        if captions is _FLICKR:
            caption_id = _flickr_caption(image.image_id, index)
        else:
            caption_id = _id(captions.parse_caption, _required(element, "sentid"), "sentid")
        raw = _text(element.get("raw"), "raw", caption_id)
        tokens = element.get("tokens")
        joined = " ".join(tokens) if isinstance(tokens, list) and all(isinstance(t, str) for t in tokens) else None
        return CaptionRecord(caption_id, image.image_id, _first_text([raw, joined]), image.split, source, position)


TABLE_FIELDS = ("image_id", "caption_id", "text", "file_name", "split")
TABLE_FORMATS = (".csv", ".jsonl", ".parquet")


@READERS.register("table")
@dataclass(frozen=True, kw_only=True)
class Table(Reader):
    """A generic caption table, CSV (with a header line), JSONL or Parquet, chosen by extension.

    ``columns`` maps our fields (``image_id``, ``caption_id``, ``text``, ``file_name``, ``split``)
    to the file's column names.  ``image_id`` and ``text`` default to columns of the same name;
    the others are read only when mapped.  Without ``caption_id`` a caption is
    ``<image>#<k>``, its occurrence index among its image's rows; without ``file_name`` the file
    name is the image id as written.  ``namespace`` ``coco`` or ``f30k`` parses ids with those
    schemes, so published forms (``COCO_val2014_….jpg``, ``<photo>.jpg#0``) are accepted; COCO
    captions need a ``caption_id`` column, as ``<image>#<k>`` is no COCO caption id.
    """

    split: str | None = None
    columns: Mapping[str, str] = setting({}, choices=TABLE_FIELDS)
    namespace: str = "ds"

    def __post_init__(self) -> None:
        if not self.namespace or ":" in self.namespace:
            raise ValueError(f"namespace must be non-empty and without ':', got {self.namespace!r}")
        if self.namespace == "coco" and "caption_id" not in self.columns:
            raise ValueError("namespace 'coco' needs a caption_id column: COCO captions are identified by annotation id")
        object.__setattr__(self, "columns", {"image_id": "image_id", "text": "text", **self.columns})

    def read(self, path: str) -> Iterator[Item]:
        suffix = PurePosixPath(path).suffix.lower()
        needed = [self.columns[f] for f in TABLE_FIELDS if f in self.columns]
        if suffix == ".csv":
            rows = _csv_rows(path, needed)
        elif suffix == ".jsonl":
            rows = _jsonl_rows(path)
        elif suffix == ".parquet":
            rows = _parquet_rows(path, needed)
        else:
            raise SourceFileError(f"{path}: table files must end in {', '.join(TABLE_FORMATS)}")
        scheme = scheme_for(self.namespace)
        occurrences: Counter[str] = Counter()

        def convert(row: dict[str, Any]) -> _Fields:
            return self._fields(row, scheme, occurrences)

        return _caption_rows(rows, convert)

    def _fields(self, row: dict[str, Any], scheme: IdScheme, occurrences: Counter[str]) -> _Fields:
        column = self.columns
        written_image = _required(row, column["image_id"])
        image_id = _id(functools.partial(_image_id, scheme), written_image, column["image_id"])
        if "caption_id" in column:
            caption_id = _id(scheme.parse_caption, _required(row, column["caption_id"]), column["caption_id"])
        else:
            native = f"{scheme.native(image_id, IMAGE_KIND)}#{occurrences[image_id]}"
            caption_id = _id(scheme.parse_caption, native, "caption id from image id")
        if "file_name" in column:
            file_name = _string(_required(row, column["file_name"], caption_id), column["file_name"], caption_id)
        else:
            file_name = str(written_image).strip()
        text = _text(row.get(column["text"]), column["text"], caption_id)
        split = self._split(row.get(column["split"]) if "split" in column else None)
        occurrences[image_id] += 1
        return _Fields(image_id, file_name, caption_id, text, split)
