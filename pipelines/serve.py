"""``crisscross serve``: the rater app over a round's tasks, and its operator commands.

``crisscross serve --tasks DIR --db DB [--items DIR] [--images DIR] [--root DIR] [--plan DIR] [--triage DIR] [--url URL] [--workers N] [--host H] [--port N]``
    loads the round's tasks into the database (a SQLite file, or a ``postgresql://`` URL) and
    serves the rater page, and the operator page at ``/operator``, on 127.0.0.1 unless told
    otherwise, in ``--workers`` processes (each builds the app from the same flags; they share the
    database, so sessions and assignments hold across them; the rate limits count per process);
``crisscross serve add-rater NAME --db DB [--url URL] [--new-token]``
    prints a rater's sign-in link (the token is shown once; the database keeps its hash);
``crisscross serve add-operator NAME --db DB [--url URL] [--new-token]``
    prints an operator's sign-in link to the operator page, likewise;
``crisscross serve remove-rater NAME --db DB``, ``crisscross serve remove-operator NAME --db DB``
    end the person's sessions and make their link sign nobody in (a rater's judgments stay);
``crisscross serve status --db DB [--plan DIR] [--triage DIR]``
    what the operator page shows, as text (:mod:`crisscross.campaign.monitor`): progress per task
    type (batches done / assigned / open, against the plan, items closed early and the judgments
    that saved) and per rater (judgments, gold accuracy, the QC rules' verdict).

``replicas`` (raters per batch) is the tasks stage's own param (``tasks.replicas``, with
``--round`` laid over it); under adaptive replication (``annotate.replication``, likewise laid
over) it is a ceiling, and ``--plan`` (a plan stage output) gives the pilot's rater spread for the
types params leave out, and the items, replicas and budget progress is counted against.
``--triage`` (a triage stage output) gives the machine's share; the QC rules raters are judged by
are ``aggregate.rules``.  The app's limits and session times are the ``serve`` section (:class:`ServeSettings`); what a judgment
may hold (``annotate.max_seconds_per_item``) is the ``annotate`` section's, as import checks it.
``annotate`` reads the judgments back with ``source: import`` and ``format: store``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from crisscross.aggregate.quality import QualityRules
from crisscross.aggregate.round import RoundSettings
from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.exports import batches
from crisscross.annotate.store import OPERATOR, RATER, SessionPolicy, Store, open_store, redact
from crisscross.campaign.monitor import QC_REFRESH, CampaignInputs, campaign_report, machine_share
from crisscross.campaign.replication import FIXED, ReplicationSettings
from crisscross.core import io
from crisscross.core.errors import InputError, MissingExtra
from crisscross.core.settings import setting
from crisscross.formats.plan import read_plan
from crisscross.formats.schema import JudgmentRules
from crisscross.pipelines.annotate import AnnotateSettings, ceiling_of, replication_of
from crisscross.pipelines.cli import listening, port_number, tcp_listener
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import load_params, require
from crisscross.serve.security import origin_of

STAGE = Stage(
    name="serve",
    order=170,
    description="tasks → the rater app (CxC / ECCV interfaces, an operator page); add-/remove-rater, add-/remove-operator, status",
)
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
    session_idle_timeout: float = setting(SessionPolicy.idle, low=60.0)  # seconds without a request before a sign-in ends
    session_lifetime: float = setting(SessionPolicy.lifetime, low=60.0)  # seconds after sign-in a session ends, however used
    qc_refresh: float = setting(QC_REFRESH, low=0.0)  # the operator page's QC report is rebuilt at most this often (seconds)


@dataclass(frozen=True)
class ServeParams:
    """What the app and the operator commands read of params and a plan, checked once."""

    serve: ServeSettings
    replicas: int  # the ceiling under a stop rule
    seed: int  # base.seed: VERIFY-TRIPLE's image order, as exported
    replication: ReplicationSettings
    rules: JudgmentRules
    quality: QualityRules  # aggregate.rules: the QC verdicts the operator sees


def _settings(params: str | None, round_name: str | None, plan: str | None = None) -> ServeParams:
    serve, seed = load_params(params, STAGE.name, ServeSettings)
    annotate, _ = load_params(params, "annotate", AnnotateSettings, round_name)
    aggregate, _ = load_params(params, "aggregate", RoundSettings, round_name)
    return ServeParams(serve, ceiling_of(params, round_name, plan), seed, replication_of(annotate, plan), annotate.rules, aggregate.rules)


def _campaign(flags: argparse.Namespace, settings: ServeParams) -> CampaignInputs:
    """What the operator's figures read besides the store: the plan, the triage's share, the QC rules."""
    plan = read_plan(flags.plan) if flags.plan else None
    if not flags.triage:
        return CampaignInputs(plan, None, settings.quality)
    decisions = io.read_parquet(require(io.join(flags.triage, "decisions.parquet"), "triage")).to_pandas()
    try:
        return CampaignInputs(plan, machine_share(decisions), settings.quality)
    except ValueError as error:
        raise InputError(f"--triage {flags.triage}: {error}") from None


def _database(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", required=True, help="the judgment database: a SQLite file path or a postgresql:// URL")


def _common(parser: argparse.ArgumentParser) -> None:
    """The flags of the commands that read the round: the app and ``status``."""
    _database(parser)
    parser.add_argument("--params", default=None, help="params YAML: its 'serve' section, tasks.replicas and annotate.replication are read")
    parser.add_argument(
        "--round", default=None, help="an annotation round: rounds.<round>.tasks and .annotate are laid over 'tasks' and 'annotate'"
    )
    parser.add_argument(
        "--plan",
        default=None,
        help="a plan output the round follows: its raters per item (the ceiling), its pilot's rater spread, the items and budget "
        "progress is counted against",
    )
    parser.add_argument(
        "--triage", default=None, help="the triage output the round's tasks came from: the machine's share the operator page shows"
    )


SERVE_ARGS = "CRISSCROSS_SERVE_ARGS"  # the flags each worker process of ``--workers N`` builds its app from


def _server_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"crisscross {STAGE.name}", description=STAGE.description)
    parser.add_argument("--tasks", required=True, help="the tasks stage output (tasks.parquet)")
    parser.add_argument("--items", default="build/items", help="the ingest output (caption texts, image paths); default build/items")
    parser.add_argument(
        "--images", default=None, help="the folder every served image must lie in; default: the folder the items' images share"
    )
    parser.add_argument(
        "--root", default=".", help="the directory ingest ran in: the items' image paths are relative to it (default: here)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=port_number, default=8000, help="port to listen on, 1–65535 (default 8000)")
    parser.add_argument(
        "--url",
        default=None,
        help="the address raters reach the app at, e.g. https://rate.example.org behind a TLS proxy: POSTs must come from its "
        "origin, and https makes the session cookie Secure (default: the address each request names)",
    )
    parser.add_argument("--workers", type=int, default=1, help="worker processes (they share the database; PostgreSQL suits several)")
    _common(parser)
    return parser


def _app(flags: argparse.Namespace, load: bool) -> Any:
    """The app the flags describe; with ``load`` the round's tasks go into the database first."""
    from crisscross.serve.app import AppConfig, Round, create_app

    settings = _settings(flags.params, flags.round, flags.plan)
    tasks = io.read_parquet(require(io.join(flags.tasks, "tasks.parquet"), "tasks"))
    catalog = load_catalog(require(flags.items, "ingest", " (or pass --items)")).rooted(os.path.abspath(flags.root))
    batches(tasks, catalog)  # every id must be showable: the export's own check
    store = Store(flags.db)
    if load:
        store.init()
        added = store.load_tasks(tasks.to_pylist())
        print(
            f"serve: {tasks.num_rows} task rows ({added} new) × {_raters(settings.replicas, settings.replication)} in {redact(flags.db)}",
            flush=True,
        )
    config = AppConfig(
        replicas=settings.replicas,
        timeout=settings.serve.assignment_timeout,
        max_request_bytes=settings.serve.max_request_bytes,
        rate_per_second=settings.serve.rate_per_second,
        burst=settings.serve.burst,
        ip_rate_per_second=settings.serve.ip_rate_per_second,
        signins_per_minute=settings.serve.signins_per_minute,
        replication=settings.replication,
        rules=settings.rules,
        sessions=SessionPolicy(settings.serve.session_idle_timeout, settings.serve.session_lifetime),
        public_url=flags.url,
        campaign=_campaign(flags, settings),
        qc_refresh=settings.serve.qc_refresh,
    )
    round_ = Round.of(tasks, catalog, flags.images, settings.seed)
    absent = round_.absent_images()
    if absent:
        raise InputError(
            f"{len(absent)} image file(s) the round shows are not there, e.g. {absent[0]}: the items' image paths are relative to "
            f"the directory ingest ran in; start serve from there, or give that directory as --root (tried --root {flags.root})"
        )
    return create_app(store, round_, config)


