"""``crisscross serve``: the rater app over a round's tasks, and its operator commands.

``crisscross serve --tasks DIR --db DB [--items DIR] [--images DIR] [--plan DIR] [--host H] [--port N]``
    loads the round's tasks into the database (a SQLite file, or a ``postgresql://`` URL) and
    serves the rater page on 127.0.0.1 unless told otherwise;
``crisscross serve add-rater NAME --db DB [--url URL] [--new-token]``
    prints a rater's sign-in link (the token is shown once; the database keeps its hash);
``crisscross serve status --db DB``
    progress per task type (batches done / assigned / open, items closed early and the judgments
    that saved) and per rater (judgments, gold accuracy).

``replicas`` (raters per batch) is the tasks stage's own param (``tasks.replicas``, with
``--round`` laid over it); under adaptive replication (``annotate.replication``, likewise laid
over) it is a ceiling, and ``--plan`` (a plan stage output) gives the pilot's rater spread for the
types params leave out.  The app's limits are the ``serve`` section (:class:`ServeSettings`).
``annotate`` reads the judgments back with ``source: import`` and ``format: store``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from crisscross.aggregate.quality import rater_report
from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.exports import batches
from crisscross.annotate.store import Store, open_store, redact
from crisscross.campaign.replication import FIXED, ReplicationSettings
from crisscross.core import io
from crisscross.core.errors import UserError
from crisscross.core.settings import setting
from crisscross.pipelines.annotate import AnnotateSettings, ceiling_of, replication_of
from crisscross.pipelines.stage import load_params, require

STAGE = "serve"
DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class ServeSettings:
    """``params.yaml`` ``serve:``; the defaults suit a team rating on one machine or a LAN."""

    assignment_timeout: float = setting(3600.0, low=1.0)  # seconds before an unsubmitted batch goes to someone else
    max_request_bytes: int = setting(256 * 1024, low=1024)
    rate_per_second: float = setting(10.0, low=0.0)  # per signed-in rater
    burst: float = setting(40.0, low=1.0)
    ip_rate_per_second: float = setting(200.0, low=0.0)  # per client address
    signins_per_minute: float = setting(20.0, low=1.0)  # per client address


class MissingExtra(UserError, ImportError):
    """The web dependencies are an optional extra."""


def _settings(params: str | None, round_name: str | None, plan: str | None = None) -> tuple[ServeSettings, int, int, ReplicationSettings]:
    """The serve settings, the round's replicas (the ceiling), ``base.seed`` (VERIFY-TRIPLE's image
    order, as exported) and when an item has judgments enough."""
    _, base, serve = load_params(params, STAGE, ServeSettings)
    annotate, _, _ = load_params(params, "annotate", AnnotateSettings, round_name)
    return serve, ceiling_of(params, round_name, plan), int(base["seed"]), replication_of(annotate, plan)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", required=True, help="the judgment database: a SQLite file path or a postgresql:// URL")
    parser.add_argument("--params", default=None, help="params YAML: its 'serve' section, tasks.replicas and annotate.replication are read")
    parser.add_argument(
        "--round", default=None, help="an annotation round: rounds.<round>.tasks and .annotate are laid over 'tasks' and 'annotate'"
    )
    parser.add_argument(
        "--plan", default=None, help="a plan output the round follows: its raters per item (the ceiling) and its pilot's rater spread"
    )


def run_server(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="crisscross serve", description="Serve the rater app over a round's tasks.")
    parser.add_argument("--tasks", required=True, help="the tasks stage output (tasks.parquet)")
    parser.add_argument("--items", default="build/items", help="the ingest output (caption texts, image paths); default build/items")
    parser.add_argument(
        "--images", default=None, help="the folder every served image must lie in; default: the folder the items' images share"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000)
    _common(parser)
    flags = parser.parse_args(argv)
    try:
        import uvicorn

        from crisscross.serve.app import AppConfig, Round, create_app
    except ImportError as error:
        raise MissingExtra(f"crisscross serve needs the serve extra: pip install -c constraints.txt -e '.[serve]' ({error})") from error
    settings, replicas, seed, replication = _settings(flags.params, flags.round, flags.plan)
    tasks = io.read_parquet(require(io.join(flags.tasks, "tasks.parquet"), "tasks"))
    catalog = load_catalog(require(flags.items, "ingest", " (or pass --items)"))
    batches(tasks, catalog)  # every id must be showable: the export's own check
    store = Store(flags.db)
    store.init()
    added = store.load_tasks(tasks.to_pylist())
    config = AppConfig(
        replicas=replicas,
        timeout=settings.assignment_timeout,
        max_request_bytes=settings.max_request_bytes,
        rate_per_second=settings.rate_per_second,
        burst=settings.burst,
        ip_rate_per_second=settings.ip_rate_per_second,
        signins_per_minute=settings.signins_per_minute,
        replication=replication,
    )
    app = create_app(store, Round.of(tasks, catalog, flags.images, seed), config)
    print(
        f"serve: {tasks.num_rows} task rows ({added} new) × {_raters(replicas, replication)} in {redact(flags.db)}\n"
        f"  rater page: http://{flags.host}:{flags.port}/  (links: crisscross serve add-rater NAME --db {redact(flags.db)})",
        flush=True,
    )
    uvicorn.run(app, host=flags.host, port=flags.port, log_level="warning", server_header=False)


def add_rater(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="crisscross serve add-rater", description="Create a rater and print their sign-in link.")
    parser.add_argument("name", help="the rater's name (their worker id in the judgments)")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the app's address as raters reach it (default {DEFAULT_URL})")
    parser.add_argument("--new-token", action="store_true", help="replace an existing rater's token (their old link stops working)")
    _common(parser)
    flags = parser.parse_args(argv)
    store = Store(flags.db)
    store.init()
    token = store.add_rater(flags.name, time.time(), replace=flags.new_token)
    print(f"{flags.url.rstrip('/')}/signin#token={token}")


def status(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="crisscross serve status", description="Progress of a round and of each rater.")
    _common(parser)
    flags = parser.parse_args(argv)
    settings, replicas, _, replication = _settings(flags.params, flags.round, flags.plan)
    store = open_store(flags.db)
    progress = store.progress(replicas, time.time(), settings.assignment_timeout)
    raters = rater_table(store.judgments(), store.gold())
    lines = [f"{redact(flags.db)}: {_raters(replicas, replication)} per batch"]
    for p in progress:
        lines.append(
            f"  {p.task_type}: {p.done} done / {p.assigned} assigned / {p.open} open of {p.batches} batches; {p.judgments} judgments"
        )
        if p.closed or replication.rule != FIXED:
            lines.append(
                f"    {p.closed} of {p.items} items closed early: {p.saved} of {p.items * replicas} judgments saved against the ceiling"
            )
    for r in raters:
        accuracy = f"{r['gold_passed']}/{r['gold_seen']} gold passed" if r["gold_seen"] else "no gold yet"
        lines.append(f"  {r['worker']} {r['task_type']}: {r['judgments']} judgments, {accuracy}")
    print("\n".join(lines))
    return {"progress": [p.__dict__ for p in progress], "raters": raters, "closed": store.closed()}


def _raters(replicas: int, replication: ReplicationSettings) -> str:
    return f"{replicas} raters" if replication.rule == FIXED else f"at most {replicas} raters (stop rule {replication.rule})"


def rater_table(judgments: list[dict[str, Any]], gold: dict[str, str]) -> list[dict[str, Any]]:
    """Per rater and task type: judgments and gold passed / seen, by the aggregate stage's rule."""
    if not judgments:
        return []
    frame = pd.DataFrame(judgments)
    report = rater_report(frame, pd.DataFrame({"item_id": list(gold), "gold": list(gold.values())}))
    columns = ["worker", "task_type", "judgments", "gold_seen", "gold_passed"]
    return [{c: (int(v) if c not in ("worker", "task_type") else v) for c, v in row.items()} for row in report[columns].to_dict("records")]


COMMANDS: dict[str, Callable[[list[str]], Any]] = {"add-rater": add_rater, "status": status}


def main(argv: list[str]) -> Any:
    """``serve [flags]`` runs the app; ``serve add-rater …`` and ``serve status …`` are the operator's."""
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]](argv[1:])
    return run_server(argv)
