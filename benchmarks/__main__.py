"""``python -m benchmarks [--quick] [--only NAME]``: run the benchmarks of this package in turn.

A benchmark is a module here with ``run(args: argparse.Namespace) -> None``; adding its name to
``BENCHMARKS`` plugs it in.  Modules are imported only when they run, so ``--only`` does not pay
for the others' (heavy) imports.
"""

from __future__ import annotations

import argparse
import importlib
import time

import crisscross  # noqa: F401  (first: sets the numeric policy before a benchmark's imports load numpy)
from benchmarks import RUN_MACHINE, machine

BENCHMARKS: tuple[str, ...] = (
    "ingest_check",
    "embed_throughput",
    "similarity_topk",
    "numeric_policy",
    "aggregate_judgments",
    "evaluate_protocol",
    "tasks_gold",
    "coco_scale",
    "stage_startup",
    "machine_triage",
    "adaptive_replication",
    "adaptive_campaign",
    "browse_pages",
    "operator_poll",
    "store_submit",
    "release_loaders",
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description="Run the crisscross benchmarks.")
    parser.add_argument("--quick", action="store_true", help="a smaller run, to check the benchmarks work")
    parser.add_argument("--only", choices=BENCHMARKS, metavar="NAME", help=f"run one benchmark: {', '.join(BENCHMARKS)}")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    RUN_MACHINE.update(machine.measure())
    print(f"machine: {machine.describe(RUN_MACHINE)}", flush=True)
    for name in (args.only,) if args.only else BENCHMARKS:
        print(f"== {name}{' (quick)' if args.quick else ''}", flush=True)
        began = time.perf_counter()
        importlib.import_module(f"benchmarks.{name}").run(args)
        print(f"== {name}: {time.perf_counter() - began:.0f}s wall", flush=True)
    print(f"machine at the end: {machine.describe(machine.measure())}", flush=True)
    print(f"benchmarks done in {time.perf_counter() - started:.0f}s wall", flush=True)


if __name__ == "__main__":
    main()
