"""Optional evaluation inputs read from files: class labels (PMRP) and BISON triples.

CSV cells stay text, so a labels column holding single numbers keeps its class 0; rows that do
not parse are quarantined with a reason, never dropped.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa

from crisscross.core import io
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, IdFormError, split_id
from crisscross.core.quarantine import Rejected, reject


def read_table(path: str) -> pa.Table:
    """CSV cells stay text (a single label "3" must not become an integer column)."""
    if path.endswith(".csv"):
        return pa.Table.from_pandas(pd.read_csv(path, dtype=str, keep_default_na=False), preserve_index=False)
    return io.read_parquet(path)


def _canonical(value: Any, kind: str) -> str:
    text = "" if value is None else str(value)
    if split_id(text)[1] != kind:
        raise IdFormError(f"{text!r} is not a canonical {kind} id")
    return text


def read_labels(path: str) -> tuple[dict[str, tuple[int, ...]], list[Rejected]]:
    """Image id → class numbers; unparseable rows are quarantined."""
    table = read_table(path)
    labels: dict[str, tuple[int, ...]] = {}
    rejected = []
    for line, row in enumerate(table.to_pylist(), start=1):
        where = f"{path}:{line}"
        try:
            image = _canonical(row.get("image_id"), IMAGE_KIND)
            raw = row.get("labels")
            values = [v for v in raw.split(";") if v.strip()] if isinstance(raw, str) else list(raw if raw is not None else [])
            classes = tuple(sorted({int(v) for v in values}))
            if any(c < 0 for c in classes):
                raise ValueError(f"negative class number in {classes}")
        except (IdFormError, TypeError, ValueError) as error:
            rejected.append(reject("label", row.get("image_id"), "bad-label-row", str(error), where, row))
            continue
        labels[image] = classes
    return labels, rejected


def read_bison(path: str) -> tuple[pa.Table, list[Rejected]]:
    rows, rejected = [], []
    for line, row in enumerate(read_table(path).to_pylist(), start=1):
        try:
            rows.append(
                {
                    "caption": _canonical(row.get("caption"), CAPTION_KIND),
                    "target": _canonical(row.get("target"), IMAGE_KIND),
                    "decoy": _canonical(row.get("decoy"), IMAGE_KIND),
                }
            )
        except IdFormError as error:
            rejected.append(reject("bison", row.get("caption"), "bad-id", str(error), f"{path}:{line}", row))
    return pa.Table.from_pylist(rows, schema=pa.schema([(c, pa.string()) for c in ("caption", "target", "decoy")])), rejected
