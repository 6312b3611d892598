"""Property-based tests (Hypothesis) of ``evaluate --bison``'s reader
(:func:`crisscross.evaluate.tables.read_bison`): COCO-BISON's released JSON shape and the bison
stage's CSV table, random, mutated and structurally valid files (:mod:`tests.fuzzing`).

For every input: triples and rejects, or an ``InputError`` whose message is one line naming the
file; never another exception.  Records are accounted for:

* *JSON*: the reader raises exactly when the bytes are no JSON object with a ``data`` list;
  otherwise every element of ``data`` is one triple or one ``bison`` reject sourced
  ``<file>:data[n]``.
* *CSV*: every row pandas reads is one triple or one reject sourced ``<file>:<line>``.

Triples are checked against the items (``image_of``, ``images``), as the stage does, and hold
canonical ids of the right kinds; rejects have a known reason and their record as JSON.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from crisscross.core.errors import InputError
from crisscross.core.ids import split_id
from crisscross.core.quarantine import Rejected
from crisscross.evaluate.tables import read_bison
from tests.evaluate.test_bison_tables import entry
from tests.fuzzing import (
    DEEP,
    RAWS,
    Raw,
    assert_one_line,
    describe,
    dumps,
    encode,
    file_inputs,
    fuzz,
    guarded,
    json_tokens,
    json_values,
    mutated_object,
)

EXAMPLES = 300  # per layout
REASONS = {"bad-triple", "bad-id", "same-image", "unknown-id", "caption-not-of-target"}
IMAGE_OF = {"coco:cap:516298": "coco:img:102805", "coco:cap:552033": "coco:img:10707", "coco:cap:7": "coco:img:88485"}
IMAGES = frozenset({"coco:img:102805", "coco:img:88485", "coco:img:10707", "coco:img:177015"})


DOCUMENT = {
    "info": {"source": "coco", "split": "val2014"},
    "data": [entry(0, 516298, 102805, [88485, 102805]), entry(1, 552033, 10707, [10707, 177015])],
}
CSV_SAMPLE = b"caption,target,decoy\ncoco:cap:516298,coco:img:102805,coco:img:88485\ncoco:cap:552033,coco:img:10707,coco:img:177015\n"

# ---------------------------------------------------------------------------- reading and accounting


def read(path: Path, data: bytes) -> tuple[list[dict[str, str]], list[Rejected]] | None:
    path.write_bytes(data)
    try:
        triples, rejected = read_bison(str(path), IMAGE_OF, IMAGES)
    except InputError as error:
        assert_one_line(str(error), path.name)
        return None
    return triples.to_pylist(), rejected


def expected_json(data: bytes, path: Path) -> list[str] | None:
    """The sources every element of ``data`` gives, or None when the file is unusable."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        return None
    return [f"{path}:data[{n}]" for n in range(len(document["data"]))]


def expected_csv(data: bytes, path: Path) -> list[str] | None:
    try:
        rows = len(pd.read_csv(BytesIO(data), dtype=str, keep_default_na=False))
    except (ValueError, OverflowError):
        return None
    return [f"{path}:{n}" for n in range(2, rows + 2)]


def check(path: Path, data: bytes) -> None:
    """Read ``data`` as the BISON file ``path`` and check the rule (module docstring)."""
    where = describe(path.name, data)
    outcome = guarded(where, lambda: read(path, data))
    expected = (expected_json if path.suffix == ".json" else expected_csv)(data, path)
    assert (outcome is None) == (expected is None), f"{where}: read {outcome is not None}, usable {expected is not None}"
    if outcome is None or expected is None:
        return
    triples, rejected = outcome
    for triple in triples:
        assert [split_id(triple[k])[1] for k in ("caption", "target", "decoy")] == ["cap", "img", "img"], f"{where}: {triple}"
        assert IMAGE_OF[triple["caption"]] == triple["target"] != triple["decoy"] and triple["decoy"] in IMAGES, f"{where}: {triple}"
    for reject in rejected:
        assert reject.kind == "bison" and reject.reason in REASONS and reject.source in expected, f"{where}: {reject}"
        json.loads(reject.record)
    assert len({r.source for r in rejected}) == len(rejected), f"{where}: two rejects of one element"
    assert len(triples) + len(rejected) == len(expected), f"{where}: {len(triples)} triples + {len(rejected)} rejects of {len(expected)}"