def app_from_environment() -> Any:
    """The app of one worker process of ``serve --workers N`` (:func:`crisscross.pipelines.serve_worker.app`)."""
    return _app(_server_parser().parse_args(json.loads(os.environ[SERVE_ARGS])), load=False)


def run_server(argv: list[str]) -> None:
    flags = _server_parser().parse_args(argv)
    if flags.workers < 1:
        raise InputError(f"--workers must be at least 1, got {flags.workers}")
    if flags.url is not None and origin_of(flags.url) is None:
        raise InputError(f"--url {flags.url!r} is not an http:// or https:// address")
    try:
        import uvicorn

        from crisscross.serve import app as _  # noqa: F401  (the extra's packages, checked before anything runs)
    except ImportError as error:
        raise MissingExtra(f"crisscross serve needs the serve extra: pip install -c constraints.txt -e '.[serve]' ({error})") from error
    listening(flags.host, flags.port)
    app = _app(flags, load=True)  # every check, and the tasks loaded once, before any worker starts
    address = flags.url.rstrip("/") if flags.url else f"http://{flags.host}:{flags.port}"
    print(
        f"  rater page: {address}/  (links: crisscross serve add-rater NAME --db {redact(flags.db)})"
        + (f"; {flags.workers} worker processes" if flags.workers > 1 else ""),
        flush=True,
    )
    print(f"  operator page: {address}/operator  (links: crisscross serve add-operator NAME --db {redact(flags.db)})", flush=True)
    if flags.workers == 1:
        uvicorn.run(app, host=flags.host, port=flags.port, log_level="warning", server_header=False)
        return
    from uvicorn.supervisors import Multiprocess

    from crisscross.pipelines import serve_worker

    os.environ[SERVE_ARGS] = json.dumps(argv)
    config = uvicorn.Config(
        f"{serve_worker.__name__}:{serve_worker.app.__name__}",  # Beam without the clients this command hid
        factory=True,
        workers=flags.workers,
        host=flags.host,
        port=flags.port,
        log_level="warning",
        server_header=False,
    )
    with tcp_listener(flags.host, flags.port) as shared:
        Multiprocess(config, sockets=[shared]).run()


