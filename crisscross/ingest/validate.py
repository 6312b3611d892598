"""Validation of read records: pure functions shaped for Beam, where the caller groups by key.

Each function returns what it keeps and a :class:`Rejected` for everything it does not, so the
quarantine accounts for every record.  Reason codes: ``null-text``, ``empty-text``,
``text-too-long``, ``path-outside-images``, ``not-a-regular-file``, ``duplicate-id``,
``unknown-image``, ``no-captions``.
Image files are checked but never rejected for their pixels: an image without readable pixels
(a truncated file, or one over :data:`crisscross.core.images.MAX_IMAGE_PIXELS`) stays an item,
since text-only builds are legitimate.  An image whose file name points outside the images folder
is rejected, though (:func:`check_image_path`), so a source file can never make the pipeline open,
read or publish the path of a file elsewhere on the machine or in the bucket; so is one whose file
is a FIFO, socket, device or directory, which is never opened (reading a FIFO waits for a writer).
"""

from __future__ import annotations

import functools
import json
import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import asdict, replace
from pathlib import PurePosixPath
from typing import NamedTuple, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystems import FileSystems

from crisscross.core import io
from crisscross.core.images import UnreadableImageError, image_size
from crisscross.core.quarantine import Rejected, reject
from crisscross.ingest.records import (
    PIXELS_MISSING,
    PIXELS_OK,
    PIXELS_UNREADABLE,
    CaptionRecord,
    ImageRecord,
    caption_records,
    caption_rows,
)

R = TypeVar("R", ImageRecord, CaptionRecord)

DEFAULT_MAX_TEXT_LENGTH = 1000  # characters; the ingest param ``max_text_length`` (CxC captions are ~50)


def _kind(record: ImageRecord | CaptionRecord) -> str:
    return "image" if isinstance(record, ImageRecord) else "caption"


def check_caption_text(c: CaptionRecord, max_length: int) -> CaptionRecord | Rejected:
    """Normalise whitespace (strip, collapse runs), so the same sentence always encodes the same.

    A text longer than ``max_length`` characters (code points, counted after normalisation) is
    rejected as ``text-too-long``: rater pages, encoders and exports all assume a sentence.
    """
    if c.text is None:
        return reject("caption", c.caption_id, "null-text", "the source gives no text for this caption", c.source, asdict(c))
    text = " ".join(c.text.split())
    if not text:
        return reject("caption", c.caption_id, "empty-text", f"text {c.text!r} is empty or only whitespace", c.source, asdict(c))
    if len(text) > max_length:
        detail = f"text is {len(text)} characters long, over the limit of {max_length} (ingest param max_text_length)"
        return reject("caption", c.caption_id, "text-too-long", detail, c.source, asdict(c))
    return c if text == c.text else replace(c, text=text)


def _source_order(record: ImageRecord | CaptionRecord) -> tuple[int, str, str]:
    # position first; the rest only breaks ties (records from different files), deterministically.
    return record.position, record.source, json.dumps(asdict(record), sort_keys=True)


def first_of_duplicates(key: str, records: Iterable[R]) -> tuple[R, list[Rejected]]:
    """Keep the record read first (lowest ``position``); every other one is a ``duplicate-id``."""
    ordered = list(records)
    if not ordered:
        raise ValueError(f"no records for key {key!r}")
    if len(ordered) > 1:  # the sort key serialises the record: only duplicates pay for it
        ordered.sort(key=_source_order)
    kept, *others = ordered
    rejected = [reject(_kind(r), key, "duplicate-id", f"{key} was already read at {kept.source}", r.source, asdict(r)) for r in others]
    return kept, rejected


def first_of_each(records: Iterable[R], key: Callable[[R], str]) -> tuple[list[R], list[Rejected]]:
    """:func:`first_of_duplicates` for every key among ``records`` (one shard of them, in Beam)."""
    by_key: dict[str, list[R]] = {}
    for record in records:
        by_key.setdefault(key(record), []).append(record)
    kept: list[R] = []
    rejected: list[Rejected] = []
    for k, group in by_key.items():
        first, others = first_of_duplicates(k, group)
        kept.append(first)
        rejected.extend(others)
    return kept, rejected


def first_captions(rows: pa.Table) -> tuple[pa.Table, list[Rejected]]:
    """:func:`first_of_each` caption id of a :data:`CAPTION_ROWS_SCHEMA` table (one shard of them):
    only the rows of an id that repeats become records."""
    counts = pc.value_counts(rows["caption_id"])
    repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    if not len(repeated):
        return rows, []
    is_repeated = pc.is_in(rows["caption_id"], value_set=repeated)
    firsts, rejected = first_of_each(caption_records(rows.filter(is_repeated)), lambda c: c.caption_id)
    return pa.concat_tables([rows.filter(pc.invert(is_repeated)), caption_rows(firsts)]), rejected


