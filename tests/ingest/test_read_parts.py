"""A line source read in parts gives what one reading of the whole file gives, whatever the file.

Each part reads every ``parts``-th block of lines (:meth:`LineReader.read_part`); its images come out
as sightings, settled against the file's first row of each image (:func:`settle_image`), and a part
whose own first row of an image contradicts it is read again (:meth:`LineReader.contradictions`).
The files are drawn by Hypothesis: the reader fuzzing's inputs (``tests/ingest/test_fuzz_readers.py``)
and files of a few images whose rows give them other file names, so that conflicts cross parts.
Blocks of 1 to 3 lines put one image's rows in several parts of these small files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crisscross.ingest import readers
from crisscross.ingest.readers import READERS, ImageSighting, LineReader, SourceFileError, settle_image
from tests.fuzzing import fuzz
from tests.ingest.test_fuzz_readers import CASES, inputs

LINE_CASES = {case.reader: case for case in CASES if isinstance(READERS.create(case.reader, **case.options), LineReader)}


def in_parts(reader: LineReader, path: str, parts: int) -> list[Any]:
    """Every part read, the sightings settled and the parts to read again read again: what the ingest composite does across workers."""
    items, sightings, again = [], {}, {}
    for part in range(parts):
        for item in reader.read_part(path, part, parts):
            if isinstance(item, ImageSighting):
                sightings.setdefault(item.image.image_id, []).append(item)
            else:
                items.append(item)
    for seen in sightings.values():
        first, rejected, parts_again = settle_image(seen)
        items += [first, *rejected]
        for part in parts_again:
            again.setdefault(part, {})[first.image_id] = first
    for part, firsts in again.items():
        items += reader.contradictions(path, part, parts, firsts)
    return items


@st.composite
def contradicting_files(draw: st.DrawFn) -> bytes:
    """Up to 12 lines: rows of images 1 and 2, each giving one of three file names, and a few lines that are no row."""
    row = st.builds(
        lambda image, name, caption: json.dumps({"image_id": image, "file_name": name, "caption_id": caption, "caption_tok": "a cat ."}),
        st.sampled_from([1, 2]),
        st.sampled_from(["a.jpg", "b.jpg", "c.jpg"]),
        st.integers(1, 30),
    )
    lines = draw(st.lists(st.one_of(row, row, row, st.sampled_from(["", "{", '"text"'])), min_size=1, max_size=12))
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("read-parts")


def test_both_json_lines_readers_read_in_parts() -> None:
    assert set(LINE_CASES) == {"coco-karpathy-jsonl", "flickr30k-karpathy-jsonl"}


@fuzz(400)
@given(
    reader_name=st.sampled_from(sorted(LINE_CASES)),
    data=st.data(),
    parts=st.integers(2, 4),
    block=st.integers(1, 3),
)
def test_parts_settled_give_the_whole_file_s_records_and_rejects(
    folder: Path, reader_name: str, data: st.DataObject, parts: int, block: int
) -> None:
    case = LINE_CASES[reader_name]
    drawn = data.draw(st.one_of(contradicting_files(), inputs(case)) if reader_name == "coco-karpathy-jsonl" else inputs(case))
    path = folder / "source.jsonl"
    path.write_bytes(drawn)
    reader = READERS.create(reader_name, **case.options)
    with mock.patch.object(readers, "PART_LINES", block):
        try:
            whole = list(reader.read(str(path)))
        except SourceFileError:  # the file itself is unusable (never for JSON Lines content, see the fuzzing): so is every part
            with pytest.raises(SourceFileError):
                in_parts(reader, str(path), parts)
            return
        parted = in_parts(reader, str(path), parts)
    assert sorted(map(repr, parted)) == sorted(map(repr, whole))
