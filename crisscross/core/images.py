"""Decoding image files into RGB pixels, the same way for ingest checks and for encoders.

Files are read through :func:`crisscross.core.io.read_bytes`, so local paths and ``gs://`` paths
behave alike and only regular files are read (a FIFO named ``x.jpg`` is unreadable, not waited on).
A file that cannot be fully decoded is an error, never a silently partial image: Pillow's
``ImageFile.LOAD_TRUNCATED_IMAGES`` must stay ``False`` (the default) and every image is decoded
completely before it is used, so a truncated JPEG fails here instead of yielding grey pixels.
Ingest's check (:func:`image_size`) decodes a JPEG at an eighth of its size: the decoder still reads
every coefficient of every scan, so a cut or broken stream fails as it does at full size, and only
the inverse DCT's output is smaller (a third less work per COCO photo).

An image whose header states more than :data:`MAX_IMAGE_PIXELS` pixels is unreadable before any
pixel is decoded: a decompression bomb (a small file that inflates to gigabytes) is refused with
its size, never decoded, and never only warned about.
"""

from __future__ import annotations

import io
import struct
import warnings

import numpy as np
from PIL import ExifTags, Image, ImageFile, ImageOps

from crisscross.core.io import read_bytes

# The most pixels (width × height, as the header states them) an image may have: 50 megapixels,
# e.g. 8660 × 5773.  Photo collections stay far below it (COCO and Flickr30k at most 640 × 640, a
# 45-megapixel camera's full frame fits); decoding one image at the limit holds about 350 MB
# (RGBA, then RGB).  A constant, not a param: ingest's check and embed's decoding must agree on
# which images have pixels, and the limit is a safety bound on the machine, not a dataset choice.
MAX_IMAGE_PIXELS = 50_000_000

# Pillow's own guard runs inside Image.open, before the check below can: from its threshold
# (about 89 megapixels) it only warns.  Made an error here, so such a file is unreadable too.
warnings.filterwarnings("error", category=Image.DecompressionBombWarning)

# Everything Pillow raises for a file it cannot decode (plugins differ: truncated JPEGs raise
# OSError, broken PNG chunks SyntaxError, short headers EOFError or struct.error), and what its
# bomb guard raises (DecompressionBombError, or its warning made an error above).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error)
_BOMB_ERRORS = (Image.DecompressionBombError, Image.DecompressionBombWarning)

# EXIF orientations that rotate by 90° or 270°, i.e. swap width and height.
_TRANSPOSING_ORIENTATIONS = frozenset({5, 6, 7, 8})


class UnreadableImageError(ValueError):
    """An image file is missing, truncated, not an image, not a regular file, or over the pixel limit."""


def _read_bytes(path: str) -> bytes:
    try:
        return read_bytes(path)
    except OSError as e:
        raise UnreadableImageError(f"cannot read image file {path}: {e}") from e


def _decode(path: str, *, verify: bool) -> tuple[Image.Image, tuple[int, int]]:
    """Open and fully decode ``path``: the image and its size as the header states it.  With
    ``verify``, Pillow's integrity check runs first and a JPEG is decoded at 1/8 scale (every
    coefficient read, see the module docstring), so the image is smaller than the size returned.
    Nothing past the header is decoded when it states more than :data:`MAX_IMAGE_PIXELS`."""
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        raise RuntimeError("PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True; truncated images would load silently")
    data = _read_bytes(path)
    try:
        image = Image.open(io.BytesIO(data))  # reads the header only
        width, height = image.size
        if width * height <= MAX_IMAGE_PIXELS:
            if verify:
                with Image.open(io.BytesIO(data)) as probe:
                    probe.verify()
                image.draft(None, (1, 1))  # JPEG only; other formats ignore it
            image.load()
    except _BOMB_ERRORS as e:
        raise UnreadableImageError(_over_the_limit(path, f"more pixels than the limit of {MAX_IMAGE_PIXELS:,}: {e}")) from e
    except _DECODE_ERRORS as e:
        raise UnreadableImageError(f"cannot decode image file {path} ({len(data)} bytes): {e}") from e
    if width * height > MAX_IMAGE_PIXELS:
        raise UnreadableImageError(
            _over_the_limit(path, f"{width} × {height} = {width * height:,} pixels, over the limit of {MAX_IMAGE_PIXELS:,}")
        )
    return image, (width, height)


def _over_the_limit(path: str, what: str) -> str:
    return f"image file {path} has {what} (crisscross.core.images.MAX_IMAGE_PIXELS); not decoded"


def load_rgb(path: str) -> np.ndarray:
    """The image at ``path`` as H×W×3 ``uint8``, upright (EXIF orientation applied).

    Palette, grey, CMYK and alpha images are converted to RGB; alpha is dropped.
    """
    image, _ = _decode(path, verify=False)
    try:
        upright = ImageOps.exif_transpose(image)
    except _DECODE_ERRORS as e:
        raise UnreadableImageError(f"cannot apply EXIF orientation of image file {path}: {e}") from e
    return np.asarray(upright.convert("RGB"), dtype=np.uint8)


def image_size(path: str) -> tuple[int, int]:
    """``(width, height)`` of the upright image, after checking the whole file decodes.

    Ingest uses this to keep only readable images, so it decodes the whole file rather than
    trusting the header (a JPEG at 1/8 scale: see the module docstring).
    """
    image, (width, height) = _decode(path, verify=True)
    try:
        orientation = image.getexif().get(ExifTags.Base.Orientation)
    except _DECODE_ERRORS as e:
        raise UnreadableImageError(f"cannot read EXIF of image file {path}: {e}") from e
    if orientation in _TRANSPOSING_ORIENTATIONS:
        return height, width
    return width, height