@dataclass(frozen=True)
class People:
    """The commands for one of the store's roles (``annotate/store.ROLES``): what their link opens,
    what their name is, how the store adds and removes one of them."""

    role: str
    page: str  # the sign-in page their link opens
    name_help: str
    does: str  # what they do in the app, for the commands' help
    kept: str  # what stays of them once removed
    add: Callable[[Store, str, float, bool], str]
    remove: Callable[[Store, str], None]


PEOPLE: dict[str, People] = {
    RATER: People(
        RATER,
        "/signin",
        "the rater's name (their worker id in the judgments)",
        "rate batches",
        "the judgments they made stay; the batch they hold goes to the next rater",
        Store.add_rater,
        Store.remove_rater,
    ),
    OPERATOR: People(
        OPERATOR,
        "/operator/signin",
        "the operator's name",
        "watch the campaign on the operator page, and never rate",
        "nothing: operators write nothing but their sessions",
        Store.add_operator,
        Store.remove_operator,
    ),
}


def _add_person(people: People, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog=f"crisscross serve add-{people.role}",
        description=f"Create the {people.role} NAME, who may {people.does}, and print their sign-in link.",
    )
    parser.add_argument("name", help=people.name_help)
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the app's address as they reach it (default {DEFAULT_URL})")
    parser.add_argument(
        "--new-token", action="store_true", help=f"replace an existing {people.role}'s token (their old link stops working)"
    )
    _database(parser)
    flags = parser.parse_args(argv)
    store = Store(flags.db)
    store.init()
    token = people.add(store, flags.name, time.time(), flags.new_token)
    print(f"{flags.url.rstrip('/')}{people.page}#token={token}")


