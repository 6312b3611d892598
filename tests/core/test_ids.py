"""The id layer: every published form parses to one canonical id and renders back."""

from __future__ import annotations

import pytest

from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, IdFormError, make_id, scheme_for, scheme_of, split_id

COCO = scheme_for("coco")
F30K = scheme_for("f30k")
PLAIN = scheme_for("ds")


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("COCO_val2014_000000391895.jpg", "coco:img:391895"),
        ("391895", "coco:img:391895"),
        (391895, "coco:img:391895"),
        ("val2014/COCO_val2014_000000391895.jpg", "coco:img:391895"),
        ("000000397133.jpg", "coco:img:397133"),  # COCO 2017 file name
        (" coco:img:391895 ", "coco:img:391895"),
        ("coco:img:000391895", "coco:img:391895"),
    ],
)
def test_coco_image_forms(value: object, canonical: str) -> None:
    assert COCO.parse_image(value) == canonical


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("COCO_val2014:sentid:770337", "coco:cap:770337"),
        ("770337", "coco:cap:770337"),
        (770337, "coco:cap:770337"),
        ("coco:cap:770337", "coco:cap:770337"),
    ],
)
def test_coco_caption_forms(value: object, canonical: str) -> None:
    assert COCO.parse_caption(value) == canonical


def test_coco_round_trips_to_the_cxc_forms() -> None:
    assert COCO.published_image(COCO.parse_image("COCO_val2014_000000391895.jpg")) == "COCO_val2014_000000391895.jpg"
    assert COCO.published_image(COCO.parse_image(391895)) == "COCO_val2014_000000391895.jpg"
    assert COCO.published_caption(COCO.parse_caption("COCO_val2014:sentid:770337")) == "COCO_val2014:sentid:770337"
    assert COCO.published_caption(COCO.parse_caption("770337")) == "COCO_val2014:sentid:770337"
    assert COCO.coco_int("coco:cap:770337", CAPTION_KIND) == 770337


def test_flickr_forms_round_trip() -> None:
    assert F30K.parse_image("1007129816.jpg") == "f30k:img:1007129816"
    assert F30K.parse_image("flickr30k-images/1007129816.jpg") == "f30k:img:1007129816"
    assert F30K.parse_image("f30k:img:1007129816") == "f30k:img:1007129816"
    assert F30K.published_image("f30k:img:1007129816") == "1007129816.jpg"
    assert F30K.parse_caption("1007129816.jpg#0") == "f30k:cap:1007129816#0"
    assert F30K.parse_caption("1007129816#04") == "f30k:cap:1007129816#4"
    assert F30K.parse_caption("f30k:cap:1007129816#0") == "f30k:cap:1007129816#0"
    assert F30K.published_caption(F30K.parse_caption("1007129816.jpg#0")) == "1007129816.jpg#0"
    assert F30K.caption_native("1007129816.jpg", 3) == "1007129816#3"


def test_plain_scheme_keeps_the_native_value() -> None:
    assert PLAIN.parse_image("img 7") == "ds:img:img 7"
    assert PLAIN.parse_caption("a:b") == "ds:cap:a:b"  # a colon in a native id is fine
    assert PLAIN.parse_caption("ds:cap:a:b") == "ds:cap:a:b"
    assert PLAIN.published_caption("ds:cap:a:b") == "a:b"


@pytest.mark.parametrize(
    ("parse", "value"),
    [
        (COCO.parse_image, "COCO_val2014_391895.jpg"),  # not zero-padded to 12 digits
        (COCO.parse_image, "391895.png"),
        (COCO.parse_image, "abc"),
        (COCO.parse_image, "-5"),
        (COCO.parse_image, "3.0"),
        (COCO.parse_image, "١٢٣"),  # Arabic-Indic digits are not an id
        (COCO.parse_image, "coco:img:abc"),  # canonical in shape, wrong native
        (COCO.parse_image, "coco:cap:770337"),  # a caption id is never an image id
        (COCO.parse_image, "f30k:img:1007129816"),
        (COCO.parse_image, ""),
        (COCO.parse_caption, "COCO_val2014_000000391895.jpg"),
        (COCO.parse_caption, "COCO_val2014:sentid:"),
        (COCO.parse_caption, "1007129816.jpg#0"),
        (F30K.parse_image, "COCO_val2014_000000391895"),
        (F30K.parse_image, "1007129816.jpg#0"),
        (F30K.parse_caption, "1007129816.jpg"),
        (F30K.parse_caption, "1007129816.jpg#"),
        (F30K.parse_caption, "f30k:img:1007129816"),
        (PLAIN.parse_image, "other:img:1"),  # another namespace's id is not nested
        (PLAIN.parse_image, "   "),
    ],
)
def test_wrong_forms_are_rejected(parse, value: object) -> None:
    with pytest.raises(IdFormError):
        parse(value)


def test_trailing_newline_is_not_part_of_a_match() -> None:
    with pytest.raises(IdFormError):
        F30K.caption_native("1007129816\n", 0)


def test_canonical_helpers() -> None:
    assert split_id("coco:img:42") == ("coco", IMAGE_KIND, "42")
    assert make_id("ds", CAPTION_KIND, " x ") == "ds:cap:x"
    assert scheme_of("f30k:cap:1#0").published_caption("f30k:cap:1#0") == "1.jpg#0"
    for bad in ("coco:txt:1", "coco:img:", "coco"):
        with pytest.raises(IdFormError):
            split_id(bad)
    for namespace in ("", "a:b"):
        with pytest.raises(IdFormError):
            make_id(namespace, IMAGE_KIND, "1")
    with pytest.raises(IdFormError):
        COCO.published_image("f30k:img:1")


DIGITS = "9" * 5000  # more than int() converts (4300 digits)


@pytest.mark.parametrize(
    ("parse", "value"),
    [
        (COCO.parse_image, DIGITS),
        (COCO.parse_image, f"coco:img:{DIGITS}"),
        (COCO.parse_caption, DIGITS),
        (COCO.parse_caption, f"COCO_val2014:sentid:{DIGITS}"),
        (F30K.parse_caption, f"1.jpg#{DIGITS}"),
        (lambda value: COCO.coco_int(value, IMAGE_KIND), f"coco:img:{DIGITS}"),
    ],
    ids=["coco-image", "coco-canonical-image", "coco-caption", "coco-sentid", "flickr-caption-index", "coco-int"],
)
def test_an_id_of_more_digits_than_python_converts_is_a_wrong_form(parse, value: str) -> None:
    # int() raised a plain ValueError, which readers catching IdFormError let out as a traceback
    with pytest.raises(IdFormError, match="5000 digits"):
        parse(value)
