"""The ``crisscross`` command: one subcommand per pipeline stage, each also a DVC stage."""

from __future__ import annotations

import importlib
import logging
import os
import sys

from crisscross import __version__
from crisscross.encoders import EncoderError
from crisscross.evaluation import CoverageError
from crisscross.quarantine import RejectionError
from crisscross.registry import Registry, UnknownNameError

# Errors a user can fix from the message alone: printed without a traceback.
USER_ERRORS = (RejectionError, UnknownNameError, EncoderError, FileNotFoundError, CoverageError)

STAGES: Registry[str] = Registry("stage")
_HELP: dict[str, str] = {}


def _stage(name: str, module: str, help_text: str) -> None:
    STAGES.register(name)(lambda module=module: module)
    _HELP[name] = help_text


_stage("ingest", "pipelines.ingest", "source dataset → canonical images/captions tables + quarantine")
_stage("embed", "pipelines.embed", "items → embeddings per encoder (captions, co-caption means, images)")
_stage("similarity", "pipelines.similarity", "embeddings → top-K neighbours per space (S^C, S^V), exact or approximate")
_stage("sample", "pipelines.sample", "neighbours → CxC intramodal candidates (i2i_csim, c2c_isim, c2c_cocaption)")
_stage("tasks", "pipelines.tasks", "candidates → annotation tasks in batches with gold items, exported per tool")
_stage("annotate", "pipelines.annotate", "tasks → judgments: import people's files, replay earlier judgments, or simulate raters")
_stage("aggregate", "pipelines.aggregate", "judgments → rater QC, aggregated rated pairs (CxC shape), agreement, plots")
_stage("evaluate", "pipelines.evaluate", "models × ground truths → retrieval, correlation and selection metrics, report, plot")


def usage() -> str:
    width = max(map(len, _HELP))
    lines = [
        f"crisscross {__version__}: build graded image/caption similarity datasets.",
        "",
        "usage: crisscross <stage> --in PATH --out DIR [--params FILE] [stage flags] [Beam options]",
        "",
        "stages:",
        *(f"  {name.ljust(width)}  {_HELP[name]}" for name in STAGES.names()),
        "",
        "`crisscross <stage> --help` lists a stage's flags.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0
    if args[0] == "--version":
        print(__version__)
        return 0
    if args[0] not in _HELP:
        print(f"crisscross: unknown stage {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(STAGES.create(args[0]))
    try:
        module.main(args[1:])
    except USER_ERRORS as error:
        print(f"crisscross {args[0]}: error: {error}", file=sys.stderr)
        return 1
    return 0


def run() -> None:
    """The console entry point: ``main``, then exit without interpreter teardown.

    Everything a stage writes is closed and renamed into place before ``main`` returns.  What is
    left at exit are native thread pools (gRPC, imported by Beam; Arrow's), and tearing those
    down raced now and then ("terminate called without an active exception", SIGABRT) after a
    stage had finished and printed its summary, failing ``dvc repro`` for nothing.
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