def _remove_person(people: People, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog=f"crisscross serve remove-{people.role}",
        description=f"End every session of the {people.role} NAME and make their link sign nobody in ({people.kept}).",
    )
    parser.add_argument("name", help=people.name_help)
    _database(parser)
    flags = parser.parse_args(argv)
    people.remove(upgraded(flags.db), flags.name)
    print(f"{people.role} {flags.name} removed from {redact(flags.db)}: their link signs nobody in")


def upgraded(db: str) -> Store:
    """The rater database at ``db``, an earlier schema upgraded in place as ``serve`` does when it
    starts, so the operator's commands read the tables this version has."""
    store = open_store(db)
    store.init()
    return store


def status(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="crisscross serve status", description="Progress of a round and of each rater.")
    _common(parser)
    flags = parser.parse_args(argv)
    settings = _settings(flags.params, flags.round, flags.plan)
    replicas, replication = settings.replicas, settings.replication
    store = upgraded(flags.db)
    report = campaign_report(store, time.time(), replicas, settings.serve.assignment_timeout, replication, _campaign(flags, settings))
    lines = [f"{redact(flags.db)}: {_raters(replicas, replication)} per batch"]
    for p in report["progress"]:
        lines.append(
            f"  {p['task_type']}: {p['done']} done / {p['assigned']} assigned / {p['open']} open of {p['batches']} batches; "
            f"{p['judgments']} judgments"
        )
        if p["against"] == "plan":
            lines.append(
                f"    against the plan: {p['items_done']:,} of {p['items_planned']:,} items done, "
                f"{p['judgments_rated']:,} of {p['judgments_planned']:,} judgments"
            )
        if p["closed"] or replication.rule != FIXED:
            lines.append(
                f"    {p['closed']} of {p['items']} items closed early: {p['saved']} of {p['items'] * replicas} judgments saved against the ceiling"
            )
    for m in report["machine"] or []:
        lines.append(f"  {m['task_type']}: the machine labelled {m['machine']:,} of {m['items']:,} items (triage)")
    for r in report["raters"]:
        accuracy = f"{r['gold_passed']}/{r['gold_seen']} gold passed" if r["gold_seen"] else "no gold yet"
        verdict = f"excluded: {r['reasons']}" if r["excluded"] else "kept by the QC rules"
        lines.append(f"  {r['worker']} {r['task_type']}: {r['judgments']} judgments, {accuracy}; {verdict}")
    for b in (report["budget"] or {}).get("types", []):
        money = f" ({b['left_cost']:,.2f} {b['currency']})" if b["left_cost"] is not None else ""
        lines.append(f"  {b['task_type']}: {b['left_judgments']:,} of {b['judgments']:,} judgments left{money}")
    print("\n".join(lines))
    return {**report, "closed": store.closed()}


def _raters(replicas: int, replication: ReplicationSettings) -> str:
    return f"{replicas} raters" if replication.rule == FIXED else f"at most {replicas} raters (stop rule {replication.rule})"


COMMANDS: dict[str, Callable[[list[str]], Any]] = {
    **{f"add-{role}": partial(_add_person, people) for role, people in PEOPLE.items()},
    **{f"remove-{role}": partial(_remove_person, people) for role, people in PEOPLE.items()},
    "status": status,
}


def main(argv: list[str]) -> Any:
    """``serve [flags]`` runs the app; ``serve add-rater …``, ``add-operator …``, ``remove-rater …``, ``remove-operator …``
    and ``status …`` are the operator's."""
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]](argv[1:])
    return run_server(argv)
