"""The numeric policy: the same float bytes on every x86-64 CPU with AVX2, in every process.

numpy's OpenBLAS picks its GEMM kernel per CPU, numpy its own SIMD loops (``tanh``, ``exp``,
reductions), torch its vector ISA and oneDNN / MKL theirs; an AVX-512 machine and an AVX2 one then
write different last bits of the same embeddings, and every hash downstream differs.  Each library
reads its choice from an environment variable when it loads, so the policy is a set of variables
that pin the AVX2 kernel family everywhere and one BLAS thread per computation (OpenBLAS's sums
follow its thread count), set before numpy or torch load:

* in the command's process: :func:`pin` runs when :mod:`crisscross` is first imported;
* in worker processes the runner starts: they inherit the launcher's environment (the local
  multi-process runner), or their pool is started by ``crisscross worker-pool`` (portable runners:
  Flink, Spark, a Beam job service), or the container sets the variables (Dataflow:
  :func:`dockerfile_env`).  :func:`check` runs in every numeric step's ``setup`` and refuses a
  process whose libraries loaded other kernels, so a misconfigured worker fails loudly instead of
  writing other bytes.

``CRISSCROSS_NUMERICS=native`` turns the policy off: each library picks the fastest kernel of the
machine, and outputs are then byte-identical only on the same kind of CPU.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

from crisscross.core.errors import UserError

SWITCH = "CRISSCROSS_NUMERICS"
PINNED, NATIVE = "avx2", "native"

# Environment variable → value: the AVX2 family, in each library's own spelling.
POLICY: dict[str, str] = {
    "OPENBLAS_CORETYPE": "Haswell",  # numpy's and scipy's OpenBLAS: the AVX2 GEMM kernels (Haswell = Zen's)
    # OpenBLAS splits a GEMM's sums differently for each thread count, so a product's last bits
    # follow the machine's cores unless the count is fixed; parallelism comes from worker processes
    # and from the stages' own thread pools over independent blocks (similarity), never from BLAS.
    "OPENBLAS_NUM_THREADS": "1",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",  # numpy's own loops: no AVX-512 variants
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's vectorised kernels
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # torch's (and TensorFlow's) convolutions
    "MKL_CBWR": "AVX2",  # torch's MKL: conditional numerical reproducibility on the AVX2 code path
    "FAISS_OPT_LEVEL": "avx2",  # faiss loads its AVX2 build
}
# Loaded before pin() had a chance, these libraries have already chosen their kernels.
PINNED_AT_LOAD = ("numpy", "torch", "tensorflow", "faiss")


class NumericPolicyError(UserError, RuntimeError):
    """A process computes with kernels other than the policy's; its bytes would differ."""


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    environ = os.environ if environ is None else environ
    mode = environ.get(SWITCH, PINNED)
    if mode not in (PINNED, NATIVE):
        raise NumericPolicyError(f"${SWITCH} must be {PINNED!r} (the default) or {NATIVE!r}, got {mode!r}")
    return mode == PINNED


def pin(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set the policy's variables (overriding other values: the policy is one for all processes);
    returns the numeric libraries that were already loaded, for which it comes too late."""
    environ = os.environ if environ is None else environ
    if not enabled(environ):
        return []
    environ.update(POLICY)
    return [name for name in PINNED_AT_LOAD if name in sys.modules]


def worker_environment() -> dict[str, str]:
    """What a worker process needs in its environment for the policy (empty when it is off)."""
    return dict(POLICY) if enabled() else {SWITCH: NATIVE}


def dockerfile_env() -> str:
    """The ``ENV`` lines of a worker container (Dataflow's custom SDK image)."""
    return "\n".join(f'ENV {name}="{value}"' for name, value in worker_environment().items())


def loaded_kernels() -> dict[str, str]:
    """What this process's numeric libraries actually chose (only those already loaded)."""
    chosen: dict[str, str] = {}
    if "numpy" in sys.modules:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
        from threadpoolctl import threadpool_info

        chosen["numpy simd"] = (
            "x86-64-v4" if any(__cpu_features__.get(f) for f in __cpu_dispatch__ if f != "X86_V3") else "x86-64-v3 or lower"
        )
        for pool in threadpool_info():
            if pool.get("internal_api") == "openblas":
                chosen[f"openblas {pool['prefix']}"] = str(pool.get("architecture"))
    torch = sys.modules.get("torch")
    if torch is not None:
        chosen["torch"] = torch.backends.cpu.get_cpu_capability()
    return chosen


def problems(chosen: Mapping[str, str]) -> list[str]:
    """The kernels in ``chosen`` that break the policy."""
    wrong = []
    for library, kernel in chosen.items():
        if library.startswith("openblas") and kernel.lower() != POLICY["OPENBLAS_CORETYPE"].lower():
            wrong.append(f"{library} uses {kernel}")
        elif library == "numpy simd" and kernel == "x86-64-v4":
            wrong.append("numpy uses its AVX-512 loops")
        elif library == "torch" and kernel not in ("AVX2", "DEFAULT"):
            wrong.append(f"torch uses {kernel}")
    return wrong


def check(where: str) -> None:
    """Refuse to compute in a process whose libraries chose other kernels than the policy's."""
    if not enabled():
        return
    wrong = problems(loaded_kernels())
    if wrong:
        raise NumericPolicyError(
            f"{where}: this process loaded its numeric libraries before the numeric policy was set ({'; '.join(wrong)}), "
            f"so its bytes would differ by CPU: start workers with `crisscross worker-pool`, or set {', '.join(f'{k}={v!r}' for k, v in POLICY.items())} "
            f"in the worker environment (or {SWITCH}=native to accept machine-specific bytes)"
        )
