"""Beam's SDK worker for the local multi-process runner (``--direct_running_mode=multi_processing``),
started as its command started (``cli.import_stage``): without the service clients the command hid
(:data:`HIDDEN_ENV`, :mod:`crisscross.pipelines.clients`), Beam's objects frozen out of the
collector's sight.  Beam's own mode starts ``python -m apache_beam.runners.worker.sdk_worker_main``,
which imports Beam whole in every worker of every stage (``stage.make_pipeline`` starts this module
instead).
"""

from __future__ import annotations

import os
import sys

from crisscross.pipelines.cli import import_stage
from crisscross.pipelines.clients import HIDDEN_ENV

BEAM_WORKER = "apache_beam.runners.worker.sdk_worker_main"


def main() -> None:
    worker = import_stage(BEAM_WORKER, freeze=True, hidden=tuple(os.environ.get(HIDDEN_ENV, "").split()))
    worker.main(sys.argv)


if __name__ == "__main__":
    main()
