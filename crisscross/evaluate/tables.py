"""Optional evaluation inputs read from files: class labels (PMRP) and BISON triples.

CSV cells stay text, so a labels column holding single numbers keeps its class 0; rows that do
not parse are quarantined with a reason, never dropped.  BISON triples come as a table
(``caption``, ``target``, ``decoy`` in canonical ids: the bison stage's ``triples.csv`` / ``.parquet``)
or in COCO-BISON's released JSON shape (``bison_annotations.cocoval2014.json``, or the bison
stage's ``bison_annotations.json``): ``info.source`` names the id scheme (``coco``), each entry's
``caption_id`` and ``true_image_id`` are native ids and the decoy is the other of its two
``image_candidates``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from io import BytesIO
from typing import Any

import pandas as pd
import pyarrow as pa

from crisscross.core import io
from crisscross.core.errors import InputError, one_line
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, IdFormError, scheme_for, split_id
from crisscross.core.quarantine import Rejected, reject

# What pandas and pyarrow raise for values Python cannot hold or bytes that are no CSV table:
# pandas' ParserError, EmptyDataError and UnicodeDecodeError (ValueErrors), Arrow's errors,
# OverflowError (a Parquet timestamp past the year 9999).
_TABLE_ERRORS = (ValueError, OverflowError, pa.ArrowException)


def read_table(path: str) -> pa.Table:
    """CSV cells stay text (a single label "3" must not become an integer column).  A file that
    is no readable table raises :class:`InputError` naming it."""
    if not path.endswith(".csv"):
        return io.read_parquet(path)
    data = io.read_bytes(path)
    try:
        return pa.Table.from_pandas(pd.read_csv(BytesIO(data), dtype=str, keep_default_na=False), preserve_index=False)
    except _TABLE_ERRORS as error:
        raise InputError(f"{path}: not a readable CSV table ({one_line(error)})") from error


def located_rows(path: str) -> list[tuple[str, dict[str, Any]]]:
    """Each row of a table with where a user finds it: ``file:line`` in a CSV (the header is
    line 1), ``file:row n`` (from 1) in a parquet."""
    table = read_table(path)
    try:
        rows = table.to_pylist()
    except _TABLE_ERRORS as error:
        raise InputError(f"{path}: holds values Python cannot hold ({one_line(error)})") from error
    if path.endswith(".csv"):
        return [(f"{path}:{n}", row) for n, row in enumerate(rows, start=2)]
    return [(f"{path}:row {n}", row) for n, row in enumerate(rows, start=1)]


def _canonical(value: Any, kind: str) -> str:
    text = "" if value is None else str(value)
    if split_id(text)[1] != kind:
        raise IdFormError(f"{text!r} is not a canonical {kind} id")
    return text


def read_labels(path: str) -> tuple[dict[str, tuple[int, ...]], list[Rejected]]:
    """Image id → class numbers; unparseable rows are quarantined."""
    labels: dict[str, tuple[int, ...]] = {}
    rejected = []
    for where, row in located_rows(path):
        try:
            image = _canonical(row.get("image_id"), IMAGE_KIND)
            raw = row.get("labels")
            values = [v for v in raw.split(";") if v.strip()] if isinstance(raw, str) else list(raw if raw is not None else [])
            classes = tuple(sorted({int(v) for v in values}))
            if any(c < 0 for c in classes):
                raise ValueError(f"negative class number in {classes}")
        except (IdFormError, TypeError, ValueError, OverflowError) as error:  # OverflowError: int() of an infinite float
            rejected.append(reject("label", row.get("image_id"), "bad-label-row", str(error), where, row))
            continue
        labels[image] = classes
    return labels, rejected


BISON_SCHEMA = pa.schema([(c, pa.string()) for c in ("caption", "target", "decoy")])


class _BadTriple(ValueError):
    """A triple refused, with its quarantine reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _triple(caption: str, target: str, decoy: str, image_of: Mapping[str, str] | None, images: Collection[str]) -> dict[str, str]:
    """A (caption, target, decoy) row, checked: two different images and, given the items
    (``image_of``: caption → image, ``images``), ids they hold and a caption of the target,
    so a triple from another collection is quarantined instead of scored as outside the gallery."""
    if target == decoy:
        raise _BadTriple("same-image", f"target and decoy are the same image {target}")
    if image_of is not None:
        unknown = [i for i in (target, decoy) if i not in images] + ([caption] if caption not in image_of else [])
        if unknown:
            raise _BadTriple("unknown-id", f"{', '.join(unknown)} not in the items")
        if image_of[caption] != target:
            raise _BadTriple("caption-not-of-target", f"caption {caption} is of image {image_of[caption]}, not of target {target}")
    return {"caption": caption, "target": target, "decoy": decoy}


