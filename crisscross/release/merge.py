"""CxC's "augment MS-COCO with the Crisscrossed Captions" output, for a release's SITS files.

CxC's released merge script reads ``sits_*.csv`` rows ``caption, image, agg_score,
sampling_method`` and Karpathy's ``dataset_coco.json``.  Every val/test example gets a
``cxc_scores`` list: the rows naming its image file as ``[sentid, score, method]`` followed, for
each of its ``sentids``, by the rows naming that caption as ``[image file, score, method]``
(a ``c2i_original`` row is attached to the image only, not twice).  Scores stay the CSV's text.
This module does the same over the release's own SITS files, so a consumer of CxC's merged JSON
reads ours unchanged.
"""

from __future__ import annotations

import copy
import csv
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from crisscross.core.errors import InputError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, CocoIdScheme, IdFormError, published, split_id
from crisscross.release.contents import Contents
from crisscross.release.request import ReleaseRequest
from crisscross.tasktypes.sits import SITS

ORIGINAL = "c2i_original"  # the caption and the image are one MS-COCO example
SCORES_KEY = "cxc_scores"
_COCO = CocoIdScheme()


def sentid(published_caption: str) -> int:
    """``COCO_val2014:sentid:770337`` → 770337 (CxC's reading of a caption id)."""
    try:
        return int(published_caption.rsplit(":", 1)[-1])
    except ValueError:
        raise InputError(f"caption id {published_caption!r} has no numeric sentid: the Karpathy merge needs COCO caption ids") from None


def read_sits_rows(paths: Iterable[Path]) -> list[tuple[str, str, str, str]]:
    """The rows of SITS release CSVs as text, in file order (files in the order given)."""
    rows: list[tuple[str, str, str, str]] = []
    for path in paths:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            next(reader, None)
            rows += [(r[0], r[1], r[2], r[3]) for r in reader]
    return rows


def merge_scores(document: dict[str, Any], rows: Sequence[tuple[str, str, str, str]], splits: Sequence[str]) -> dict[str, Any]:
    """A copy of a Karpathy-shaped ``document`` with ``cxc_scores`` on every example of ``splits``."""
    by_key: dict[str | int, list[list[Any]]] = defaultdict(list)
    for caption, image, score, method in rows:
        number = sentid(caption)
        by_key[image].append([number, score, method])
        if method != ORIGINAL:
            by_key[number].append([image, score, method])
    merged = copy.deepcopy(document)
    for example in merged.get("images", []):
        if example.get("split") in splits:
            scores = example.setdefault(SCORES_KEY, [])
            scores += by_key.get(example["filename"], [])
            for number in example.get("sentids", []):
                scores += by_key.get(number, [])
    return merged


def karpathy_document(images: pd.DataFrame, captions: pd.DataFrame) -> dict[str, Any]:
    """The items tables in ``dataset_coco.json`` shape (COCO ids only): one example per image in
    id order, ``imgid`` its index, ``sentids`` its caption ids, raw text and whitespace tokens."""
    by_image = captions.sort_values("caption_id").groupby("image_id")
    examples = []
    for index, image in enumerate(images.sort_values("image_id").itertuples(index=False)):
        try:
            cocoid = _COCO.coco_int(image.image_id, IMAGE_KIND)
            own = by_image.get_group(image.image_id) if image.image_id in by_image.groups else captions.iloc[:0]
            numbers = [_COCO.coco_int(c, CAPTION_KIND) for c in own["caption_id"]]
        except IdFormError as error:
            raise InputError(f"the Karpathy merge needs COCO ids: {error}") from error
        examples.append(
            {
                "filename": published(image.image_id, IMAGE_KIND),
                "filepath": _COCO.subset,
                "cocoid": cocoid,
                "imgid": index,
                "split": image.split,
                "sentids": numbers,
                "sentences": [
                    {"raw": text, "tokens": text.split(), "sentid": n, "imgid": index} for n, text in zip(numbers, own["text"], strict=True)
                ],
            }
        )
    return {"dataset": "coco", "images": examples}


def is_coco(ids: Iterable[str]) -> bool:
    return all(split_id(i)[0] == _COCO.namespace for i in ids)


def karpathy_merge(data: Path, request: ReleaseRequest, contents: Contents) -> dict[str, Any] | None:
    """The Karpathy-shaped document (``--karpathy``, else built from the items) with CxC's
    ``cxc_scores``, from the release's own SITS files; ``None`` without SITS or COCO ids."""
    sits = contents.pairs[contents.pairs["task_type"] == SITS.name]
    if sits.empty or not is_coco(sits["id_a"]):
        return None
    if request.karpathy is not None:
        try:
            document = json.loads(request.karpathy.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise InputError(f"cannot read the Karpathy dataset JSON {request.karpathy}: {error}") from error
        if not isinstance(document, dict) or not isinstance(document.get("images"), list):
            raise InputError(f"{request.karpathy}: not dataset_coco.json-shaped (no 'images' list)")
    else:
        images = pd.read_parquet(Path(str(request.items)) / "images.parquet", columns=["image_id", "split"])
        captions = pd.read_parquet(Path(str(request.items)) / "captions.parquet", columns=["caption_id", "image_id", "text"])
        document = karpathy_document(images, captions)
    files = sorted(data.glob("sits_*.csv"))
    return merge_scores(document, read_sits_rows(files), request.settings.merge_splits)


def karpathy_names(document: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """Caption id → text and image id → file name from a ``dataset_coco.json``-shaped document (a
    release's ``dataset_coco_cxc.json``: the one file of a release that names both, read by its loaders and its browser)."""
    texts, files = {}, {}
    for image in document.get("images", []):
        files[_COCO.image(image["cocoid"])] = str(image["filename"])
        texts.update({_COCO.caption(s["sentid"]): str(s["raw"]) for s in image.get("sentences", [])})
    return texts, files
