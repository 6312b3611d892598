"""Embed throughput: each encoder called directly vs. inside the ``crisscross embed`` Beam stage.

The reference is the direct encoder call in the same run: the same items, the same batch size,
the model loaded beforehand.  ``stage / direct`` is then what running the encoder as a Beam stage
costs (or gains).  Absolute items/s on a shared machine vary from run to run; the ratios, taken
minutes apart on the same machine, are what to compare.

The stage is timed as a whole ``pipelines.embed.main`` call, as a user runs it: it includes
loading the model in the main process (for the metadata) and again in each worker's ``setup``,
reading the items, bucketing and batching, the co-caption means of text encoders, and writing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow.parquet as pq

from benchmarks import save_result
from crisscross.core.images import load_rgb
from crisscross.embed.encoders import IMAGE, IMAGE_ENCODERS, TEXT, TEXT_ENCODERS, Encoder
from crisscross.embed.sets import CAPTIONS, IMAGES
from crisscross.ingest.records import PIXELS_OK
from crisscross.pipelines import embed, ingest

NAME = "embed_throughput"
SHARED_DATA = Path(os.environ.get("CRISSCROSS_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
CAPTIONS_FILE = SHARED_DATA / "coco-karpathy" / "test5k.jsonl"
PHOTOS = SHARED_DATA / "coco-images" / "karpathy-test"
ENCODERS: tuple[tuple[str, str], ...] = (
    ("use-m3", TEXT),
    ("bow-glove50", TEXT),
    ("minilm", TEXT),
    ("efficientnet-lite0", IMAGE),
)
BATCH_SIZE = embed.EmbedSettings().batch_size
MULTI_PROCESS_ARGS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
# Worker processes are spawned at pipeline run with a copy of os.environ, so setting this here
# just before the run reaches them (checked: torch.get_num_threads() is 1 in the workers), while
# this process's own torch, initialised earlier, keeps its threads.
MULTI_PROCESS_ENV = {"OMP_NUM_THREADS": "1"}
# minilm's 2-process stage over all 25,000 captions takes 2.5 minutes here and pushed a full run
# past 10 minutes, so full runs give it the quick item set (1,850 captions) and a direct run on
# those same captions as its reference.
MULTI_PROCESS_ON_QUICK_ITEMS = frozenset({"minilm"})


@dataclass(frozen=True)
class Row:
    encoder: str
    modality: str
    items: int
    load_s: float
    direct_s: float
    stage_s: float
    multi_process_items: int
    multi_process_direct_s: float  # the direct run on the multi-process variant's items
    multi_process_s: float

    @property
    def direct_rate(self) -> float:
        return self.items / self.direct_s

    @property
    def stage_rate(self) -> float:
        return self.items / self.stage_s

    @property
    def multi_process_rate(self) -> float:
        return self.multi_process_items / self.multi_process_s

    @property
    def multi_process_ratio(self) -> float:
        return self.multi_process_direct_s / self.multi_process_s

    def as_json(self) -> dict[str, object]:
        derived = {
            "direct_items_per_s": self.direct_rate,
            "stage_items_per_s": self.stage_rate,
            "stage_over_direct": self.stage_rate / self.direct_rate,
            "multi_process_items_per_s": self.multi_process_rate,
            "multi_process_over_direct": self.multi_process_ratio,
        }
        return {key: round(value, 3) if isinstance(value, float) else value for key, value in {**asdict(self), **derived}.items()}


def run(args: argparse.Namespace) -> None:
    # The stage's per-tenth progress lines would bury the table.
    logging.getLogger("crisscross").setLevel(logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory(prefix="crisscross-bench-") as tmp:
        root = Path(tmp)
        items = prepare_items(root / "items", quick=args.quick)
        quick_items = items if args.quick else prepare_items(root / "quick-items", quick=True)
        for spec, modality in ENCODERS:
            rows.append(measure(spec, modality, items, quick_items, root))
    print(table(rows))
    if any(row.multi_process_items != row.items for row in rows):
        print("* 2-process stage on the quick item set (to keep the run short), against a direct run on the same items;")
        print("  worker start-up weighs more on fewer items, so that ratio understates the 2-process stage.")
    path = save_result(
        NAME,
        {
            "quick": args.quick,
            "batch_size": BATCH_SIZE,
            "cpus": os.cpu_count(),
            "multi_process": {"args": MULTI_PROCESS_ARGS, "env": MULTI_PROCESS_ENV},
            "rows": [row.as_json() for row in rows],
        },
    )
    print(f"written to {path}")


def measure(spec: str, modality: str, items: Path, quick_items: Path, root: Path) -> Row:
    encoder = (TEXT_ENCODERS if modality == TEXT else IMAGE_ENCODERS).create(spec)
    started = time.perf_counter()
    encoder.load()
    load_s = time.perf_counter() - started
    ids, payloads = read_items(items, modality)
    direct_s = time_direct(encoder, modality, ids, payloads)
    print(f"  {spec}: {len(ids)} items; load {load_s:.1f}s, direct {direct_s:.1f}s", flush=True)
    stage_s = time_stage(spec, modality, items, root, len(ids))
    print(f"  {spec}: stage {stage_s:.1f}s", flush=True)
    multi_items, multi_n, multi_direct_s = items, len(ids), direct_s
    if spec in MULTI_PROCESS_ON_QUICK_ITEMS and quick_items != items:
        multi_ids, multi_payloads = read_items(quick_items, modality)
        multi_items, multi_n = quick_items, len(multi_ids)
        multi_direct_s = time_direct(encoder, modality, multi_ids, multi_payloads)
        print(f"  {spec}: {multi_n} quick items for the 2-process stage; direct {multi_direct_s:.1f}s", flush=True)
    with environment(MULTI_PROCESS_ENV):
        multi_s = time_stage(spec, modality, multi_items, root, multi_n, MULTI_PROCESS_ARGS)
    print(f"  {spec}: 2-process stage {multi_s:.1f}s", flush=True)
    return Row(spec, modality, len(ids), load_s, direct_s, stage_s, multi_n, multi_direct_s, multi_s)


def prepare_items(out: Path, quick: bool) -> Path:
    """Ingest once, so every variant reads the same items; ``quick`` keeps the photographed images."""
    source = CAPTIONS_FILE
    if quick:
        names = {path.name for path in PHOTOS.glob("*.jpg")}
        source = out.with_suffix(".jsonl")
        with CAPTIONS_FILE.open() as lines:
            source.write_text("".join(line for line in lines if json.loads(line)["file_name"] in names))
    with contextlib.redirect_stdout(io.StringIO()):
        report = ingest.main(["--in", str(source), "--images", str(PHOTOS), "--out", str(out)])
    print(f"  {out.name}: {report['captions']} captions, {report['images']} images (pixels {report['pixels']})", flush=True)
    return out


def read_items(items: Path, modality: str) -> tuple[list[str], list[str]]:
    """Ids and payloads (caption text, image path) of what the stage encodes, in id order."""
    if modality == TEXT:
        captions = pq.read_table(items / "captions.parquet", columns=["caption_id", "text"])
        return captions.column("caption_id").to_pylist(), captions.column("text").to_pylist()
    images = [
        row
        for row in pq.read_table(items / "images.parquet", columns=["image_id", "path", "pixels"]).to_pylist()
        if row["pixels"] == PIXELS_OK
    ]
    return [row["image_id"] for row in images], [row["path"] for row in images]


def time_direct(encoder: Encoder, modality: str, ids: list[str], payloads: list[str]) -> float:
    """Seconds to encode every item in stage-sized batches with a loaded encoder.

    Images are decoded inside the timed loop because the stage decodes them too.
    """
    started = time.perf_counter()
    for start in range(0, len(ids), BATCH_SIZE):
        batch = payloads[start : start + BATCH_SIZE]
        encoder.encode(ids[start : start + BATCH_SIZE], [load_rgb(path) for path in batch] if modality == IMAGE else batch)
    return time.perf_counter() - started


def time_stage(spec: str, modality: str, items: Path, root: Path, n_items: int, beam_args: list[str] | None = None) -> float:
    """Wall seconds of one ``crisscross embed`` run with only this encoder; checks it encoded every item."""
    params = root / "params.json"
    encoders = {"text_encoders": [spec] if modality == TEXT else [], "image_encoders": [spec] if modality == IMAGE else []}
    params.write_text(json.dumps({"embed": {**encoders, "batch_size": BATCH_SIZE}}))
    out = root / "embeddings"
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        report = embed.main(["--in", str(items), "--out", str(out), "--params", str(params), *(beam_args or [])])
    seconds = time.perf_counter() - started
    written = report["encoders"][f"{modality}:{spec}"]["sets"][CAPTIONS if modality == TEXT else IMAGES]
    if written != n_items:
        raise RuntimeError(f"{spec}: the stage wrote {written} vectors for {n_items} items")
    return seconds


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the block, then restore them."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                del os.environ[key]
            else:
                os.environ[key] = value


def table(rows: list[Row]) -> str:
    header = ("encoder", "items", "load s", "direct it/s", "stage it/s", "stage/direct", "2-proc items", "2-proc it/s", "2-proc/direct")
    lines = [
        (
            row.encoder,
            f"{row.items}",
            f"{row.load_s:.1f}",
            f"{row.direct_rate:.0f}",
            f"{row.stage_rate:.0f}",
            f"{row.stage_rate / row.direct_rate:.2f}",
            f"{row.multi_process_items}{'*' if row.multi_process_items != row.items else ''}",
            f"{row.multi_process_rate:.0f}",
            f"{row.multi_process_ratio:.2f}",
        )
        for row in rows
    ]
    widths = [max(len(cells[i]) for cells in (header, *lines)) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(cells, widths, strict=True)))
        for cells in (header, *lines)
    )
