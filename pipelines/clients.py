"""Service clients that Beam imports at start-up whenever they are installed, and starting without
the ones a command cannot use; and IPython, which Beam imports when a pipeline first runs.

Beam's import loads Google's clients (the ``dataflow`` extra: BigQuery, Cloud Storage, Pub/Sub;
about a third of its import time), its own BigQuery connector (with or without Google's clients),
boto3 (Amazon S3, where a machine has it) and MongoDB's client (a dependency of Beam's) whether or
not a pipeline reaches those services.  A stage command hides the clients its flags and params give it
no use for (:func:`unused_clients`) while it imports its stage (``cli.import_stage``), and its
local worker processes start the same way (:mod:`crisscross.pipelines.sdk_worker`, told through
:data:`HIDDEN_ENV`).  Beam then skips their connectors, as in an install without them.

Beam also asks, each time a pipeline runs, whether it runs inside an IPython session, importing
IPython where it is installed (:func:`unused_shell`): a command hides it while its stage runs.
"""

from __future__ import annotations

import importlib.abc
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

HIDDEN_ENV = "CRISSCROSS_HIDDEN_CLIENTS"  # the packages a command hid, space-separated, for its local workers
PARAMS_FLAG = "--params"


@dataclass(frozen=True)
class ServiceClients:
    """Client packages Beam imports at start-up whenever they are installed (with Beam's own modules
    that are of no use without them), the module whose presence says they are (``probe``), and what
    in a command says it may use them: a URL scheme among its flags or in its params file, or a
    runner named among its flags."""

    packages: tuple[str, ...]
    probe: str
    schemes: tuple[str, ...] = ()
    runners: tuple[str, ...] = ()
    logger: str = ""  # Beam's logger that warns, as it imports, when the packages are missing: off while they are hidden
    # Beam modules its start-up imports only along with a hidden one, but a pipeline's construction imports
    # again; imported while the packages are hidden, as a start-up without them would have
    later: tuple[str, ...] = ()


# Beam's gcp extra (the dataflow extra): Cloud Storage, BigQuery, Pub/Sub, the Dataflow runner, and Google's API
# toolkit; with them, Beam's own BigQuery connector, which Beam imports even where the extra is not installed.
# Without that connector Beam's start-up skips its Pub/Sub module too, which reading or writing files imports.
GOOGLE = ServiceClients(
    ("google.cloud", "apitools", "apache_beam.io.gcp.bigquery"),
    "google.cloud.storage",
    schemes=("gs://",),
    runners=("dataflow",),
    later=("apache_beam.io.gcp.pubsub",),
)
AMAZON = ServiceClients(("boto3",), "boto3", schemes=("s3://",))  # Amazon S3, wherever boto3 is installed (Beam's aws extra)
# MongoDB's client, which Beam requires (for its MongoDB connector) and warns of when it is missing
MONGODB = ServiceClients(("pymongo", "bson"), "pymongo", schemes=("mongodb://", "mongodb+srv://"), logger="apache_beam.io.mongodbio")
SERVICE_CLIENTS = (GOOGLE, AMAZON, MONGODB)


IPYTHON = "IPython"


def unused_shell() -> tuple[str, ...]:
    """``(IPYTHON,)`` unless this process has loaded IPython.  A process that has not cannot be running
    inside an IPython session, and that is all Beam imports it to ask, when a pipeline first runs:
    0.4 s of a stage command on a 2-core AMD EPYC where IPython is installed.  While it is hidden,
    ``importlib.util.find_spec("IPython")`` raises rather than returning None, and a
    ``PYTHONBREAKPOINT`` into IPython is ignored with a warning."""
    return () if IPYTHON in sys.modules else (IPYTHON,)


def unused_clients(args: list[str]) -> tuple[str, ...]:
    """The client packages (:data:`SERVICE_CLIENTS`) a command with these flags cannot use: their
    schemes are in neither its flags nor its params file (an unreadable one is the stage's to
    report), and its flags name none of their runners."""
    flags = [arg.lower() for arg in args]
    texts = list(flags)
    for i, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        path = value if equals else args[i + 1] if i + 1 < len(args) else ""
        if len(name) > 2 and PARAMS_FLAG.startswith(name) and Path(path).is_file():  # argparse takes --par too; a FIFO would wait for ever
            with suppress(OSError):
                texts.append(Path(path).read_text(encoding="utf-8", errors="replace").lower())
    return tuple(
        package
        for clients in SERVICE_CLIENTS
        if not any(scheme in text for scheme in clients.schemes for text in texts)
        and not any(runner in flag for runner in clients.runners for flag in flags)
        for package in clients.packages
    )


class _Absent(importlib.abc.MetaPathFinder):
    """Finds the packages and their modules as not installed."""

    def __init__(self, packages: tuple[str, ...]) -> None:
        self._packages = packages

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if _within(name, self._packages):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(f"{package}.") for package in packages)


def _hidden(packages: tuple[str, ...]) -> list[ServiceClients]:
    """The registry's entries whose packages are all among ``packages``."""
    return [clients for clients in SERVICE_CLIENTS if set(clients.packages) <= set(packages)]


def imported_later(packages: tuple[str, ...]) -> tuple[str, ...]:
    """The Beam modules (:attr:`ServiceClients.later`) to import while ``packages`` are hidden."""
    return tuple(name for clients in _hidden(packages) for name in clients.later)


@contextmanager
def without(*packages: str) -> Iterator[None]:
    """Imports made inside see ``packages`` as not installed (also when a namespace ``.pth`` loaded
    one at start-up), and Beam's loggers that warn of hidden clients (:attr:`ServiceClients.logger`)
    are off; afterwards all is back as it was, and later imports find the packages."""
    absent = _Absent(packages)
    loaded = {name: sys.modules.pop(name) for name in list(sys.modules) if _within(name, packages)}
    quiet = [logging.getLogger(clients.logger) for clients in _hidden(packages) if clients.logger]
    was = [logger.disabled for logger in quiet]
    for logger in quiet:
        logger.disabled = True
    sys.meta_path.insert(0, absent)
    try:
        yield
    finally:
        sys.meta_path.remove(absent)
        sys.modules.update(loaded)
        for logger, disabled in zip(quiet, was, strict=True):
            logger.disabled = disabled


@contextmanager
def workers_without(packages: tuple[str, ...]) -> Iterator[None]:
    """Local worker processes started inside (:mod:`crisscross.pipelines.sdk_worker`,
    :mod:`crisscross.pipelines.serve_worker`) hide ``packages`` too; afterwards the environment is as it was."""
    before = os.environ.get(HIDDEN_ENV)
    os.environ[HIDDEN_ENV] = " ".join(packages)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(HIDDEN_ENV, None)
        else:
            os.environ[HIDDEN_ENV] = before


def hidden_for_workers() -> tuple[str, ...]:
    """What :func:`workers_without` told this worker process to hide."""
    return tuple(os.environ.get(HIDDEN_ENV, "").split())
