"""Image decoding: real JPEGs decode, broken files fail loudly, orientation and modes are handled."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from crisscross.core.images import UnreadableImageError, image_size, load_rgb
from tests.special_files import KINDS, make_special


@pytest.fixture(scope="module")
def photo(test_photos: Path) -> Path:
    return sorted(test_photos.glob("*.jpg"))[0]


def test_real_jpeg_decodes_to_rgb_uint8(photo: Path) -> None:
    rgb = load_rgb(str(photo))
    with Image.open(photo) as reference:
        expected = np.asarray(reference.convert("RGB"))
    assert rgb.dtype == np.uint8
    assert rgb.shape == expected.shape
    assert rgb.shape[2] == 3
    np.testing.assert_array_equal(rgb, expected)
    assert image_size(str(photo)) == (rgb.shape[1], rgb.shape[0])


def test_truncated_jpeg_is_unreadable(photo: Path, tmp_path: Path) -> None:
    data = photo.read_bytes()
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(data[: len(data) // 2])
    assert not ImageFile.LOAD_TRUNCATED_IMAGES
    with pytest.raises(UnreadableImageError, match="truncated.jpg"):
        load_rgb(str(truncated))
    with pytest.raises(UnreadableImageError, match="truncated.jpg"):
        image_size(str(truncated))


def _verdict(read: Callable[[str], object], path: Path) -> str:
    try:
        read(str(path))
    except UnreadableImageError:
        return "unreadable"
    return "readable"


def test_the_check_at_an_eighth_of_the_size_gives_every_real_photo_its_full_size(test_photos: Path) -> None:
    """``image_size`` decodes a JPEG at 1/8 scale; the size it gives is the full image's."""
    photos = sorted(test_photos.glob("*.jpg"))
    assert len(photos) > 300
    for photo in photos:
        with Image.open(photo) as full:
            assert image_size(str(photo)) == full.size, photo.name


