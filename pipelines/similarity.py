"""``crisscross similarity``: embeddings → top-K neighbours per space (S^C per text encoder over
co-caption means, S^V per image encoder over images), never a dense N×N matrix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import apache_beam as beam

from crisscross.beam.similarity import BACKENDS, WriteNeighbours
from crisscross.core import io
from crisscross.core.errors import InputError
from crisscross.core.settings import Options, setting
from crisscross.embed.sets import COCAPTION_MEAN, IMAGES, EmbeddingSet
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, parse_args, run_stage, worker_processes, write_quarantine
from crisscross.similarity.neighbours import measured_recall, prepare

STAGE = Stage(
    name="similarity",
    order=30,
    description="embeddings → top-K neighbours per space (S^C, S^V), exact or approximate",
    one_local_process=True,  # the exact blocks run on every core of a process, HNSW on faiss's threads
)


@dataclass(frozen=True)
class SimilaritySettings:
    k: int = setting(25, low=1)  # neighbours kept per image and space (sampling uses the top 5)
    backend: str = setting("exact", choices=tuple(BACKENDS.names()))
    backend_options: Annotated[Mapping[str, Any], Options(BACKENDS, "backend")] = setting({})  # the backend's fields
    recall_queries: int = setting(1000, low=1)  # approximate backends: queries checked against exact search


SPACE_KINDS = (COCAPTION_MEAN, IMAGES)  # S^C rows are co-caption means, S^V rows are images
LIST_SHARDS = ".list-shards"  # a space's partial neighbour lists while the job runs, deleted by the merge


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, SimilaritySettings)
    return run_stage(stage, build, report)


def spaces(embeddings_dir: str) -> list[str]:
    """Relative paths (``<modality>/<encoder>/<kind>``) of the sets similarity runs on, sorted."""
    root = Path(embeddings_dir)
    found = [meta.parent for meta in root.glob("*/*/*/meta.json") if meta.parent.name in SPACE_KINDS]
    return sorted(str(path.relative_to(root)) for path in found)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: SimilaritySettings = stage.settings
    k = settings.k
    backend = BACKENDS.create(settings.backend, **settings.backend_options)
    processes = worker_processes(stage.beam_args)
    plan: dict[str, dict[str, Any]] = {}
    rejected = []
    found = spaces(stage.inputs)
    if not found:
        raise InputError(f"no co-caption-mean or image embedding sets under {stage.inputs}: run the embed stage first")
    for space in found:
        set_path = io.join(stage.inputs, space)
        prepared = prepare(EmbeddingSet.read(set_path), set_path)
        n, dim = prepared.unit.shape
        plan[space] = {"in": n + len(prepared.rejected), "rows": n, "dim": dim, "excluded": len(prepared.rejected)}
        rejected.append(pipeline | f"Excluded[{space}]" >> beam.Create(prepared.rejected))
        pipeline | f"TopK[{space}]" >> WriteNeighbours(
            backend, set_path, prepared.ids, k, processes, io.join(out, space, "neighbours.parquet"), io.join(out, space, LIST_SHARDS)
        )
    write_quarantine(tuple(rejected), out, stage.root)
    return backend, plan, k


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    backend, plan, k = done.built
    out = done.out
    summary: dict[str, str] = {}
    per_space: dict[str, Any] = {}
    for space, facts in plan.items():
        entry = {
            **facts,
            "k": k,
            "backend": stage.settings.backend,
            "peak_bytes_estimate": backend.peak_bytes(facts["rows"], facts["dim"], k),
        }
        if facts["rows"] >= 2:
            neighbours = io.join(out, space, "neighbours.parquet")
            entry["pairs"] = io.parquet_rows(neighbours)
            if backend.approximate:
                entry["recall_at_k"] = measured_recall(
                    io.join(stage.inputs, space), io.read_parquet(neighbours), k, stage.settings.recall_queries, stage.seed
                )
        per_space[space] = entry
        line = f"{facts['rows']} rows ({facts['excluded']} excluded) → {entry.get('pairs', 0)} neighbour pairs, K={k}"
        if "recall_at_k" in entry:
            line += f", recall@{k} vs exact {entry['recall_at_k']:.4f}"
        if facts["rows"] < 2:
            line += "; fewer than two rows, so an empty neighbour table (images without pixels leave S^V empty)"
        summary[space] = line
    summary["quarantine"] = f"{done.quarantined} rows excluded → {stage.shown(io.join(stage.out, 'quarantine.parquet'))}"
    return {"spaces": per_space, "excluded": done.rejected, "summary": summary}
