"""The ``crisscross`` command: one subcommand per stage of the registry (:mod:`crisscross.pipelines.registry`)."""

from __future__ import annotations

import gc
import importlib
import logging
import os
import socket
import sys

from crisscross import __version__
from crisscross.core.errors import InputError, UserError, one_line
from crisscross.pipelines.clients import imported_later, unused_clients, unused_shell, without, workers_without
from crisscross.pipelines.registry import module_of, stages

# Errors a user can fix from the message alone: one line on stderr, exit status 2, no traceback
# unless --debug.  Files the user named that are missing or unreadable count too.
USER_ERRORS = (UserError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
USAGE_ERROR = 2
DEBUG_FLAG = "--debug"
BEAM = "apache_beam"


def port_number(text: str) -> int:
    """``--port``'s type: a TCP port, 1–65535 (argparse turns the ValueError into a usage line)."""
    port = int(text)
    if not 1 <= port <= 65535:
        raise ValueError(text)
    return port


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _cannot_listen(host: str, port: int, error: OSError) -> InputError:
    reason = os.strerror(error.errno) if error.errno else str(error)
    return InputError(f"cannot listen on {host}:{port} ({reason}): choose another --port or --host")


def listening(host: str, port: int) -> None:
    """Refuse, as one line, an address this process cannot listen on (a port taken, a host not this machine's)."""
    try:
        with socket.create_server((host, port), family=_family(host)):
            pass
    except OSError as error:
        raise _cannot_listen(host, port, error) from None


def tcp_listener(host: str, port: int) -> socket.socket:
    """A listening socket for worker processes to share, made as TCP by name: asyncio turns Nagle's
    algorithm off only on connections whose socket says ``IPPROTO_TCP``, and uvicorn's own (protocol
    0) left every small reply of ``serve --workers N`` waiting for the client's delayed ACK (~40 ms)."""
    listener = socket.socket(_family(host), socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
    except OSError as error:  # taken since listening() looked, while the tasks loaded
        listener.close()
        raise _cannot_listen(host, port, error) from None
    listener.set_inheritable(True)
    return listener


def usage() -> str:
    """The command's help: every stage of the registry, in data-flow order, with its one line."""
    listed = stages()
    width = max(map(len, listed))
    lines = [
        f"crisscross {__version__}: build graded image/caption similarity datasets.",
        "",
        "usage: crisscross <stage> --in PATH --out DIR [--params FILE] [--debug] [stage flags] [Beam options]",
        "",
        "stages:",
        *(f"  {name.ljust(width)}  {stage.description}" for name, stage in listed.items()),
        "",
        "`crisscross <stage> --help` lists a stage's flags.",
    ]
    return "\n".join(lines)


def import_stage(module_name: str, *, freeze: bool = False, hidden: tuple[str, ...] = ()) -> object:
    """The stage's module (or a local worker's Beam module, :mod:`crisscross.pipelines.sdk_worker`),
    imported with the cyclic garbage collector paused, and as if the ``hidden`` packages were not
    installed.

    Beam imports service clients at start-up whenever they are installed (Google's: about a third
    of its import time; boto3: a tenth of a stage's ``--help``; benchmarks/stage_startup.py).  A
    command hides those it cannot use (:mod:`crisscross.pipelines.clients`), and so do its local
    worker processes; the Beam modules a pipeline imports later that would load them are imported
    now, without them.  The clients stay importable for anything that asks later in the run, but
    Beam's S3 filesystem, once imported without boto3, stays so for the run: hence any ``s3://``
    in flags or params keeps it.  A Dataflow job's workers import Beam whole.

    Importing Beam creates some 150,000 long-lived objects, and the collector's passes over them
    while they are made cost about a tenth of a command's start-up.  With ``freeze`` (the
    ``crisscross`` command and its local workers, whose processes end with the stage) they are moved out of the
    collector's sight for good, so its passes during the run skip them too: a tenth of the demo's
    ``sample`` stage, start to exit (benchmarks/stage_startup.py).  In-process callers (tests) do
    not freeze, so what they import stays collectable.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        with without(*hidden):
            module = importlib.import_module(module_name)
            if BEAM in sys.modules:  # commands that run no pipeline (browse, worker-pool) start without Beam
                for name in imported_later(hidden):
                    importlib.import_module(name)
            return module
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
    if args[0] not in stages():
        print(f"crisscross: unknown stage {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return USAGE_ERROR
    if not debug:
        logging.getLogger("apache_beam").setLevel(
            logging.CRITICAL
        )  # a failing step logs its traceback; the error below says it in one line
    hidden = unused_clients(args[1:])
    module = import_stage(module_of(args[0]), freeze=freeze, hidden=hidden)
    try:
        with workers_without(hidden), without(*unused_shell()):
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
