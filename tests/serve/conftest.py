"""Fixtures for the rater app: the round's files, a store, the app under uvicorn on a loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from crisscross.annotate.store import Store
from tests.serve.round import COLOURS, MARKUP, Clock, RoundFiles, cap, img, make_app, make_store, served, tasks_table


@pytest.fixture(scope="session")
def round_files(tmp_path_factory: pytest.TempPathFactory) -> RoundFiles:
    root = tmp_path_factory.mktemp("serve-round")
    items, tasks, images = root / "items", root / "tasks", root / "items" / "images"
    images.mkdir(parents=True)
    tasks.mkdir()
    image_rows = []
    for i in range(1, 9):
        path = images / f"photo{i}.png"
        Image.new("RGB", (160 + 8 * i, 120), COLOURS[i - 1]).save(path)
        image_rows.append({"image_id": img(i), "path": str(path), "pixels": "ok"})
    caption_rows = []
    for i in range(1, 21):
        text = MARKUP if i == 1 else f"Caption {i}: a person with a {['dog', 'kite', 'bike', 'cake'][i % 4]} in the park."
        caption_rows.append({"caption_id": cap(i), "image_id": img((i - 1) % 8 + 1), "text": text})
    pq.write_table(pa.Table.from_pylist(caption_rows), items / "captions.parquet")
    pq.write_table(pa.Table.from_pylist(image_rows), items / "images.parquet")
    pq.write_table(tasks_table(), tasks / "tasks.parquet")
    return RoundFiles(root, items, tasks, images)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@dataclass
class LiveServer:
    url: str
    store: Store
    server: Any


@pytest.fixture
def live_server(database: str, round_files: RoundFiles) -> Iterator[LiveServer]:
    """The app under uvicorn on a free loopback port, in a thread of this process, on each backend."""
    store = make_store(database)
    with served(make_app(store, round_files)) as (url, server):
        yield LiveServer(url, store, server)
