"""Box-drawing tasks for Label Studio, and its JSON export read back as boxes.

A task per chain needing boxes: ``data.image`` (the image, under ``image_root``), ``data.caption``
(the representative mention in ``[[ ]]``), ``data.mention``, ``data.chain`` (``<image_id>#<chain>``)
and ``data.kind``.  The labeling config is one ``RectangleLabels`` control named ``box`` on an
``Image`` named ``image``.  Label Studio's JSON export lists each task with its ``annotations``;
a result of type ``rectanglelabels`` has ``value.x / y / width / height`` in percent of
``original_width`` / ``original_height``.  Cancelled annotations are skipped; the last one counts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from crisscross.core.errors import InputError
from crisscross.core.io import json_document
from crisscross.core.quarantine import Rejected, reject
from crisscross.entities.chunker import TYPES
from crisscross.entities.files import Box
from crisscross.entities.mentions import Caption

CONTROL, TARGET = "box", "image"


def label_config() -> str:
    labels = "".join(f'    <Label value="{kind}"/>\n' for kind in TYPES)
    return (
        "<View>\n"
        '  <Header value="Draw one box around each entity the highlighted [[mention]] refers to."/>\n'
        '  <Text name="caption" value="$caption"/>\n'
        f'  <Image name="{TARGET}" value="$image"/>\n'
        f'  <RectangleLabels name="{CONTROL}" toName="{TARGET}">\n{labels}  </RectangleLabels>\n'
        "</View>\n"
    )


def task(task_id: int, image_value: str, caption: Caption, first: int, end: int, chain_key: str, kind: str) -> dict[str, Any]:
    words = caption.text.split()
    shown = " ".join([*words[:first], "[[", *words[first:end], "]]", *words[end:]])
    return {
        "id": task_id,
        "data": {"image": image_value, "caption": shown, "mention": " ".join(words[first:end]), "chain": chain_key, "kind": kind},
    }


def result(box: Box, size: tuple[int, int], kind: str, result_id: str) -> dict[str, Any]:
    """One rectangle as Label Studio writes it (percent of the image)."""
    width, height = size
    return {
        "id": result_id,
        "type": "rectanglelabels",
        "from_name": CONTROL,
        "to_name": TARGET,
        "original_width": width,
        "original_height": height,
        "image_rotation": 0,
        "value": {
            "x": 100.0 * box[0] / width,
            "y": 100.0 * box[1] / height,
            "width": 100.0 * (box[2] - box[0] + 1) / width,
            "height": 100.0 * (box[3] - box[1] + 1) / height,
            "rotation": 0,
            "rectanglelabels": [kind],
        },
    }


def export_with_annotations(
    tasks: Sequence[dict[str, Any]], boxes: Sequence[Sequence[Box]], sizes: Sequence[tuple[int, int]]
) -> list[dict[str, Any]]:
    """Tasks with one annotation each holding the given boxes: the shape of Label Studio's JSON export."""
    out = []
    for t, chain_boxes, size in zip(tasks, boxes, sizes, strict=True):
        results = [result(b, size, t["data"]["kind"], f"{t['id']}-{i}") for i, b in enumerate(chain_boxes)]
        out.append({**t, "annotations": [{"id": t["id"], "was_cancelled": False, "result": results}]})
    return out


def _box(value: dict[str, Any], width: int, height: int) -> Box:
    x0 = round(float(value["x"]) * width / 100.0)
    y0 = round(float(value["y"]) * height / 100.0)
    x1 = round((float(value["x"]) + float(value["width"])) * width / 100.0) - 1
    y1 = round((float(value["y"]) + float(value["height"])) * height / 100.0) - 1
    return (x0, y0, x1, y1)


def read_export(data: bytes, where: str) -> Iterator[tuple[str, list[Box]] | Rejected]:
    """``(chain key, boxes)`` per task of a Label Studio JSON export; a malformed result is a ``Rejected``."""
    document = json_document(data, where)
    if not isinstance(document, list):
        raise InputError(f"{where}: a Label Studio JSON export is a list of tasks")
    for position, item in enumerate(document):
        source = f"{where}[{position}]"
        chain = (item.get("data") or {}).get("chain") if isinstance(item, dict) else None
        if not isinstance(chain, str):
            yield reject("task", "", "no-chain", "task without data.chain", source, item)
            continue
        given = item.get("annotations") or []
        if not isinstance(given, list) or not all(isinstance(a, dict) and isinstance(a.get("result") or [], list) for a in given):
            yield reject("task", chain, "malformed-annotation", "annotations must be a list of objects with a result list", source, item)
            continue
        annotations = [a for a in given if not a.get("was_cancelled")]
        if not annotations:
            yield reject("task", chain, "no-annotation", "no annotation that was not cancelled", source, item)
            continue
        boxes = []
        for r in annotations[-1].get("result") or []:
            if not isinstance(r, dict) or r.get("type") != "rectanglelabels":
                continue
            try:
                boxes.append(_box(r["value"], int(r["original_width"]), int(r["original_height"])))
            except (KeyError, TypeError, ValueError, OverflowError) as error:  # OverflowError: an infinite coordinate
                yield reject("box", chain, "malformed-box", f"rectangle result without {error}", source, r)
        yield chain, boxes
