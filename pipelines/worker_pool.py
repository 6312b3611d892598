"""``crisscross worker-pool --port N``: Beam's external worker pool, under the numeric policy.

Portable runners (Beam's job service, Flink, Spark) hand bundles to SDK workers that a worker pool
starts as child processes; those inherit the pool's environment, which is where the numeric policy
must be (:mod:`crisscross.core.numerics`: it is read when numpy and torch load, before any of this
package's code runs in the worker).  This command is Beam's own ``worker_pool_main`` started from a
process that set the policy first; run it on every worker machine, from any directory, and submit
stages with ``--runner=PortableRunner --environment_type=EXTERNAL --environment_config=HOST:N``.
``crisscross worker-pool --dockerfile-env`` prints the policy as a container's ``ENV`` lines
(Dataflow runs workers in the image you build; nothing of this process reaches them).
"""

from __future__ import annotations

import argparse
import time

from crisscross.core import numerics
from crisscross.pipelines.registry import Stage

STAGE = Stage(
    name="worker-pool", order=160, description="Beam's external worker pool under the numeric policy, for portable runners (Flink, Spark)"
)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=f"crisscross {STAGE.name}", description=STAGE.description)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--port", type=int, help="port of the worker pool service (--environment_config=HOST:PORT)")
    what.add_argument("--dockerfile-env", action="store_true", help="print the numeric policy as Dockerfile ENV lines, for worker images")
    flags = parser.parse_args(argv)
    if flags.dockerfile_env:
        print(numerics.dockerfile_env())
        return
    from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer

    address, server = BeamFnExternalWorkerPoolServicer.start(use_process=True, port=flags.port)
    policy = ", ".join(f"{k}={v}" for k, v in numerics.worker_environment().items())
    print(f"worker-pool: serving SDK workers at {address} (numeric policy: {policy}); stop with Ctrl-C", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop(0)
