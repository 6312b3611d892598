"""Validation functions on small cases, on real photos, and composed over ``val5k_partial.jsonl``."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crisscross.core.quarantine import Rejected, count_reasons
from crisscross.ingest import validate
from crisscross.ingest.readers import READERS
from crisscross.ingest.records import (
    PIXELS_MISSING,
    PIXELS_OK,
    PIXELS_UNCHECKED,
    PIXELS_UNREADABLE,
    CaptionRecord,
    ImageRecord,
    caption_records,
    caption_rows,
)
from crisscross.ingest.validate import (
    DEFAULT_MAX_TEXT_LENGTH,
    check_caption_text,
    check_image,
    check_image_file,
    check_image_path,
    first_captions,
    first_of_duplicates,
    first_of_each,
    join_captions,
)
from tests.special_files import KINDS, make_special


def caption(caption_id: str = "ds:cap:1", image_id: str = "ds:img:1", text: str | None = "a dog", position: int = 1) -> CaptionRecord:
    return CaptionRecord(caption_id, image_id, text, "test", f"f.jsonl:{position}", position)


def image(image_id: str = "ds:img:1", file_name: str = "1.jpg", position: int = 1) -> ImageRecord:
    return ImageRecord(image_id, file_name, "test", f"f.jsonl:{position}", position)


def test_check_caption_text() -> None:
    assert check_caption_text(caption(text="  A  dog\t on\n a  mat .  "), 100).text == "A dog on a mat ."
    clean = caption(text="a dog")
    assert check_caption_text(clean, 100) is clean
    null = check_caption_text(caption(text=None), 100)
    assert isinstance(null, Rejected)
    assert (null.kind, null.key, null.reason, null.source) == ("caption", "ds:cap:1", "null-text", "f.jsonl:1")
    assert json.loads(null.record)["text"] is None
    for blank in ("", "   ", "\t\n", "\u3000"):
        rejected = check_caption_text(caption(text=blank), 100)
        assert isinstance(rejected, Rejected) and rejected.reason == "empty-text"


def test_first_of_duplicates_keeps_the_lowest_position() -> None:
    records = [caption(text="third", position=9), caption(text="first", position=2), caption(text=None, position=5)]
    kept, rejected = first_of_duplicates("ds:cap:1", iter(records))
    assert kept.text == "first"
    assert [(r.kind, r.reason, r.source) for r in rejected] == [
        ("caption", "duplicate-id", "f.jsonl:5"),
        ("caption", "duplicate-id", "f.jsonl:9"),
    ]
    assert "f.jsonl:2" in rejected[0].detail
    single, none = first_of_duplicates("ds:img:1", [image()])
    assert single == image() and none == []
    with pytest.raises(ValueError):
        first_of_duplicates("ds:img:1", [])


def test_join_captions_rejects_captions_of_unknown_images_and_images_without_captions() -> None:
    captions = caption_rows([caption("ds:cap:b"), caption("ds:cap:a")])
    kept, joined, rejected = join_captions([image()], captions)
    assert kept == [(image(), 2)]
    assert caption_records(joined) == caption_records(captions)
    assert rejected == []

    kept, joined, rejected = join_captions([], captions)
    assert (kept, joined.num_rows) == ([], 0)
    assert sorted((r.kind, r.key, r.reason, r.detail) for r in rejected) == [
        ("caption", "ds:cap:a", "unknown-image", "no image ds:img:1 was read"),
        ("caption", "ds:cap:b", "unknown-image", "no image ds:img:1 was read"),
    ]
    assert json.loads(rejected[0].record)["position"] == 1  # quarantined as the record it was

    kept, joined, rejected = join_captions([image(position=7), image(position=3)], caption_rows([]))
    assert (kept, joined.num_rows) == ([], 0)
    assert [(r.kind, r.reason, r.source) for r in rejected] == [
        ("image", "duplicate-id", "f.jsonl:7"),
        ("image", "no-captions", "f.jsonl:3"),
    ]


_ids = st.sampled_from(["ds:cap:1", "ds:cap:2", "ds:cap:é", "ds:cap:𝔸"])
_captions = st.builds(caption, caption_id=_ids, text=st.sampled_from(["a dog", "a cat"]), position=st.integers(1, 6))


@settings(max_examples=200, deadline=None)
@given(st.lists(_captions, max_size=12))
def test_first_captions_keeps_what_first_of_each_keeps(records: list[CaptionRecord]) -> None:
    """Only the rows of repeated ids become records; what is kept and rejected is :func:`first_of_each`'s."""
    kept, rejected = first_captions(caption_rows(records))
    expected_kept, expected_rejected = first_of_each(records, lambda c: c.caption_id)
    assert sorted(caption_records(kept)) == sorted(expected_kept)
    assert kept.schema == caption_rows([]).schema
    assert sorted(map(repr, rejected)) == sorted(map(repr, expected_rejected))