def read_bison(path: str, image_of: Mapping[str, str] | None = None, images: Collection[str] = ()) -> tuple[pa.Table, list[Rejected]]:
    """(caption, target, decoy) rows of a BISON table or JSON (module docstring), checked by
    :func:`_triple` against the items when ``image_of`` is given; bad rows quarantined."""
    if path.endswith(".json"):
        return read_bison_json(path, image_of, images)
    rows, rejected = [], []
    for where, row in located_rows(path):
        try:
            rows.append(
                _triple(
                    _canonical(row.get("caption"), CAPTION_KIND),
                    _canonical(row.get("target"), IMAGE_KIND),
                    _canonical(row.get("decoy"), IMAGE_KIND),
                    image_of,
                    images,
                )
            )
        except IdFormError as error:
            rejected.append(reject("bison", row.get("caption"), "bad-id", str(error), where, row))
        except _BadTriple as error:
            rejected.append(reject("bison", row.get("caption"), error.reason, str(error), where, row))
    return pa.Table.from_pylist(rows, schema=BISON_SCHEMA), rejected


def read_bison_json(path: str, image_of: Mapping[str, str] | None = None, images: Collection[str] = ()) -> tuple[pa.Table, list[Rejected]]:
    """The released COCO-BISON JSON shape; an entry without two candidates, one of them its
    ``true_image_id``, is ``bad-triple``, an id the scheme refuses ``bad-id``, then :func:`_triple`."""
    document = io.json_document(io.read_bytes(path), path)
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise InputError(f"{path}: a BISON JSON is an object with a 'data' list (and 'info'), as bison_annotations.cocoval2014.json")
    info = document.get("info") if isinstance(document.get("info"), dict) else {}
    scheme = scheme_for(str(info.get("source") or "coco"))
    rows, rejected = [], []
    for n, entry in enumerate(document["data"]):
        where = f"{path}:data[{n}]"
        entry = entry if isinstance(entry, dict) else {"entry": entry}
        candidates = entry.get("image_candidates")
        images_of_entry = [c.get("image_id") for c in candidates if isinstance(c, dict)] if isinstance(candidates, list) else []
        true = entry.get("true_image_id")
        if len(images_of_entry) != 2 or true not in images_of_entry or entry.get("caption_id") is None:
            detail = (
                f"needs caption_id, true_image_id and two image_candidates one of which is the true image, got {images_of_entry} / {true!r}"
            )
            rejected.append(reject("bison", entry.get("bison_id"), "bad-triple", detail, where, entry))
            continue
        decoy = images_of_entry[1] if images_of_entry[0] == true else images_of_entry[0]
        try:
            canonical = (scheme.parse_caption(entry["caption_id"]), scheme.parse_image(true), scheme.parse_image(decoy))
            rows.append(_triple(*canonical, image_of, images))
        except IdFormError as error:
            rejected.append(reject("bison", entry.get("bison_id"), "bad-id", str(error), where, entry))
        except _BadTriple as error:
            rejected.append(reject("bison", entry.get("bison_id"), error.reason, str(error), where, entry))
    return pa.Table.from_pylist(rows, schema=BISON_SCHEMA), rejected
