"""ECCV Caption's vocabulary and files: the two retrieval directions and the positives maps.

``eccv_image_to_caption.json`` maps an image id to its positive captions, and
``eccv_caption_to_image.json`` a caption id to its positive images: the names the ``eccv-caption``
package reads, which the positives stage writes and the release, the machine annotators and the
``eccv`` ground truth read.
"""

from __future__ import annotations

from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND

I2T, T2I = "i2t", "t2i"
DIRECTIONS: dict[str, tuple[str, str]] = {I2T: (IMAGE_KIND, CAPTION_KIND), T2I: (CAPTION_KIND, IMAGE_KIND)}  # query kind, item kind
ECCV_FILES = {I2T: "eccv_image_to_caption.json", T2I: "eccv_caption_to_image.json"}
