"""The embed stage's image vectors as another CPU computes them, encoded under ``qemu-x86_64``.

``efficientnet-lite0``'s vectors differ between Intel and AMD CPUs (the README's "Not guaranteed"),
and the committed ``dvc.lock`` files hold an AMD EPYC-Rome's. On any other x86-64 machine, after a
change that leaves those vectors alone, this puts that CPU's vectors into a freshly built embed
output, so every lock can be rebuilt there:

    dvc repro embed
    python tools/emulated_image_vectors.py build/embeddings --items build/items
    dvc commit -f embed && dvc repro

The stage's batches are formed from the items by the stage's own functions and their images decoded
here; each forward pass of the encoder (``MICRO_BATCH`` images, independent of the others) is then
encoded on one kernel thread, as the stage does, in ``--parts`` processes started under
``qemu-x86_64 -cpu EPYC-Rome`` (about 2.5 minutes a pass of 4 images per core of an Intel Xeon:
the demo's 97 images took 32 minutes on 2 cores and gave the committed ``build/embeddings``).
``--cpu native`` starts the same processes without emulation, which must give the stage's own bytes
back (``tests/tools``). The batch size and kernel threads are ``--params``' ``embed`` section's.
An AMD EPYC with AVX-512 (Zen 4) needs none of this: it computes the committed vectors natively.
Every decoded image is held in memory and handed to the workers whole: it is made for builds of the
demo's size, the ones whose outputs a ``dvc.lock`` commits.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import crisscross  # noqa: F401  (the numeric policy, before numpy's kernels load)
from crisscross.core import io
from crisscross.core.errors import InputError, UserError
from crisscross.embed.encoders.base import IMAGE
from crisscross.embed.sets import IMAGES, EmbeddingSet, row_problems, set_dir

NATIVE = "native"


class HandedBatches:
    """The encoder inside the stage's own ``encode_batch``, keeping what the stage hands it (the
    images it covers that decode, decoded) instead of encoding."""

    def __init__(self, encoder: Any) -> None:
        self._encoder = encoder
        self.handed: list[tuple[list[str], list[np.ndarray]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._encoder, name)

    def encode(self, ids: list[str], payloads: list[np.ndarray]) -> np.ndarray:
        self.handed.append((list(ids), list(payloads)))
        return np.zeros((len(ids), self._encoder.dim), np.float32)


def forward_passes(items: str, spec: str, batch_size: int, root: str) -> list[tuple[list[str], list[np.ndarray]]]:
    """Every forward pass the embed stage makes with ``spec`` over ``items``: its batches (the
    stage's buckets, sort and cut, through ``encode_batch``), each cut into the encoder's passes."""
    import pyarrow.parquet as pq

    from crisscross.beam.embed import batches_of, bucket_count, build_encoder, encode_batch, items_of, split_by_bucket
    from crisscross.embed.encoders.image import MICRO_BATCH

    encoder = HandedBatches(build_encoder(spec, IMAGE))
    table, _ = items_of(pq.read_table(io.join(items, "images.parquet")), IMAGE, encoder.needs_payload)
    for _, rows in split_by_bucket(table, bucket_count(len(table))):  # the whole table: one part per bucket
        for batch in batches_of([rows], batch_size):
            unreadable = encode_batch(encoder, batch, spec, IMAGE, root).unreadable  # type: ignore[arg-type]
            if unreadable:  # the stage read them, or its output would not hold them: the wrong --root
                raise InputError(
                    f"cannot read image {unreadable[0].source} from {os.path.abspath(root)}: give the folder ingest ran in as --root"
                )
    return [
        (ids[start : start + MICRO_BATCH], pixels[start : start + MICRO_BATCH])
        for ids, pixels in encoder.handed
        for start in range(0, len(ids), MICRO_BATCH)
    ]


def encode_part(part: Path, spec: str) -> None:
    """A worker (under emulation): the passes in ``part`` encoded on one kernel thread, as the
    stage encodes, their vectors by id written beside it."""
    from crisscross.beam.embed import build_encoder, limit_process_threads

    with part.open("rb") as handle:
        passes = pickle.load(handle)  # written by this tool's own run, in its private folder
    encoder = build_encoder(spec, IMAGE)
    encoder.use_threads(1)
    encoder.load()
    limit_process_threads(1)
    vectors = {}
    for done, (ids, pixels) in enumerate(passes, start=1):
        vectors.update(zip(ids, encoder.encode(ids, pixels), strict=True))
        print(f"  {part.stem}: {done} of {len(passes)} forward passes", file=sys.stderr, flush=True)
    with part.with_suffix(".out").open("wb") as handle:
        pickle.dump(vectors, handle)


def emulated_vectors(passes: list, spec: str, cpu: str, parts: int, qemu: str) -> dict[str, np.ndarray]:
    """The passes spread round-robin over ``parts`` worker processes under ``qemu -cpu cpu`` (none
    for ``native``), their vectors merged."""
    with tempfile.TemporaryDirectory(prefix="emulated-vectors-") as folder:
        workers = []
        for number in range(parts):
            part = Path(folder) / f"part-{number}.pkl"
            with part.open("wb") as handle:
                pickle.dump(passes[number::parts], handle)
            command = [sys.executable, __file__, "--encode-part", str(part), "--encoder", spec]
            workers.append((part, subprocess.Popen(command if cpu == NATIVE else [qemu, "-cpu", cpu, *command])))
        running: list[subprocess.Popen[bytes]] = []
        try:
            while running := [worker for _, worker in workers if worker.poll() is None]:
                if any(worker.returncode for _, worker in workers):
                    break  # one failed: the others' half hour would be for nothing
                time.sleep(1.0)
        finally:
            for worker in running:
                worker.kill()
        failed = [part.stem for part, worker in workers if worker.wait() != 0]
        if failed:
            raise InputError(f"the encoding workers {', '.join(failed)} failed or were stopped (their errors are above)")
        vectors: dict[str, np.ndarray] = {}
        for part, _ in workers:
            with part.with_suffix(".out").open("rb") as handle:
                vectors.update(pickle.load(handle))
        return vectors


def image_set(embeddings: str, spec: str, images: list[str]) -> EmbeddingSet:
    """The embed output's set of ``spec``'s image vectors, which must hold ``images``."""
    built = EmbeddingSet.read(set_dir(embeddings, IMAGE, spec, IMAGES), mmap=False)
    if sorted(built.ids) != sorted(images):
        raise InputError(
            f"the embed output {embeddings} holds other images than the items give {spec} ({len(built.ids)} against {len(images)}): rebuild embed first"
        )
    return built


def replace_vectors(embeddings: str, spec: str, built: EmbeddingSet, vectors: dict[str, np.ndarray]) -> tuple[int, float]:
    """``vectors`` written over the set's, in its rows' order, unless a row is one the stage would
    refuse; the rows that changed and the largest change."""
    new = np.stack([vectors[i] for i in built.ids]).astype(built.vectors.dtype)
    problems = row_problems(new, built.dim)
    if bad := [(i, problem) for i, problem in zip(built.ids, problems, strict=True) if problem]:
        raise InputError(f"the emulated {spec} gave image {bad[0][0]} a {bad[0][1]} row ({len(bad)} images): nothing written")
    io.write_npy(io.join(set_dir(embeddings, IMAGE, spec, IMAGES), "vectors.npy"), new)
    return int((new != built.vectors).any(axis=1).sum()), float(np.abs(new - built.vectors).max(initial=0.0))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("embeddings", nargs="?", help="the embed stage's output folder, written in place")
    parser.add_argument("--items", help="the items folder embed read")
    parser.add_argument("--root", default=".", help="the folder ingest ran in (image paths are relative to it)")
    parser.add_argument("--encoder", default="efficientnet-lite0")
    parser.add_argument("--params", default="params.yaml", help="the params file embed ran with")
    parser.add_argument("--cpu", default="EPYC-Rome", help=f"qemu's CPU model, or {NATIVE} for none")
    parser.add_argument("--parts", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--qemu", default="qemu-x86_64")
    parser.add_argument("--encode-part", type=Path, help=argparse.SUPPRESS)
    flags = parser.parse_args(argv)
    if flags.encode_part:
        encode_part(flags.encode_part, flags.encoder)
        return 0
    if not flags.embeddings or not flags.items:
        parser.error("give the embed output folder and --items")
    if flags.parts < 1:
        raise InputError(f"--parts must be at least 1, got {flags.parts}")
    if flags.cpu != NATIVE and shutil.which(flags.qemu) is None:
        raise InputError(f"{flags.qemu} is not installed: apt-get install qemu-user (or pass --qemu PATH)")
    from crisscross.pipelines.embed import EmbedSettings
    from crisscross.pipelines.stage import load_params

    settings, _ = load_params(flags.params, "embed", EmbedSettings)
    if settings.threads != 1:
        raise InputError(
            f"{flags.params}: embed.threads is {settings.threads}: the vectors then follow the core count, which no emulated CPU reproduces"
        )
    started = time.monotonic()
    passes = forward_passes(flags.items, flags.encoder, settings.batch_size, flags.root)
    built = image_set(flags.embeddings, flags.encoder, [i for pass_ids, _ in passes for i in pass_ids])
    print(f"{flags.encoder}: {len(passes)} forward passes of {len(built.ids)} images, on {flags.parts} processes ({flags.cpu})", flush=True)
    vectors = emulated_vectors(passes, flags.encoder, flags.cpu, flags.parts, flags.qemu)
    changed, largest = replace_vectors(flags.embeddings, flags.encoder, built, vectors)
    print(f"{flags.encoder}: {changed} of {len(vectors)} rows changed (at most {largest:.3g}) in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except (UserError, OSError) as error:  # a file or param that is not there, or not the stage's: one line
        print(f"error: {error}", file=sys.stderr)
        code = 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as the crisscross command exits: Beam's gRPC threads can abort a teardown (pipelines/cli.run)