def join_captions(images: Iterable[ImageRecord], captions: pa.Table) -> tuple[list[tuple[ImageRecord, int]], pa.Table, list[Rejected]]:
    """Images with their captions (a :data:`CAPTION_ROWS_SCHEMA` table), one shard of each: the
    first image of each id (:func:`first_of_duplicates`) with its number of captions, the captions
    of those images, and the rejects: the captions of an image not read (``unknown-image``), an
    image without captions (``no-captions``), a duplicate image."""
    by_id: dict[str, list[ImageRecord]] = {}
    for image in images:
        by_id.setdefault(image.image_id, []).append(image)
    known = pc.is_in(captions["image_id"], value_set=pa.array(list(by_id), pa.string()))
    kept = captions.filter(known)
    rejected = [
        reject("caption", c.caption_id, "unknown-image", f"no image {c.image_id} was read", c.source, asdict(c))
        for c in caption_records(captions.filter(pc.invert(known)))
    ]
    counts = pc.value_counts(kept["image_id"])
    captions_of = dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True))
    joined: list[tuple[ImageRecord, int]] = []
    for image_id, of_image in by_id.items():
        image, duplicates = first_of_duplicates(image_id, of_image)
        rejected += duplicates
        if image_id in captions_of:
            joined.append((image, captions_of[image_id]))
        else:
            rejected.append(reject("image", image_id, "no-captions", "no caption of this image was kept", image.source, asdict(image)))
    return joined, kept, rejected


def _candidates(file_name: str) -> list[str]:
    """Names to try in the images directory: the name as given, then its base name."""
    given = file_name.strip()
    base = PurePosixPath(given).name
    return [name for name in dict.fromkeys([given, base]) if name]


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _path(images_dir: str, name: str) -> str:
    """Where ``name`` points: itself when absolute (``/…`` or a URI), else joined to the folder."""
    if name.startswith("/") or _SCHEME.match(name):
        return name
    return FileSystems.join(images_dir, name)


def _resolved(path: str) -> str:
    """The canonical form of ``path`` for the confinement test: ``os.path.realpath`` for a local
    path (symlinks followed, so a link pointing elsewhere counts as elsewhere), lexical
    normalisation for a URI (object stores have no symlinks, but ``..`` must not climb out)."""
    scheme = _SCHEME.match(path)
    if scheme is None:
        return os.path.realpath(path)
    rest = path[scheme.end() :]
    return scheme.group(0) + posixpath.normpath("/" + rest).lstrip("/")


@functools.lru_cache(maxsize=16)
def _resolved_root(images_dir: str) -> str:
    """The images folder resolved once per process, not once per image (a stage has one folder)."""
    return _resolved(images_dir)


def _is_inside(resolved: str, root: str) -> bool:
    return resolved == root or resolved.startswith(root.rstrip("/") + "/")


def _plain(name: str) -> bool:
    """Whether ``name`` names an entry of the folder itself: no folder on the way, no ``.``/``..``."""
    return "/" not in name and name not in ("", ".", "..")


def _resolved_in(images_dir: str, name: str) -> str:
    """``_resolved(_path(images_dir, name))``.  A plain file name in a local folder that is not a
    symlink resolves to the resolved folder joined with it: one ``lstat`` instead of
    ``realpath``'s one per component of the folder (millions of system calls for all of COCO)."""
    if _plain(name) and _SCHEME.match(images_dir) is None and not os.path.islink(os.path.join(images_dir, name)):
        return os.path.join(_resolved_root(images_dir), name)
    return _resolved(_path(images_dir, name))


def _escape(file_name: str, images_dir: str) -> str | None:
    """Why a candidate path of ``file_name`` leaves ``images_dir``, or ``None`` when none does."""
    if "\0" in file_name:
        return "it holds a NUL character, so it names no file"
    root = _resolved_root(images_dir)
    for name in _candidates(file_name):
        target = _resolved_in(images_dir, name)
        if not _is_inside(target, root):
            return f"{name!r} resolves to {target}"
    return None


def _named(path: str, root: str | None) -> str:
    """A path as the output records it: relative to ``root`` (the launching directory) when given."""
    return io.relative(path, root) if root else path


def _found(file_name: str, images_dir: str) -> str | None:
    """The file :func:`check_image_file` reads: the first candidate path that exists."""
    return next((p for p in (_path(images_dir, name) for name in _candidates(file_name)) if FileSystems.exists(p)), None)


