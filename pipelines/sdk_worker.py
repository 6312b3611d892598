"""Beam's SDK worker for the local multi-process runner (``--direct_running_mode=multi_processing``),
started as its command started (``cli.import_stage``): without the service clients the command hid
(:mod:`crisscross.pipelines.clients`), Beam's objects frozen out of the
collector's sight.  Beam's own mode starts ``python -m apache_beam.runners.worker.sdk_worker_main``,
which imports Beam whole in every worker of every stage (``stage.make_pipeline`` starts this module
instead).
"""

from __future__ import annotations

import sys

from crisscross.pipelines.cli import import_stage
from crisscross.pipelines.clients import hidden_for_workers

BEAM_WORKER = "apache_beam.runners.worker.sdk_worker_main"


def main() -> None:
    worker = import_stage(BEAM_WORKER, freeze=True, hidden=hidden_for_workers())
    worker.main(sys.argv)


if __name__ == "__main__":
    main()
