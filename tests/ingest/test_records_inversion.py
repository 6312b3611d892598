"""The caption → image link and its inversion, read by every step that groups an image's captions."""

from __future__ import annotations

import pyarrow as pa

from crisscross.ingest.records import caption_images, captions_by_image


def test_captions_are_grouped_by_image_in_id_order() -> None:
    table = pa.table({"caption_id": ["c:3", "c:1", "c:2", "c:9"], "image_id": ["i:b", "i:a", "i:b", "i:c"], "text": ["x"] * 4})
    image_of = caption_images(table)
    assert image_of == {"c:3": "i:b", "c:1": "i:a", "c:2": "i:b", "c:9": "i:c"}
    grouped = captions_by_image(image_of)
    assert grouped == {"i:a": ("c:1",), "i:b": ("c:2", "c:3"), "i:c": ("c:9",)}
    assert list(grouped) == ["i:a", "i:b", "i:c"]  # in the order of each image's first caption
    assert captions_by_image({}) == {}
