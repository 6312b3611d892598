"""Byte-identical embeddings and neighbours whatever kernels the machine would pick.

Each run is a ``crisscross`` command in a fresh process whose environment asks for other kernels,
the way another CPU would choose them (OpenBLAS SkylakeX or Zen, torch AVX-512, oneDNN AVX-512):
the numeric policy overrides them all, so every run writes the bytes of the session's demo build.
The control runs with the policy off show that the choice matters on this machine (on an AVX-512
CPU; an AVX2-only CPU cannot run the AVX-512 kernels, so there the control is skipped).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from crisscross.core import numerics

PROJECT = Path(__file__).resolve().parents[2]

OTHER_MACHINES = {
    "skylakex": {
        "OPENBLAS_CORETYPE": "SkylakeX",
        "ATEN_CPU_CAPABILITY": "avx512",
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
        "NPY_DISABLE_CPU_FEATURES": "",
    },
    "zen": {"OPENBLAS_CORETYPE": "Zen", "ATEN_CPU_CAPABILITY": "default", "OPENBLAS_NUM_THREADS": "2"},
}


def crisscross(args: list[str], env: dict[str, str], cwd: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in numerics.POLICY and k != numerics.SWITCH}
    done = subprocess.run(
        [sys.executable, "-m", "crisscross.pipelines.cli", *args],
        env={**clean, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def files(root: Path) -> dict[str, bytes]:
    """Every output file but the reports (they name the run's folder) and the output locks."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "report.json" and not p.name.startswith(".")
    }


def has_avx512() -> bool:
    return "avx512f" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else False


def test_embed_and_similarity_write_the_same_bytes_under_other_kernel_choices(demo_chain: Path, tmp_path: Path) -> None:
    """The bytes to match are the session's demo build (``demo_chain``: embed and similarity with the
    project's params, under the policy, on this machine). Each other machine's commands read its items
    from the directory they were ingested from, where their image paths lead (so every image is embedded)."""
    params = ["--params", str(PROJECT / "params.yaml")]
    here = {name: data for name, data in files(demo_chain).items() if name.split("/")[0] in ("embeddings", "similarity")}
    assert len(here) == 3 * 5 + 2 + 3 + 1  # embed's sets, quarantine and skipped; three neighbour tables and a quarantine
    images = np.load(demo_chain / "embeddings" / "image" / "efficientnet-lite0" / "images" / "vectors.npy")
    assert images.shape == (97, 1280)  # every image seen, so torch's kernel choice is exercised
    for machine, env in OTHER_MACHINES.items():
        run = tmp_path / machine
        crisscross(["embed", "--in", str(demo_chain / "items"), "--out", str(run / "embeddings"), *params], env, Path.cwd())
        crisscross(["similarity", "--in", str(run / "embeddings"), "--out", str(run / "similarity"), *params], env, Path.cwd())
        assert files(run) == here, machine


def test_without_the_policy_the_kernel_choice_changes_the_bytes(demo_chain: Path, tmp_path: Path) -> None:
    if not has_avx512():
        pytest.skip("this CPU has no AVX-512: its OpenBLAS cannot run the SkylakeX kernel the control compares against")
    (tmp_path / "params.json").write_text(json.dumps({"embed": {"text_encoders": ["use-m3"], "image_encoders": []}}))
    vectors = {}
    for kernel in ("Haswell", "SkylakeX"):
        out = tmp_path / kernel
        env = {numerics.SWITCH: numerics.NATIVE, "OPENBLAS_CORETYPE": kernel}
        crisscross(
            ["embed", "--in", str(demo_chain / "items"), "--out", str(out), "--params", str(tmp_path / "params.json")], env, tmp_path
        )
        vectors[kernel] = (out / "text/use-m3/captions/vectors.npy").read_bytes()
    assert vectors["Haswell"] != vectors["SkylakeX"]