# ---------------------------------------------------------------------------- strategies

IDS = [516298, 102805, 88485, 552033, 10707, 177015, 7, "516298", "COCO_val2014_000000102805.jpg", "coco:img:88485", "coco:cap:7"]
VALUES = json_values([*map(str, IDS), "coco", "f30k", "a:b", "9" * 5000], ["image_id", "caption_id", "source"]) | st.sampled_from(IDS)


@st.composite
def json_files(draw: st.DrawFn) -> bytes:
    """The sample document with one to four changes: ``info``, ``data`` or an entry replaced, an
    entry's or a candidate's fields changed, entries repeated."""
    document: Any = copy.deepcopy(DOCUMENT)
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["whole", "top", "entry", "entry", "candidate", "repeat"]))
        entries = document.get("data") if isinstance(document, dict) else None
        if action == "whole":
            return encode(dumps(draw(VALUES | st.sampled_from(RAWS))))
        if action == "top" or not isinstance(entries, list) or not entries:
            document[draw(st.sampled_from(["info", "data"]))] = draw(VALUES)
            continue
        n = draw(st.integers(0, len(entries) - 1))
        if action == "repeat":
            entries.append(copy.deepcopy(entries[n]))
        elif not isinstance(entries[n], dict):
            entries[n] = draw(VALUES)
        elif action == "candidate" and isinstance(entries[n].get("image_candidates"), list) and entries[n]["image_candidates"]:
            candidates = entries[n]["image_candidates"]
            c = draw(st.integers(0, len(candidates) - 1))
            candidates[c] = (
                draw(mutated_object(candidates[c], ["image_id"], VALUES) | VALUES) if isinstance(candidates[c], dict) else draw(VALUES)
            )
        else:
            entries[n] = draw(mutated_object(entries[n], ["bison_id", "caption_id", "true_image_id", "image_candidates"], VALUES))
    return encode(dumps(document))


CELLS = ["coco:cap:516298", "coco:img:102805", "coco:img:88485", "coco:cap:1", "f30k:img:1", "", '"', "a,b", "\x00", "9" * 5000]


@st.composite
def csv_files(draw: st.DrawFn) -> bytes:
    header = draw(st.sampled_from(["caption,target,decoy", "caption,target", "decoy,target,caption,extra", ""]))
    cell = st.sampled_from(CELLS) | st.text(max_size=6)
    rows = draw(st.lists(st.lists(cell, min_size=0, max_size=4), max_size=5))
    return encode("\n".join([header, *(",".join(row) for row in rows)]) + "\n")


def layout_property(suffix: str, sample: bytes, structured: st.SearchStrategy[bytes], found: list[bytes]) -> Callable[..., None]:
    """The property test of one layout: every drawn input is read under the rule (module docstring)."""

    def test(folder: Path, data: bytes) -> None:
        check(folder / f"bison{suffix}", data)

    for data in found:
        test = example(data=data)(test)
    tokens = json_tokens(['"data"', '"info"', '"image_candidates"', '"true_image_id"', '"caption_id"', '"image_id"', "102805", "88485"])
    return fuzz(EXAMPLES)(given(data=file_inputs(sample, structured, tokens))(test))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-bison")


@pytest.mark.parametrize(("suffix", "sample"), [(".json", encode(dumps(DOCUMENT))), (".csv", CSV_SAMPLE)])
def test_the_samples_read_cleanly(folder: Path, suffix: str, sample: bytes) -> None:
    triples, rejected = read_bison(str(_written(folder / f"sample{suffix}", sample)), IMAGE_OF, IMAGES)
    assert triples.num_rows == 2 and rejected == []


def _written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# Inputs that ended the evaluate command in a traceback: nesting deeper than Python's recursion
# limit (RecursionError), an id of more digits than int() converts (ValueError).
FOUND_JSON = [
    DEEP.encode(),
    encode(dumps({"data": [entry(0, Raw('"' + "9" * 5000 + '"'), 102805, [88485, 102805])]})),
]
test_property_bison_json = layout_property(".json", encode(dumps(DOCUMENT)), json_files(), FOUND_JSON)
# pandas' EmptyDataError for an empty file and UnicodeDecodeError for one that is not UTF-8 were tracebacks.
test_property_bison_csv = layout_property(".csv", CSV_SAMPLE, csv_files(), [b"", b"\x80"])
