"""tools/emulated_image_vectors.py: run without emulation (``--cpu native``) it writes the embed
stage's own bytes back, so its batches, forward passes and kernel threads are the stage's; under
``qemu-x86_64 -cpu EPYC-Rome`` (32 minutes for the demo on 2 cores, not run here) the same
passes give the committed ``dvc.lock``'s embeddings."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from crisscross.embed.sets import EmbeddingSet

PROJECT = Path(__file__).resolve().parents[2]
TOOL = PROJECT / "tools" / "emulated_image_vectors.py"


def run_tool(*args: str, params: Path = PROJECT / "params.yaml") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args, "--params", str(params)], capture_output=True, text=True, check=False)


def test_without_emulation_it_writes_the_stage_s_own_vectors_back(demo_chain: Path, tmp_path: Path) -> None:
    embeddings = tmp_path / "embeddings"
    shutil.copytree(demo_chain / "embeddings", embeddings)
    vectors = embeddings / "image" / "efficientnet-lite0" / "images" / "vectors.npy"
    stage_bytes = vectors.read_bytes()
    np.save(vectors, np.zeros_like(np.load(vectors)))  # what the tool must write over, row by row
    run = run_tool(str(embeddings), "--items", str(demo_chain / "items"), "--cpu", "native", "--parts", "2")
    assert run.returncode == 0, run.stderr[-3000:]
    assert vectors.read_bytes() == stage_bytes
    assert "efficientnet-lite0: 25 forward passes of 97 images" in run.stdout and "97 of 97 rows changed" in run.stdout


def test_an_output_of_other_items_no_emulator_or_threads_by_core_count_are_one_line(demo_chain: Path, tmp_path: Path) -> None:
    items = str(demo_chain / "items")
    missing = run_tool(str(demo_chain / "embeddings"), "--items", items, "--qemu", str(tmp_path / "no-qemu"))
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'no-qemu'} is not installed: apt-get install qemu-user (or pass --qemu PATH)"
    ]
    other = tmp_path / "embeddings"
    two = EmbeddingSet.read(demo_chain / "embeddings" / "image" / "efficientnet-lite0" / "images")
    EmbeddingSet(ids=two.ids[:2], vectors=np.asarray(two.vectors[:2]), meta=two.meta).write(
        str(other / "image" / "efficientnet-lite0" / "images")
    )
    wrong = run_tool(str(other), "--items", items, "--cpu", "native", "--parts", "1")
    assert (
        wrong.returncode == 2 and len(wrong.stderr.strip().splitlines()) == 1 and "holds other images than the items give" in wrong.stderr
    )
    by_cores = tmp_path / "params.yaml"
    by_cores.write_text((PROJECT / "params.yaml").read_text().replace("  threads: 1 ", "  threads: 0 ", 1))
    cores = run_tool(str(demo_chain / "embeddings"), "--items", items, "--cpu", "native", params=by_cores)
    assert cores.returncode == 2 and cores.stderr.strip().splitlines() == [
        f"error: {by_cores}: embed.threads is 0: the vectors then follow the core count, which no emulated CPU reproduces"
    ]
