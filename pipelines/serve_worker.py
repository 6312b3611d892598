"""A worker process of ``crisscross serve --workers N`` (uvicorn's app factory), started as the
command started (``cli.import_stage``): without the service clients the command hid
(:mod:`crisscross.pipelines.clients`, told through ``$CRISSCROSS_HIDDEN_CLIENTS``), its objects frozen
out of the collector's sight.  Naming :mod:`crisscross.pipelines.serve` as the factory's module would
import Beam whole in every worker, Google's clients with it, which the command itself never loads.
"""

from __future__ import annotations

from typing import Any

from crisscross.pipelines.cli import import_stage
from crisscross.pipelines.clients import hidden_for_workers

SERVE = "crisscross.pipelines.serve"


def app() -> Any:
    """The worker's app, built from the flags the command left in ``$CRISSCROSS_SERVE_ARGS``."""
    serve = import_stage(SERVE, freeze=True, hidden=hidden_for_workers())
    return serve.app_from_environment()
