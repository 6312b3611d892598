"""ECCV Caption's vocabulary and files: the two retrieval directions and the positives maps.

``eccv_image_to_caption.json`` maps an image id to its positive captions, and
``eccv_caption_to_image.json`` a caption id to its positive images: the names the ``eccv-caption``
package reads, which the positives stage writes and the release, the machine annotators and the
``eccv`` ground truth read.
"""

from __future__ import annotations

from typing import Any

from crisscross.core import io
from crisscross.core.errors import InputError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND

I2T, T2I = "i2t", "t2i"
DIRECTIONS: dict[str, tuple[str, str]] = {I2T: (IMAGE_KIND, CAPTION_KIND), T2I: (CAPTION_KIND, IMAGE_KIND)}  # query kind, item kind
ECCV_FILES = {I2T: "eccv_image_to_caption.json", T2I: "eccv_caption_to_image.json"}


def read_positives(path: str) -> dict[str, Any]:
    """One positives map as its JSON object (query id → positive ids, as written); a file that is
    no JSON object is one :class:`InputError` naming it."""
    document = io.json_document(io.read_bytes(path), path)
    if not isinstance(document, dict):
        raise InputError(f"{path}: an ECCV positives file is an object of query ids, got a JSON {type(document).__name__}")
    return document