@pytest.mark.parametrize("progressive", [False, True], ids=["baseline", "progressive"])
def test_a_cut_or_damaged_jpeg_fails_the_check_as_it_fails_a_full_decode(test_photos: Path, tmp_path: Path, progressive: bool) -> None:
    """Cut anywhere (header, every scan, just before the end marker) or with bytes overwritten in
    its coefficients, a real photo is unreadable to ``image_size`` (1/8 scale) exactly when it is to
    ``load_rgb`` (full size): the scaled decoder reads every coefficient too."""
    rng = np.random.default_rng(7)
    verdicts = []
    for n, photo in enumerate(sorted(test_photos.glob("*.jpg"))[:12]):
        source = tmp_path / f"{n}.jpg"
        with Image.open(photo) as image:
            image.save(source, quality=90, progressive=progressive)
        data = source.read_bytes()
        cuts = [*rng.integers(1, len(data), 8), len(data) - 2]
        damaged = []
        for position in rng.integers(len(data) // 4, len(data) - 4, 3):
            broken = bytearray(data)
            broken[position : position + 4] = rng.integers(0, 256, 4, dtype=np.uint8).tobytes()
            damaged.append(bytes(broken))
        for k, variant in enumerate([data[:cut] for cut in cuts] + damaged):
            path = tmp_path / f"{n}-{k}.jpg"
            path.write_bytes(variant)
            verdicts.append((_verdict(image_size, path), _verdict(load_rgb, path)))
    assert all(scaled == full for scaled, full in verdicts), [v for v in verdicts if v[0] != v[1]]
    assert {"readable", "unreadable"} == {full for _, full in verdicts}  # both outcomes were tried


def test_text_file_named_jpg_is_unreadable(tmp_path: Path) -> None:
    fake = tmp_path / "fake.jpg"
    fake.write_text("this is not an image\n")
    for read in (load_rgb, image_size):
        with pytest.raises(UnreadableImageError, match="fake.jpg"):
            read(str(fake))


def test_missing_file_is_unreadable(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jpg"
    for read in (load_rgb, image_size):
        with pytest.raises(UnreadableImageError, match="nope.jpg"):
            read(str(missing))


def test_unreadable_image_error_is_a_value_error() -> None:
    assert issubclass(UnreadableImageError, ValueError)


def test_truncated_png_is_unreadable(tmp_path: Path) -> None:
    full = tmp_path / "full.png"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(full)
    data = full.read_bytes()
    cut = tmp_path / "cut.png"
    cut.write_bytes(data[: len(data) // 2])
    assert load_rgb(str(full)).shape == (64, 64, 3)
    with pytest.raises(UnreadableImageError):
        load_rgb(str(cut))
    with pytest.raises(UnreadableImageError):
        image_size(str(cut))


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    # 4 wide × 2 high, left column red; orientation 6 means "rotate 90° clockwise to view".
    pixels = np.zeros((2, 4, 3), dtype=np.uint8)
    pixels[:, 0] = (255, 0, 0)
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rotated.png"
    Image.fromarray(pixels).save(path, exif=exif)
    rgb = load_rgb(str(path))
    assert rgb.shape == (4, 2, 3)
    # After a clockwise turn the stored left column is the top row.
    np.testing.assert_array_equal(rgb[0], [[255, 0, 0], [255, 0, 0]])
    np.testing.assert_array_equal(rgb[1:], 0)
    assert image_size(str(path)) == (2, 4)


@pytest.mark.parametrize(
    ("mode", "value", "expected"),
    [
        ("L", 100, (100, 100, 100)),
        ("RGBA", (10, 20, 30, 0), (10, 20, 30)),
        ("CMYK", (0, 255, 255, 0), (255, 0, 0)),
    ],
)
def test_other_modes_become_rgb(tmp_path: Path, mode: str, value: object, expected: tuple[int, int, int]) -> None:
    path = tmp_path / f"img-{mode}.{'jpg' if mode == 'CMYK' else 'png'}"
    Image.new(mode, (5, 3), value).save(path, quality=100)
    rgb = load_rgb(str(path))
    assert rgb.shape == (3, 5, 3)
    np.testing.assert_allclose(rgb.reshape(-1, 3), np.tile(expected, (15, 1)), atol=2)


def test_palette_image_becomes_rgb(tmp_path: Path) -> None:
    path = tmp_path / "palette.png"
    image = Image.new("P", (3, 2))
    image.putpalette([0, 0, 0, 200, 100, 50] + [0] * 762)
    image.putpixel((1, 0), 1)
    image.save(path)
    rgb = load_rgb(str(path))
    assert rgb.shape == (2, 3, 3)
    np.testing.assert_array_equal(rgb[0, 1], [200, 100, 50])
    np.testing.assert_array_equal(rgb[0, 0], [0, 0, 0])


def test_refuses_to_run_when_truncated_loading_is_enabled(photo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with pytest.raises(RuntimeError, match="LOAD_TRUNCATED_IMAGES"):
        load_rgb(str(photo))


@pytest.mark.filterwarnings("error::PIL.Image.DecompressionBombWarning")  # as crisscross.core.images sets it (pytest resets it)
@pytest.mark.parametrize(
    ("width", "height"),
    [(8000, 6400), (10_000, 9_500)],
    ids=["over-our-limit", "over-pillows-warning-threshold"],  # Pillow only warned from 89.5 megapixels, and decoded
)
def test_an_image_over_the_pixel_limit_is_unreadable_before_decoding(tmp_path: Path, width: int, height: int) -> None:
    """A decompression bomb: a few kilobytes of PNG stating width × height over MAX_IMAGE_PIXELS (50 megapixels)."""
    bomb = tmp_path / "bomb.png"
    Image.new("1", (width, height)).save(bomb)
    assert bomb.stat().st_size < 100_000 and width * height > 50_000_000
    for read in (load_rgb, image_size):
        with pytest.raises(UnreadableImageError, match=r"bomb.png has .*the limit of 50,000,000.*; not decoded"):
            read(str(bomb))


@pytest.mark.timeout(30)  # a FIFO named like an image used to be waited on forever
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_image_that_is_not_a_regular_file_is_unreadable_never_waited_on(tmp_path: Path, kind: str) -> None:
    path = make_special(tmp_path / "x.jpg", kind)
    for read in (load_rgb, image_size):
        with pytest.raises(UnreadableImageError, match=f"x.jpg is {re.escape(KINDS[kind])}, not a regular file"):
            read(str(path))


def test_pillows_bomb_warning_is_an_unreadable_image_not_a_warning(tmp_path: Path) -> None:
    """From 89.5 megapixels Pillow warns inside Image.open, before the limit is checked; the
    command must say nothing but the image's reason (a subprocess: pytest resets the process's
    warning filters around imports)."""
    bomb = tmp_path / "bomb.png"
    Image.new("1", (10_000, 9_500)).save(bomb)
    code = f"from crisscross.core.images import image_size\ntry:\n    image_size({str(bomb)!r})\nexcept ValueError as e:\n    print(e)"
    run = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, check=True)
    assert "bomb.png has more pixels than the limit of 50,000,000" in run.stdout and "Warning" not in run.stderr, run.stderr