def test_check_image_file(test_photos: Path, tmp_path: Path) -> None:
    name = "COCO_val2014_000000391895.jpg"
    assert check_image_file(image(file_name=name), None).pixels == PIXELS_UNCHECKED

    found = check_image_file(image(file_name=name), str(test_photos))
    assert (found.pixels, found.path, found.width, found.height) == (PIXELS_OK, str(test_photos / name), 640, 360)
    by_base_name = check_image_file(image(file_name=f"val2014/{name}"), str(test_photos))
    assert (by_base_name.pixels, by_base_name.path) == (PIXELS_OK, str(test_photos / name))

    missing = check_image_file(image(file_name="COCO_val2014_000000000001.jpg"), str(test_photos))
    assert (missing.pixels, missing.path, missing.width, missing.height) == (PIXELS_MISSING, "", 0, 0)

    data = (test_photos / name).read_bytes()
    (tmp_path / name).write_bytes(data[: len(data) // 2])
    truncated = check_image_file(image(file_name=name), str(tmp_path))
    assert isinstance(truncated, ImageRecord)
    assert (truncated.pixels, truncated.path, truncated.width) == (PIXELS_UNREADABLE, str(tmp_path / name), 0)

    (tmp_path / "sub").mkdir()
    shutil.copy(test_photos / name, tmp_path / "sub" / name)
    nested = check_image_file(image(file_name=f"sub/{name}"), str(tmp_path))
    assert (nested.pixels, nested.path) == (PIXELS_OK, str(tmp_path / "sub" / name))


def validate_by_hand(items: list) -> tuple[list[ImageRecord], list[CaptionRecord], list[Rejected]]:
    """The ingest composite's steps in plain Python, on one shard holding every record."""
    rejected = [i for i in items if isinstance(i, Rejected)]
    images = [i for i in items if isinstance(i, ImageRecord)]
    captions = []
    for record in (i for i in items if isinstance(i, CaptionRecord)):
        checked = check_caption_text(record, DEFAULT_MAX_TEXT_LENGTH)
        (rejected if isinstance(checked, Rejected) else captions).append(checked)
    rows, duplicates = first_captions(caption_rows(captions))
    kept, joined, bad = join_captions(images, rows)
    return [image for image, _ in kept], caption_records(joined), [*rejected, *duplicates, *bad]


def test_join_captions_counts_kept_captions_and_keeps_the_first_image() -> None:
    first, later = image(position=3), image(position=9)
    captions = [caption(caption_id="ds:cap:2"), caption(caption_id="ds:cap:1"), caption(caption_id="ds:cap:9", image_id="ds:img:7")]
    kept, joined, rejected = join_captions([later, first], caption_rows(captions))
    assert kept == [(first, 2)]
    assert sorted(joined["caption_id"].to_pylist()) == ["ds:cap:1", "ds:cap:2"]
    assert sorted((r.key, r.reason) for r in rejected) == [("ds:cap:9", "unknown-image"), ("ds:img:1", "duplicate-id")]


def test_val5k_partial_validation(shared_data: Path) -> None:
    path = shared_data / "coco-karpathy" / "val5k_partial.jsonl"
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    with_text = {r["image_id"] for r in raw if (r["caption_tok"] or r["caption_raw"] or "").strip()}
    expected_no_captions = len({r["image_id"] for r in raw} - with_text)
    assert expected_no_captions == 3530

    images, captions, rejected = validate_by_hand(list(READERS.create("coco-karpathy-jsonl").read(str(path))))
    assert count_reasons((r.kind, r.reason) for r in rejected) == {
        "caption": {"null-text": 17650},
        "image": {"no-captions": expected_no_captions},
    }
    assert len(captions) == 25000 - 17650 == 7350
    assert len(images) == 5000 - expected_no_captions == 1470
    assert {c.image_id for c in captions} == {i.image_id for i in images}
    assert all(c.text == " ".join(c.text.split()) for c in captions)


def test_duplicates_across_the_pipeline_steps(tmp_path: Path) -> None:
    path = tmp_path / "dups.jsonl"
    lines = [
        {"image_id": 1, "file_name": "a.jpg", "caption_id": 10, "caption_tok": "one", "caption_raw": None},
        {"image_id": 1, "file_name": "a.jpg", "caption_id": 10, "caption_tok": "again", "caption_raw": None},
        {"image_id": 2, "file_name": "b.jpg", "caption_id": 20, "caption_tok": " ", "caption_raw": None},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    images, captions, rejected = validate_by_hand(list(READERS.create("coco-karpathy-jsonl").read(str(path))))
    assert [(c.caption_id, c.text) for c in captions] == [("coco:cap:10", "one")]
    assert [i.image_id for i in images] == ["coco:img:1"]
    assert sorted((r.reason, r.source) for r in rejected) == [
        ("duplicate-id", "dups.jsonl:2"),
        ("empty-text", "dups.jsonl:3"),
        ("no-captions", "dups.jsonl:3"),
    ]


# ---------------------------------------------------------------------------- hardening: text length, image paths


def test_caption_text_length_limit() -> None:
    assert DEFAULT_MAX_TEXT_LENGTH == 1000
    at_limit = caption(text="a" * 1000)
    assert check_caption_text(at_limit, 1000) is at_limit
    over = check_caption_text(caption(text="a" * 1001), 1000)
    assert isinstance(over, Rejected)
    assert (over.kind, over.key, over.reason) == ("caption", "ds:cap:1", "text-too-long")
    assert "1001 characters" in over.detail and "limit of 1000" in over.detail and "max_text_length" in over.detail
    assert json.loads(over.record)["text"] == "a" * 1001  # the whole text stays in the quarantine
    huge = check_caption_text(caption(text="word " * 4000), DEFAULT_MAX_TEXT_LENGTH)  # the 20,000-character caption
    assert isinstance(huge, Rejected) and huge.reason == "text-too-long" and "19999 characters" in huge.detail
    # Length is counted on the normalised text: padding whitespace does not push a caption over.
    padded = check_caption_text(caption(text="  " + "b" * 10 + "   \n"), 10)
    assert isinstance(padded, CaptionRecord) and padded.text == "b" * 10


def outside(record: ImageRecord | Rejected) -> Rejected:
    assert isinstance(record, Rejected), record
    assert (record.kind, record.reason) == ("image", "path-outside-images")
    return record


@pytest.fixture
def images_folder(tmp_path: Path) -> Path:
    """``tmp_path/images`` holding ``a.jpg``, beside a ``secret/private.jpg`` it must not reach."""
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.jpg").write_bytes(b"not really a jpeg")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "private.jpg").write_bytes(b"private")
    return tmp_path / "images"


def test_check_image_path_refuses_a_parent_directory(images_folder: Path) -> None:
    for name in ("../secret/private.jpg", "../x.jpg", "sub/../../secret/private.jpg"):  # existing or not
        rejected = outside(check_image_path(image(file_name=name), str(images_folder)))
        assert rejected.key == "ds:img:1" and rejected.source == "f.jsonl:1"
        assert repr(name) in rejected.detail and str(images_folder) in rejected.detail
        assert json.loads(rejected.record)["file_name"] == name
    kept = image(file_name="a.jpg")
    assert check_image_path(kept, str(images_folder)) is kept
    assert check_image_path(image(file_name="sub/../a.jpg"), str(images_folder)) == image(file_name="sub/../a.jpg")
    assert check_image_path(image(file_name="../x.jpg"), None) == image(file_name="../x.jpg")  # no folder, nothing to confine


def test_check_image_path_refuses_etc_passwd(images_folder: Path) -> None:
    rejected = outside(check_image_path(image(file_name="../../../../etc/passwd"), str(images_folder)))
    assert "'../../../../etc/passwd'" in rejected.detail
    # Guarded twice: the file check refuses it too rather than open it.
    with pytest.raises(ValueError, match="outside"):
        check_image_file(image(file_name="../../../../etc/passwd"), str(images_folder))


def test_check_image_path_absolute_names(images_folder: Path) -> None:
    outside(check_image_path(image(file_name="/etc/passwd"), str(images_folder)))
    outside(check_image_path(image(file_name=str(images_folder.parent / "secret" / "private.jpg")), str(images_folder)))
    outside(check_image_path(image(file_name="/a.jpg"), str(images_folder)))  # no longer read as "a.jpg"
    inside = image(file_name=str(images_folder / "a.jpg"))  # absolute, but resolves inside the folder
    assert check_image_path(inside, str(images_folder)) is inside
    assert check_image_file(inside, str(images_folder)).path == str(images_folder / "a.jpg")


def test_check_image_path_follows_symlinks(images_folder: Path) -> None:
    (images_folder / "link.jpg").symlink_to(images_folder.parent / "secret" / "private.jpg")
    (images_folder / "escape").symlink_to(images_folder.parent / "secret", target_is_directory=True)
    (images_folder / "alias.jpg").symlink_to(images_folder / "a.jpg")
    rejected = outside(check_image_path(image(file_name="link.jpg"), str(images_folder)))
    assert str(images_folder.parent / "secret" / "private.jpg") in rejected.detail  # where it really points
    outside(check_image_path(image(file_name="escape/private.jpg"), str(images_folder)))
    outside(check_image_path(image(file_name="val2014/link.jpg"), str(images_folder)))  # its base-name fallback escapes
    with pytest.raises(ValueError, match="outside"):
        check_image_file(image(file_name="link.jpg"), str(images_folder))
    alias = image(file_name="alias.jpg")  # a link that stays inside is fine
    assert check_image_path(alias, str(images_folder)) is alias
    # The images folder itself may be a link: paths are compared after resolving both.
    (images_folder.parent / "folder-link").symlink_to(images_folder, target_is_directory=True)
    assert check_image_path(image(file_name="a.jpg"), str(images_folder.parent / "folder-link")) == image(file_name="a.jpg")


def test_check_image_path_on_uris_is_lexical() -> None:
    pytest.importorskip("google.cloud.storage", reason="joining gs:// paths needs Beam's GCS filesystem: the dataflow extra")
    bucket = "gs://bucket/images"
    assert check_image_path(image(file_name="val2014/a.jpg"), bucket) == image(file_name="val2014/a.jpg")
    for name in ("../a.jpg", "val2014/../../other/a.jpg", "gs://other-bucket/a.jpg", "gs://bucket/images-2/a.jpg", "/etc/passwd"):
        outside(check_image_path(image(file_name=name), bucket))
    assert check_image_path(image(file_name="gs://bucket/images/a.jpg"), bucket) == image(file_name="gs://bucket/images/a.jpg")
    outside(check_image_path(image(file_name="a\0.jpg"), bucket))


@pytest.mark.timeout(30)  # a FIFO named x.jpg used to hang ingest forever
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_image_file_that_is_not_a_regular_file_is_quarantined_never_opened(images_folder: Path, kind: str) -> None:
    make_special(images_folder / "x.jpg", kind)
    for name in ("x.jpg", "sub/x.jpg"):  # as given, or by its base name
        rejected = check_image_path(image(file_name=name), str(images_folder), root=str(images_folder.parent))
        assert isinstance(rejected, Rejected) and (rejected.kind, rejected.key, rejected.reason) == (
            "image",
            "ds:img:1",
            "not-a-regular-file",
        )
        assert rejected.detail == f"images/x.jpg is {KINDS[kind]}, not a regular file: only regular files are read as input"
    # a file that became special after the path check is unreadable, not waited on
    assert check_image_file(image(file_name="x.jpg"), str(images_folder)).pixels == PIXELS_UNREADABLE
    assert check_image_path(image(file_name="a.jpg"), str(images_folder)) == image(file_name="a.jpg")


def test_a_plain_name_resolves_as_realpath_resolves_it(images_folder: Path) -> None:
    """The one-lstat shortcut for plain file names agrees with ``realpath`` through a folder that is
    itself a link, for links inside, links out, missing files and names it leaves to ``realpath``."""
    (images_folder / "link.jpg").symlink_to(images_folder.parent / "secret" / "private.jpg")
    (images_folder / "alias.jpg").symlink_to(images_folder / "a.jpg")
    (images_folder.parent / "folder-link").symlink_to(images_folder, target_is_directory=True)
    for folder in (images_folder, images_folder.parent / "folder-link"):
        for name in ("a.jpg", "link.jpg", "alias.jpg", "missing.jpg", "..", ".", "", "sub/a.jpg", "../secret/private.jpg"):
            assert validate._resolved_in(str(folder), name) == os.path.realpath(os.path.join(folder, name)), (folder, name)
    outside(check_image_path(image(file_name="link.jpg"), str(images_folder.parent / "folder-link")))


@pytest.fixture(scope="module")
def tricky_folder(tmp_path_factory: pytest.TempPathFactory, test_photos: Path) -> Path:
    """An images folder of every kind of entry a file name can meet: a photo, a file that is no
    image, special files, links inside, out and dangling, a subfolder; beside a file it must not reach."""
    base = tmp_path_factory.mktemp("tricky")
    folder, secret = base / "images", base / "secret"
    (folder / "sub").mkdir(parents=True)
    secret.mkdir()
    (secret / "private.jpg").write_bytes(b"private")
    photo = sorted(test_photos.glob("*.jpg"))[0]
    shutil.copy(photo, folder / "photo.jpg")
    shutil.copy(photo, folder / "sub" / "photo.jpg")
    (folder / "a.jpg").write_bytes(b"not really a jpeg")
    (folder / " spaced.jpg").write_bytes(b"a name with a blank")
    for kind in KINDS:
        make_special(folder / f"{kind}.jpg", kind)
    (folder / "link.jpg").symlink_to(secret / "private.jpg")
    (folder / "alias.jpg").symlink_to(folder / "photo.jpg")
    (folder / "dangling.jpg").symlink_to(folder / "gone.jpg")
    (folder / "escape").symlink_to(secret, target_is_directory=True)
    (base / "folder-link").symlink_to(folder, target_is_directory=True)
    return folder


NAMES = ["photo.jpg", "a.jpg", " spaced.jpg", *(f"{kind}.jpg" for kind in KINDS), "link.jpg", "alias.jpg", "dangling.jpg"]
NAMES += ["missing.jpg", "sub", "escape", "sub/photo.jpg", "x/photo.jpg", "escape/private.jpg", "../secret/private.jpg", ".", ".."]


@given(
    name=st.one_of(st.sampled_from(NAMES), st.text(alphabet="a./ \t\0\ud800é", max_size=6)),
    pad=st.sampled_from(["", " ", "\t "]),
    folder=st.sampled_from(["images", "folder-link", "secret/private.jpg", "nowhere"]),
)
@settings(max_examples=300, deadline=None)
def test_check_image_is_check_image_path_then_check_image_file(tricky_folder: Path, name: str, pad: str, folder: str) -> None:
    """The one-``lstat`` look at a plain name (``check_image``) says exactly what the general rules
    say, or raises what they raise (a lone surrogate, which readers refuse, is no path)."""
    images_dir, root = str(tricky_folder.parent / folder), str(tricky_folder.parent)
    record = image(file_name=pad + name + pad)

    def by_rules() -> ImageRecord | Rejected:
        checked = check_image_path(record, images_dir, root)
        return check_image_file(checked, images_dir, root) if isinstance(checked, ImageRecord) else checked

    assert outcome(lambda: check_image(record, images_dir, root)) == outcome(by_rules)


def outcome(check: Callable[[], object]) -> object:
    """What ``check`` returns, or the type and message of what it raises."""
    try:
        return check()
    except ValueError as error:
        return type(error), str(error)


def test_check_image_looks_once_at_plain_names(tricky_folder: Path) -> None:
    """The shortcut is taken for plain names that are no links, and left to the rules for the rest."""
    folder = str(tricky_folder)
    assert validate._looked("photo.jpg", folder) == (f"{folder}/photo.jpg", "")
    assert validate._looked("missing.jpg", folder) == (None, "")
    assert validate._looked("fifo.jpg", folder) == (f"{folder}/fifo.jpg", KINDS["fifo"])
    for name in ("link.jpg", "dangling.jpg", "sub/photo.jpg", "..", "a\0.jpg"):
        assert validate._looked(name, folder) is None, name
    assert check_image(image(file_name="photo.jpg"), folder).pixels == PIXELS_OK
    assert check_image(image(file_name="photo.jpg"), None) == image(file_name="photo.jpg")
