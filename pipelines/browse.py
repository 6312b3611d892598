"""``crisscross browse RELEASE [--images DIR] [--host H] [--port N] [--allow-host NAME]``: a local page over a release.

It lists the release's pairs with both sides (captions as text, images as thumbnails from
``--images``), filters them by task type, split, sampling method, who labelled them (people, the
simulated panel, a machine triage), positive or not and score range, sorts and pages them in
DuckDB, and opens a pair with every judgment, their spread and a machine label's cut and signals;
the card's plots head the page.  Read-only: nothing is written, and it listens on this machine
unless told otherwise.
"""

from __future__ import annotations

import argparse
import os

from crisscross.core.errors import InputError, MissingExtra
from crisscross.pipelines.cli import listening, port_number
from crisscross.pipelines.registry import Stage

STAGE = Stage(name="browse", order=240, description="a release → a local page: its pairs, filtered and sorted, each with its judgments")


def parser() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(prog=f"crisscross {STAGE.name}", description=STAGE.description)
    flags.add_argument("release", help="a release folder (releases/<name>)")
    flags.add_argument("--images", default=None, help="the folder the release's images are in (thumbnails and full size); none: ids shown")
    flags.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    flags.add_argument("--port", type=port_number, default=8001, help="port to listen on, 1–65535 (default 8001)")
    flags.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a further host name the page may be reached by (e.g. this machine's name with --host 0.0.0.0); "
        "requests naming any other host are refused, so no other site can reach the page through DNS",
    )
    return flags


def main(argv: list[str]) -> None:
    flags = parser().parse_args(argv)
    try:
        import duckdb  # noqa: F401  (the view's, checked before anything runs)
        import uvicorn

        from crisscross.serve.browse import create_browser
    except ImportError as error:
        raise MissingExtra(f"crisscross browse needs the serve extra: pip install -c constraints.txt -e '.[serve]' ({error})") from error
    from crisscross.release.query import ReleaseView

    if flags.images is not None and not os.path.isdir(flags.images):
        raise InputError(f"--images {flags.images}: no such folder; give the folder the release's images are in")
    listening(flags.host, flags.port)
    view = ReleaseView(flags.release)
    hosts = {flags.host, "127.0.0.1", "localhost", "::1", *flags.allow_host}
    app = create_browser(view, os.path.realpath(flags.images) if flags.images else None, hosts=hosts)
    print(
        f"  {view.info.get('name')} {view.info.get('version')}: {view.total:,} pairs at http://{flags.host}:{flags.port}/"
        + ("" if flags.images else " (no --images: images shown by their ids)"),
        flush=True,
    )
    uvicorn.run(app, host=flags.host, port=flags.port, log_level="warning", server_header=False)
