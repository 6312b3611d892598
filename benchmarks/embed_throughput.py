"""Embed throughput: each encoder called directly vs. inside the ``crisscross embed`` Beam stage,
with one worker and with two worker processes.

The reference is the direct encoder call in the same run: the same items, the same batch size,
the model loaded beforehand.  ``stage / direct`` is then what running the encoder as a Beam stage
costs (or gains); ``2-proc / stage`` is what a second worker process adds to the one-worker
stage.  Absolute items/s on a shared machine vary from run to run; the ratios, taken minutes
apart on the same machine, are what to compare.

The stage is timed as a whole ``pipelines.embed.main`` call, as a user runs it: it includes
whatever the main process prepares for the set metadata, loading the model in the workers,
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
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow.parquet as pq

from benchmarks import KARPATHY_PHOTOS, SHARED_DATA, save_result
from crisscross.core.images import load_rgb
from crisscross.embed.encoders import IMAGE, IMAGE_ENCODERS, TEXT, TEXT_ENCODERS, Encoder
from crisscross.embed.encoders.text import forget_shared_loads
from crisscross.embed.sets import CAPTIONS, IMAGES
from crisscross.ingest.records import PIXELS_OK
from crisscross.pipelines import embed, ingest

NAME = "embed_throughput"
CAPTIONS_FILE = SHARED_DATA / "coco-karpathy" / "test5k.jsonl"
ENCODERS: tuple[tuple[str, str], ...] = (
    ("use-m3", TEXT),
    ("bow-glove50", TEXT),
    ("minilm", TEXT),
    ("efficientnet-lite0", IMAGE),
)
BATCH_SIZE = embed.EmbedSettings().batch_size
# The stage fills each worker process's share of the cores with lanes (embed.lanes, 0 = cores ÷
# worker processes, one kernel thread each), so no thread environment variable is set here.
MULTI_PROCESS_ARGS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
# minilm's 2-process stage over all 25,000 captions takes minutes here and would push a full run
# past 10 minutes: full runs measure its 2-process stage on the quick item set only.
NO_MULTI_PROCESS_ON_FULL = frozenset({"minilm"})


@dataclass(frozen=True)
class Row:
    encoder: str
    modality: str
    item_set: str  # "full" (25,000 captions, 370 images) or "quick" (1,850 captions, 370 images)
    items: int
    load_s: float
    direct_s: float
    stage_s: float
    multi_process_s: float | None  # None: not measured on this item set

    @property
    def stage_over_direct(self) -> float:
        return self.direct_s / self.stage_s

    @property
    def multi_over_stage(self) -> float | None:
        return None if self.multi_process_s is None else self.stage_s / self.multi_process_s

    def as_json(self) -> dict[str, object]:
        derived = {
            "direct_items_per_s": self.items / self.direct_s,
            "stage_items_per_s": self.items / self.stage_s,
            "stage_over_direct": self.stage_over_direct,
            "multi_process_items_per_s": None if self.multi_process_s is None else self.items / self.multi_process_s,
            "multi_process_over_stage": self.multi_over_stage,
        }
        return {key: round(value, 3) if isinstance(value, float) else value for key, value in {**asdict(self), **derived}.items()}


def run(args: argparse.Namespace) -> None:
    # The stage's per-tenth progress lines would bury the table.
    logging.getLogger("crisscross").setLevel(logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory(prefix="crisscross-bench-") as tmp:
        root = Path(tmp)
        item_sets = {"quick": prepare_items(root / "quick-items", quick=True)}
        if not args.quick:
            item_sets["full"] = prepare_items(root / "items", quick=False)
        for spec, modality in ENCODERS:
            rows += measure(spec, modality, item_sets, root)
    print(table(rows))
    path = save_result(
        NAME,
        {
            "quick": args.quick,
            "batch_size": BATCH_SIZE,
            "cpus": os.cpu_count(),
            "multi_process": {"args": MULTI_PROCESS_ARGS},
            "rows": [row.as_json() for row in rows],
        },
    )
    print(f"written to {path}")


def measure(spec: str, modality: str, item_sets: dict[str, Path], root: Path) -> list[Row]:
    """Direct, one-worker stage and two-process stage of one encoder on each item set."""
    encoder = (TEXT_ENCODERS if modality == TEXT else IMAGE_ENCODERS).create(spec)
    started = time.perf_counter()
    encoder.load()
    load_s = time.perf_counter() - started
    rows = []
    for name, items in item_sets.items():
        ids, payloads = read_items(items, modality)
        direct_s = time_direct(encoder, modality, ids, payloads)
        stage_s = time_stage(spec, modality, items, root, len(ids))
        multi_s = None
        if not (name == "full" and spec in NO_MULTI_PROCESS_ON_FULL):
            multi_s = time_stage(spec, modality, items, root, len(ids), MULTI_PROCESS_ARGS)
        multi = "not run" if multi_s is None else f"{multi_s:.1f}s"
        print(f"  {spec} {name}: {len(ids)} items; direct {direct_s:.1f}s, stage {stage_s:.1f}s, 2-process stage {multi}", flush=True)
        rows.append(Row(spec, modality, name, len(ids), load_s, direct_s, stage_s, multi_s))
    return rows


def prepare_items(out: Path, quick: bool) -> Path:
    """Ingest once, so every variant reads the same items; ``quick`` keeps the photographed images."""
    source = CAPTIONS_FILE
    if quick:
        names = {path.name for path in KARPATHY_PHOTOS.glob("*.jpg")}
        source = out.with_suffix(".jsonl")
        with CAPTIONS_FILE.open() as lines:
            source.write_text("".join(line for line in lines if json.loads(line)["file_name"] in names))
    with contextlib.redirect_stdout(io.StringIO()):
        report = ingest.main(["--in", str(source), "--images", str(KARPATHY_PHOTOS), "--out", str(out)])
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
    forget_shared_loads()  # the stage loads its model as a user's command does, not from the direct run's load
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        report = embed.main(["--in", str(items), "--out", str(out), "--params", str(params), *(beam_args or [])])
    seconds = time.perf_counter() - started
    written = report["encoders"][f"{modality}:{spec}"]["sets"][CAPTIONS if modality == TEXT else IMAGES]
    if written != n_items:
        raise RuntimeError(f"{spec}: the stage wrote {written} vectors for {n_items} items")
    return seconds


def table(rows: list[Row]) -> str:
    header = ("encoder", "set", "items", "load s", "direct it/s", "stage it/s", "stage/direct", "2-proc it/s", "2-proc/stage")
    lines = [
        (
            row.encoder,
            row.item_set,
            f"{row.items}",
            f"{row.load_s:.1f}",
            f"{row.items / row.direct_s:.0f}",
            f"{row.items / row.stage_s:.0f}",
            f"{row.stage_over_direct:.2f}",
            "–" if row.multi_process_s is None else f"{row.items / row.multi_process_s:.0f}",
            "–" if row.multi_over_stage is None else f"{row.multi_over_stage:.2f}",
        )
        for row in rows
    ]
    widths = [max(len(cells[i]) for cells in (header, *lines)) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(cells, widths, strict=True)))
        for cells in (header, *lines)
    )
