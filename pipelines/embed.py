"""``crisscross embed``: items → embeddings per encoder (captions, co-caption means, images)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import apache_beam as beam

from crisscross.beam.common import gather, unpacking
from crisscross.beam.embed import COLUMNS, EmbedItems, build_encoder, write_skipped
from crisscross.core import io
from crisscross.core.errors import ParamError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, scheme_of
from crisscross.core.settings import setting
from crisscross.embed import DEFAULT_IMAGE_ENCODERS, DEFAULT_TEXT_ENCODERS
from crisscross.embed.encoders import IMAGE, TEXT
from crisscross.embed.sets import CAPTIONS, COCAPTION_MEAN, IMAGES, EmbeddingSet, set_dir
from crisscross.ingest.records import PIXELS_OK
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import (
    Finished,
    StageArgs,
    counters,
    in_this_process,
    parse_args,
    run_stage,
    worker_processes,
    write_quarantine,
)

STAGE = Stage(name="embed", order=20, description="items → embeddings per encoder (captions, co-caption means, images)")


@dataclass(frozen=True)
class EmbedSettings:
    text_encoders: tuple[str, ...] = DEFAULT_TEXT_ENCODERS
    image_encoders: tuple[str, ...] = DEFAULT_IMAGE_ENCODERS
    batch_size: int = setting(64, low=1)
    # CPU threads per worker process for BLAS / torch.  OpenBLAS and torch split their sums by thread,
    # so the vectors' last bits follow this number: the default 1 gives the same bytes on any machine
    # and for any worker count (run more worker processes for speed); 0 = the worker machine's cores
    # divided by its worker processes (faster in one process; bytes then follow the core count).
    threads: int = setting(1, low=0)
    # Batches encoded at once per worker process, each on its own thread with ``threads`` kernel
    # threads and its own copy of the model: the bytes do not depend on it.  0 = the worker
    # machine's cores divided by its worker processes and by ``threads``.
    lanes: int = setting(0, low=0)


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, EmbedSettings)
    return run_stage(stage, build, report)


def _ids(table_path: str, column: str) -> list[str]:
    return io.read_parquet(table_path).column(column).to_pylist()


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    if not stage.settings.text_encoders and not stage.settings.image_encoders:
        raise ParamError("embed.text_encoders and embed.image_encoders are both empty: name at least one encoder")
    captions_path = io.join(stage.inputs, "captions.parquet")
    images_path = io.join(stage.inputs, "images.parquet")
    caption_ids = _ids(captions_path, "caption_id")
    images = io.read_parquet(images_path).select(["image_id", "pixels"]).to_pydict()
    image_ids, with_pixels = images["image_id"], sum(p == PIXELS_OK for p in images["pixels"])
    scheme = scheme_of(image_ids[0]) if image_ids else None
    tables = {TEXT: (captions_path, caption_ids, CAPTION_KIND), IMAGE: (images_path, image_ids, IMAGE_KIND)}
    rejected, skipped, encoders, rows = [], [], {}, {}
    processes = worker_processes(stage.beam_args)
    for modality, specs in ((TEXT, stage.settings.text_encoders), (IMAGE, stage.settings.image_encoders)):
        path, ids, kind = tables[modality]
        parse_id = functools.partial(scheme.parse, kind=kind) if scheme else str
        for spec in specs:
            encoder = build_encoder(spec, modality)
            encoder.prepare()  # models with a known width load nothing here; their workers do
            bind_rejects = encoder.bind(ids, parse_id)
            meta = {
                "encoder": spec,
                "version": encoder.version,
                "modality": modality,
                "dim": encoder.dim,
                "needs_payload": encoder.needs_payload,
                "items": len(ids),
                "encodable": with_pixels if modality == IMAGE and encoder.needs_payload else len(ids),
            }
            encoders[(modality, spec)] = (meta, len(bind_rejects))
            if modality not in rows:  # each table is read once, and only if an encoder needs it
                rows[modality] = pipeline | f"Read[{modality}]" >> beam.io.ReadFromParquetBatched(path, columns=list(COLUMNS[modality]))
            label = f"{modality}:{spec}"
            outputs = rows[modality] | f"Embed[{label}]" >> EmbedItems(
                spec,
                modality,
                out,
                meta,
                [] if encoder.needs_payload else ids,
                parse_id,
                stage.settings.batch_size,
                stage.settings.threads,
                stage.settings.lanes,
                processes,
                stage.root,
                spread=not in_this_process(stage.beam_args),
            )
            rejected += [outputs.rejected, pipeline | f"Unusable[{label}]" >> beam.Create(bind_rejects)]
            skipped.append(outputs.skipped)
    write_quarantine(tuple(rejected), out, stage.root)
    gather("GatherSkipped", tuple(skipped) | "AllSkipped" >> beam.Flatten()) | "WriteSkipped" >> beam.Map(
        unpacking(write_skipped), io.join(out, "skipped.parquet")
    )
    return encoders, len(caption_ids), len(image_ids)


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    encoders, n_captions, n_images = done.built
    out = done.out
    skipped = io.read_parquet(io.join(out, "skipped.parquet")).to_pylist()
    per_encoder: dict[str, Any] = {}
    summary: dict[str, str] = {"items": f"{n_captions} captions, {n_images} images"}
    for (modality, spec), (meta, unusable) in encoders.items():
        kinds = (CAPTIONS, COCAPTION_MEAN) if modality == TEXT else (IMAGES,)
        sets = {kind: EmbeddingSet.read_meta(set_dir(out, modality, spec, kind))["count"] for kind in kinds}
        counts = counters(done.result, f"embed/{spec}")
        stats = {k.removeprefix("stat/"): v for k, v in counts.items() if k.startswith("stat/")}
        rejected = unusable + sum(v for k, v in counts.items() if k.startswith("rejected/"))
        left_out: dict[str, int] = {}
        for row in skipped:
            if row["encoder"] == spec:
                left_out[row["reason"]] = left_out.get(row["reason"], 0) + 1
        per_encoder[f"{modality}:{spec}"] = {
            "version": meta["version"],
            "dim": meta["dim"],
            "in": meta["items"],
            "sets": sets,
            "rejected": rejected,
            "skipped": left_out,
            "stats": stats,
        }
        line = f"{meta['items']} in → " + ", ".join(f"{n} {kind}" for kind, n in sets.items()) + f" ({meta['dim']}-d); {rejected} rejected"
        if left_out:
            line += "; left out: " + ", ".join(f"{n} {reason}" for reason, n in left_out.items())
        if stats.get("tokens"):
            line += f"; OOV rate {stats.get('oov_tokens', 0) / stats['tokens']:.2%}"
        summary[f"{modality}:{spec}"] = line
    summary["quarantine"] = f"{done.quarantined} records → {stage.shown(io.join(stage.out, 'quarantine.parquet'))}"
    return {"encoders": per_encoder, "rejected": done.rejected, "summary": summary}
