"""Decoding image files into RGB pixels, the same way for ingest checks and for encoders.

Files are read through Beam's ``FileSystems`` so local paths and ``gs://`` paths behave alike.
A file that cannot be fully decoded is an error, never a silently partial image: Pillow's
``ImageFile.LOAD_TRUNCATED_IMAGES`` must stay ``False`` (the default) and every image is decoded
completely before it is used, so a truncated JPEG fails here instead of yielding grey pixels.
"""

from __future__ import annotations

import io
import struct

import numpy as np
from PIL import ExifTags, Image, ImageFile, ImageOps

from crisscross.core.io import read_bytes

# Everything Pillow raises for a file it cannot decode (plugins differ: truncated JPEGs raise
# OSError, broken PNG chunks SyntaxError, short headers EOFError or struct.error).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, Image.DecompressionBombError)

# EXIF orientations that rotate by 90° or 270°, i.e. swap width and height.
_TRANSPOSING_ORIENTATIONS = frozenset({5, 6, 7, 8})


class UnreadableImageError(ValueError):
    """An image file is missing, truncated, or not an image."""


def _read_bytes(path: str) -> bytes:
    try:
        return read_bytes(path)
    except OSError as e:
        raise UnreadableImageError(f"cannot read image file {path}: {e}") from e


def _decode(path: str, *, verify: bool) -> Image.Image:
    """Open and fully decode ``path``; with ``verify``, also run Pillow's integrity check first."""
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        raise RuntimeError("PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True; truncated images would load silently")
    data = _read_bytes(path)
    try:
        if verify:
            with Image.open(io.BytesIO(data)) as probe:
                probe.verify()
        image = Image.open(io.BytesIO(data))
        image.load()
    except _DECODE_ERRORS as e:
        raise UnreadableImageError(f"cannot decode image file {path} ({len(data)} bytes): {e}") from e
    return image


def load_rgb(path: str) -> np.ndarray:
    """The image at ``path`` as H×W×3 ``uint8``, upright (EXIF orientation applied).

    Palette, grey, CMYK and alpha images are converted to RGB; alpha is dropped.
    """
    image = _decode(path, verify=False)
    try:
        upright = ImageOps.exif_transpose(image)
    except _DECODE_ERRORS as e:
        raise UnreadableImageError(f"cannot apply EXIF orientation of image file {path}: {e}") from e
    return np.asarray(upright.convert("RGB"), dtype=np.uint8)


def image_size(path: str) -> tuple[int, int]:
    """``(width, height)`` of the upright image, after checking the whole file decodes.

    Ingest uses this to keep only readable images, so it decodes every pixel rather than
    trusting the header.
    """
    image = _decode(path, verify=True)
    width, height = image.size
    try:
        orientation = image.getexif().get(ExifTags.Base.Orientation)
    except _DECODE_ERRORS as e:
        raise UnreadableImageError(f"cannot read EXIF of image file {path}: {e}") from e
    if orientation in _TRANSPOSING_ORIENTATIONS:
        return height, width
    return width, height
