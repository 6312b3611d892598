"""The ``crisscross`` command: one subcommand per pipeline stage, each also a DVC stage."""

from __future__ import annotations

import gc
import importlib
import logging
import os
import sys

from crisscross import __version__
from crisscross.core.errors import UserError, one_line
from crisscross.core.registry import Registry

# Errors a user can fix from the message alone: one line on stderr, exit status 2, no traceback
# unless --debug.  Files the user named that are missing or unreadable count too.
USER_ERRORS = (UserError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
USAGE_ERROR = 2
DEBUG_FLAG = "--debug"

STAGES: Registry[str] = Registry("stage")
_HELP: dict[str, str] = {}


def _stage(name: str, module: str, help_text: str) -> None:
    STAGES.register(name)(lambda module=module: module)
    _HELP[name] = help_text


_stage("ingest", "crisscross.pipelines.ingest", "source dataset → canonical images/captions tables + quarantine")
_stage("embed", "crisscross.pipelines.embed", "items → embeddings per encoder (captions, co-caption means, images)")
_stage("similarity", "crisscross.pipelines.similarity", "embeddings → top-K neighbours per space (S^C, S^V), exact or approximate")
_stage("sample", "crisscross.pipelines.sample", "neighbours → CxC intramodal candidates (i2i_csim, c2c_isim, c2c_cocaption)")
_stage("filter", "crisscross.pipelines.filter", "embeddings + items → ECCV machine-annotator VERIFY candidates, gold batches, diversity")
_stage("derive", "crisscross.pipelines.derive", "rated STS/SIS pairs → CxC C2I candidates (c2i_intrasim by rank, c2i_original)")
_stage("decoys", "crisscross.pipelines.decoys", "embeddings + items → BISON decoys: each image's nearest image by mean caption embedding")
_stage("bison", "crisscross.pipelines.bison", "BISON rounds → chosen captions to verify, then verified triples (JSON, table)")
_stage("tasks", "crisscross.pipelines.tasks", "candidates → annotation tasks in batches with gold items, exported per tool")
_stage(
    "annotate", "crisscross.pipelines.annotate", "tasks → judgments: import people's files, replay earlier judgments, or simulate raters"
)
_stage("topup", "crisscross.pipelines.topup", "a round's judgments so far → the batches that close its open items (file-based crowd tools)")
_stage("aggregate", "crisscross.pipelines.aggregate", "judgments → rater QC, aggregated rated pairs (CxC shape), agreement, plots")
_stage("triage", "crisscross.pipelines.triage", "tasks + people's audit → machine labels beyond certified cuts, the rest still for people")
_stage(
    "plan", "crisscross.pipelines.plan", "pilot judgments → items and raters per type for target interval widths, cost, what a budget buys"
)
_stage(
    "positives",
    "crisscross.pipelines.positives",
    "VERIFY round → ECCV-shaped ground truth (verified ∪ original ∪ merged positives), annotator bias audit",
)
_stage(
    "worker-pool",
    "crisscross.pipelines.worker_pool",
    "Beam's external worker pool under the numeric policy, for portable runners (Flink, Spark)",
)
_stage("serve", "crisscross.pipelines.serve", "tasks → the rater app (CxC / ECCV interfaces, judgments in a database); add-rater, status")
_stage("mentions", "crisscross.pipelines.mentions", "captions or Flickr30k Entities Sentences → typed noun-phrase mentions")
_stage("coref", "crisscross.pipelines.coref", "mentions → cross-caption coreference chains (O(|M|·|C|) links, verification)")
_stage("boxes", "crisscross.pipelines.boxes", "chains → boxes by a per-chain state machine, merged; Entities files, Label Studio tasks")
_stage("localize", "crisscross.pipelines.localize", "boxes + scored proposals → phrase localization R@1, R@K, AP per type")
_stage("evaluate", "crisscross.pipelines.evaluate", "models × ground truths → retrieval, correlation and selection metrics, report, plot")
_stage(
    "release",
    "crisscross.pipelines.release",
    "rated rounds → versioned release (CxC files, card, Croissant, checksums); release verify DIR, release diff A B",
)


def usage() -> str:
    width = max(map(len, _HELP))
    lines = [
        f"crisscross {__version__}: build graded image/caption similarity datasets.",
        "",
        "usage: crisscross <stage> --in PATH --out DIR [--params FILE] [--debug] [stage flags] [Beam options]",
        "",
        "stages:",
        *(f"  {name.ljust(width)}  {_HELP[name]}" for name in STAGES.names()),
        "",
        "`crisscross <stage> --help` lists a stage's flags.",
    ]
    return "\n".join(lines)


def import_stage(module_name: str, *, freeze: bool = False) -> object:
    """The stage's module, imported with the cyclic garbage collector paused.

    Importing Beam creates some 150,000 long-lived objects, and the collector's passes over them
    while they are made cost about a tenth of a command's start-up.  With ``freeze`` (the
    ``crisscross`` command, whose process ends with its stage) they are moved out of the
    collector's sight for good, so its passes during the run skip them too: a tenth of the demo's
    ``sample`` stage, start to exit (benchmarks/stage_startup.py).  In-process callers (tests) do
    not freeze, so what they import stays collectable.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(module_name)
    finally:
        if freeze:
            gc.freeze()
        if collecting:
            gc.enable()


def main(argv: list[str] | None = None, *, freeze: bool = False) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in args
    args = [a for a in args if a != DEBUG_FLAG]
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0
    if args[0] == "--version":
        print(__version__)
        return 0
    if args[0] not in _HELP:
        print(f"crisscross: unknown stage {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return USAGE_ERROR
    if not debug:
        logging.getLogger("apache_beam").setLevel(
            logging.CRITICAL
        )  # a failing step logs its traceback; the error below says it in one line
    module = import_stage(STAGES.create(args[0]), freeze=freeze)
    try:
        module.main(args[1:])
    except USER_ERRORS as error:
        if debug:
            raise
        print(f"crisscross {args[0]}: error: {one_line(error)}", file=sys.stderr)
        return USAGE_ERROR
    except SystemExit as exit_:
        if isinstance(exit_.code, str):  # a stage's own message (argparse exits with an int)
            print(f"crisscross {args[0]}: error: {one_line(exit_)}", file=sys.stderr)
            return USAGE_ERROR
        raise
    return 0


def run() -> None:
    """The console entry point: ``main``, then exit without interpreter teardown.

    Everything a stage writes is closed and renamed into place before ``main`` returns.  What is
    left at exit are native thread pools (gRPC, imported by Beam; Arrow's), and tearing those
    down raced now and then ("terminate called without an active exception", SIGABRT) after a
    stage had finished and printed its summary, failing ``dvc repro`` for nothing.
    """
    try:
        code = main(freeze=True)
    except SystemExit as exit_:  # --help and argparse's usage errors end here too, without the teardown
        code = exit_.code if isinstance(exit_.code, int) else USAGE_ERROR if exit_.code else 0
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