def check_image_path(record: ImageRecord, images_dir: str | None, root: str | None = None) -> ImageRecord | Rejected:
    """Refuse an image whose file name leaves the images folder (``path-outside-images``), or
    whose file is not a regular file (``not-a-regular-file``: a FIFO, socket, device or directory).

    Every path :func:`check_image_file` would try (the name as given, its base name) is resolved
    and must lie inside the resolved folder: ``../x.jpg``, an absolute name elsewhere, or a symlink
    in the folder pointing out of it are refused, whether or not the file exists.  An absolute
    name that resolves inside the folder is accepted.  The file it would read is looked at with
    ``stat`` only (in a local folder: an object store holds regular objects only), never opened.
    ``None`` for ``images_dir`` checks nothing.  The reject names paths relative to ``root`` when given.
    """
    if images_dir is None:
        return record
    escape = _escape(record.file_name, images_dir)
    if escape is not None:
        detail = f"file_name {record.file_name!r} is outside the images folder {_named(images_dir, root)}: {escape}"
        return reject("image", record.image_id, "path-outside-images", detail, record.source, asdict(record))
    found = None if io.is_uri(images_dir) else _found(record.file_name, images_dir)
    kind = io.not_regular(found) if found else ""
    return _not_regular(record, found, kind, root) if found and kind else record


def _not_regular(record: ImageRecord, found: str, kind: str, root: str | None) -> Rejected:
    """The reject of an image whose file ``found`` is ``kind`` (``io.file_kind``), not a regular file."""
    refused = io.refusal(_named(found, root), kind)
    return reject("image", record.image_id, refused.reason, str(refused), record.source, asdict(record))


def check_image_file(record: ImageRecord, images_dir: str | None, root: str | None = None) -> ImageRecord:
    """Record whether the image file is there and decodes (``pixels``, ``path``, size).

    ``path`` is recorded relative to ``root`` when given (the directory the stage was launched
    from), so the table's bytes do not depend on how ``images_dir`` was typed or where it lives.

    ``None`` for ``images_dir`` leaves the record unchecked.  The record must have passed
    :func:`check_image_path`: a file name leaving the folder raises ``ValueError`` here rather
    than have a file outside it opened.  A file that has become a FIFO or the like since that
    check is unreadable: :func:`crisscross.core.io.open_input` refuses it too.
    """
    if images_dir is None:
        return record
    escape = _escape(record.file_name, images_dir)
    if escape is not None:
        raise ValueError(f"{record.image_id}: file_name {record.file_name!r} is outside {images_dir} ({escape}); check_image_path first")
    return _with_pixels(record, _found(record.file_name, images_dir), root)


def _with_pixels(record: ImageRecord, path: str | None, root: str | None) -> ImageRecord:
    """``record`` with what its file at ``path`` (``None``: no file) holds: its pixels, size and path."""
    if path is None:
        return record.with_pixels(PIXELS_MISSING)
    try:
        width, height = image_size(path)
    except UnreadableImageError:
        return record.with_pixels(PIXELS_UNREADABLE, path=_named(path, root))
    return record.with_pixels(PIXELS_OK, path=_named(path, root), width=width, height=height)


class _Looked(NamedTuple):
    """A plain file name in a local folder, looked at: its file (``None``: none there) and what the
    file is when not a regular file (``io.file_kind``), else ``""``."""

    found: str | None
    kind: str


def _looked(file_name: str, images_dir: str) -> _Looked | None:
    """What :func:`_escape`, :func:`_found` and ``io.not_regular`` say of ``file_name``, from one
    ``lstat``, when the name is plain (:func:`_plain`) and the folder local: such a name that is no
    symlink stays in the folder, its one candidate path exists when ``lstat`` finds it, and ``stat``
    would see what ``lstat`` sees.  ``None`` (the general rules decide) for a symlink, a name with a
    folder or a NUL, a folder given as a URI."""
    name = file_name.strip()
    if "\0" in name or not _plain(name) or io.is_uri(images_dir):
        return None
    path = os.path.join(images_dir, name)
    try:
        mode = os.lstat(path).st_mode
    except (OSError, ValueError):  # missing (or unnameable): what os.path.islink and exists say too
        return _Looked(None, "")
    if stat.S_ISLNK(mode):
        return None
    return _Looked(path, "" if stat.S_ISREG(mode) else io.file_kind(mode))


def check_image(record: ImageRecord, images_dir: str | None, root: str | None = None) -> ImageRecord | Rejected:
    """:func:`check_image_path`, then :func:`check_image_file` of a record it keeps.  A plain file
    name in a local folder (every COCO image; a hundred thousand with no file) is looked at with one
    ``lstat`` (:func:`_looked`) instead of the general rules' two ``lstat`` and up to three ``stat``."""
    looked = None if images_dir is None else _looked(record.file_name, images_dir)
    if looked is None:
        checked = check_image_path(record, images_dir, root)
        return check_image_file(checked, images_dir, root) if isinstance(checked, ImageRecord) else checked
    if looked.found is not None and looked.kind:
        return _not_regular(record, looked.found, looked.kind, root)
    return _with_pixels(record, looked.found, root)
