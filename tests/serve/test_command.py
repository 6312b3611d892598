"""``crisscross serve`` and its operator commands: sign-in links, status, one-line errors."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from crisscross.annotate.store import Answer, Store, token_hash
from crisscross.pipelines import cli, serve
from tests.scratch_postgres import Server
from tests.serve.round import RoundFiles, free_port, query, token_holder

NOW = 1_800_000_000.0


def add_rater(db: str, capsys: pytest.CaptureFixture[str]) -> str:
    """``serve add-rater ann``'s token, after checking the link it prints."""
    serve.main(["add-rater", "ann", "--db", db, "--url", "http://10.0.0.5:8080/"])
    link = capsys.readouterr().out.strip()
    assert link.startswith("http://10.0.0.5:8080/signin#token=")
    token = link.split("#token=", 1)[1]
    assert token_holder(Store(db), token) == "ann"
    return token


def test_add_rater_prints_a_link_whose_token_only_the_hash_of_is_kept(database: str, capsys: pytest.CaptureFixture[str]):
    token = add_rater(database, capsys)
    stored = str(query(database, "SELECT * FROM raters"))
    assert token not in stored and token_hash(token) in stored


def test_no_byte_of_a_sqlite_database_holds_a_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    token = add_rater(str(tmp_path / "round.sqlite"), capsys)
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("round.sqlite*")).decode("latin-1")  # the file and its WAL
    assert token not in stored and token_hash(token) in stored


def test_status_shows_progress_per_type_and_gold_accuracy_per_rater(store: Store, capsys: pytest.CaptureFixture[str]):
    db = store.location
    held = store.assignment("ann", NOW, 5, 3600)
    store.submit("ann", held.batch_id, [Answer(i.position, 4.5, None, 2.0) for i in held.items], NOW, 5)
    store.assignment("bob", 4e9, 5, 3600)
    report = serve.main(["status", "--db", db])
    out = capsys.readouterr().out
    assert "SIS: 0 done / 1 assigned / 0 open of 1 batches; 2 judgments" in out
    assert "STS: 0 done / 0 assigned / 2 open of 2 batches" in out
    assert "ann SIS: 2 judgments, 0/1 gold passed; kept by the QC rules" in out  # sis-00001's gold is a known negative, rated 4.5
    assert report["raters"] == [
        {
            "worker": "ann",
            "task_type": "SIS",
            "judgments": 2,
            "gold_seen": 1,
            "gold_passed": 0,
            "gold_accuracy": 0.0,
            "loo_items": 0,
            "loo_correlation": None,  # nobody else rated the item yet
            "median_seconds": 2.0,
            "straightline_share": 1.0,
            "excluded": False,  # too few judgments for any rule to apply
            "reasons": "",
        }
    ]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, round_files: RoundFiles, capsys: pytest.CaptureFixture[str]):
    cases = {
        ("serve", "status", "--db", str(tmp_path / "absent.sqlite")): "no rater database",
        ("serve", "--tasks", str(tmp_path), "--db", str(tmp_path / "x.sqlite")): "run the tasks stage first",
        (
            "serve",
            "--tasks",
            str(round_files.tasks),
            "--items",
            str(round_files.items),
            "--images",
            str(tmp_path / "nope"),
            "--db",
            str(tmp_path / "y.sqlite"),
        ): "no image folder",
        ("serve", "add-rater", "bad name", "--db", str(tmp_path / "z.sqlite")): "rater name",
        ("serve", "status", "--db", "mysql://u:secret@h/d"): "unknown scheme",
    }
    for argv, message in cases.items():
        assert cli.main(list(argv)) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1 and "secret" not in err, err


def test_serve_started_elsewhere_names_the_image_path_it_tried_and_serves_with_root(
    tmp_path: Path, round_files: RoundFiles, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    import pyarrow.parquet as pq
    import uvicorn

    from tests.serve.round import browser

    project = tmp_path / "project"  # where ingest ran: the items' image paths are relative to it
    (project / "items").mkdir(parents=True)
    shutil.copytree(round_files.images, project / "photos")
    images = pq.read_table(round_files.items / "images.parquet").to_pylist()
    rows = [{**r, "path": f"photos/{Path(r['path']).name}"} for r in images]
    pq.write_table(pa.Table.from_pylist(rows), project / "items" / "images.parquet")
    shutil.copy(round_files.items / "captions.parquet", project / "items" / "captions.parquet")
    served: list = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.append(app))
    monkeypatch.chdir(tmp_path)
    argv = ["serve", "--tasks", str(round_files.tasks), "--items", str(project / "items"), "--db", str(tmp_path / "r.sqlite")]
    assert cli.main(argv) == 2 and not served
    err = capsys.readouterr().err.strip()
    assert f"e.g. {tmp_path}/photos/photo" in err and "tried --root ." in err and len(err.splitlines()) == 1
    assert cli.main([*argv, "--root", str(project)]) == 0 and len(served) == 1
    client = browser(served[0])
    client.post("/signin", data={"token": Store(str(tmp_path / "r.sqlite")).add_rater("ann", NOW)})
    batch = client.get("/api/batch").json()["batch"]
    assert batch["id"] == "sis-00001" and client.get("/api/image/1/a?batch=sis-00001").headers["content-type"] == "image/png"


@pytest.mark.parametrize(("flag", "message"), [(["--url", "ftp://x"], "is not an http"), (["--workers", "0"], "--workers must be")])
def test_serve_flags_are_checked_before_it_starts(
    tmp_path: Path, round_files: RoundFiles, capsys: pytest.CaptureFixture[str], flag: list[str], message: str
):
    argv = ["serve", "--tasks", str(round_files.tasks), "--items", str(round_files.items), "--db", str(tmp_path / "r.sqlite"), *flag]
    assert cli.main(argv) == 2 and message in capsys.readouterr().err


def test_the_workers_shared_listener_turns_nagle_off_on_its_connections():
    """``serve --workers N`` hands its workers one listening socket; asyncio turns Nagle's algorithm
    off on a connection only when that socket says ``IPPROTO_TCP``, which a protocol-0 socket (as
    uvicorn makes its own) does not: every small reply then waits for the client's delayed ACK."""

    async def nodelay_of_a_connection(listener: socket.socket) -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        async with await asyncio.start_server(on_connect, sock=listener):
            _, client = await asyncio.open_connection(*listener.getsockname()[:2])
            value = await asyncio.wait_for(accepted, 10)
            client.close()
        return value

    assert asyncio.run(nodelay_of_a_connection(cli.tcp_listener("127.0.0.1", 0))) != 0
    protocol_zero = socket.socket(socket.AF_INET)
    protocol_zero.bind(("127.0.0.1", 0))
    assert asyncio.run(nodelay_of_a_connection(protocol_zero)) == 0


def test_serve_hands_its_workers_a_tcp_socket(tmp_path: Path, round_files: RoundFiles, monkeypatch: pytest.MonkeyPatch):
    import uvicorn.supervisors

    handed: list[tuple[int, int, int]] = []

    class Supervisor:  # uvicorn's, recording the sockets instead of starting worker processes
        def __init__(self, config: object, sockets: list[socket.socket]) -> None:
            handed.extend((s.family, s.proto, s.getsockname()[1]) for s in sockets)

        def run(self) -> None:
            pass

    monkeypatch.setattr(uvicorn.supervisors, "Multiprocess", Supervisor)
    monkeypatch.setenv(serve.SERVE_ARGS, "")  # what run_server sets for its workers, undone after the test
    port = free_port()
    argv = ["--tasks", str(round_files.tasks), "--items", str(round_files.items), "--db", str(tmp_path / "r.sqlite")]
    serve.run_server([*argv, "--workers", "2", "--port", str(port)])
    assert handed == [(socket.AF_INET, socket.IPPROTO_TCP, port)]


def test_a_serve_worker_builds_its_app_without_the_clients_the_command_hid(
    tmp_path: Path, round_files: RoundFiles, monkeypatch: pytest.MonkeyPatch
):
    """Each worker of ``serve --workers N`` imports its app as the command imported its stage, Beam
    without the service clients the command hid (``serve_worker``); importing ``serve`` itself, as the
    factory's module, loads Google's clients where the dataflow extra is installed."""
    pytest.importorskip("google.cloud.storage", reason="without the dataflow extra there are no Google clients to hide")
    import uvicorn.supervisors

    started: dict[str, Any] = {}

    class Supervisor:  # uvicorn's, recording what each worker process would be given instead of starting them
        def __init__(self, config: uvicorn.Config, sockets: list[socket.socket]) -> None:
            started.update(app=config.app, env=dict(os.environ))

        def run(self) -> None:
            pass

    monkeypatch.setattr(uvicorn.supervisors, "Multiprocess", Supervisor)
    monkeypatch.setenv(serve.SERVE_ARGS, "")  # what run_server sets for its workers, undone after the test
    argv = ["--tasks", str(round_files.tasks), "--items", str(round_files.items), "--db", str(tmp_path / "r.sqlite")]
    assert cli.main(["serve", *argv, "--workers", "2", "--port", str(free_port())]) == 0
    clients = ("google.cloud.storage", "boto3", "pymongo")
    worker = "import sys; from uvicorn.importer import import_from_string; app = import_from_string(sys.argv[1])(); "
    loaded = "print(type(app).__name__, *(name for name in sys.argv[2:] if name in sys.modules))"
    started_as_worker = subprocess.run(
        [sys.executable, "-c", worker + loaded, str(started["app"]), *clients], env=started["env"], capture_output=True, text=True
    )
    monkeypatch.setenv(serve.SERVE_ARGS, started["env"][serve.SERVE_ARGS])
    assert started_as_worker.stdout.split() == [type(serve.app_from_environment()).__name__], started_as_worker.stderr[-2000:]
    imported_whole = subprocess.run(
        [sys.executable, "-c", "import sys, crisscross.pipelines.serve; print('google.cloud.storage' in sys.modules)"],
        capture_output=True,
        text=True,
    )
    assert imported_whole.stdout.strip() == "True", imported_whole.stderr[-2000:]


def test_a_postgres_database_that_cannot_be_opened_is_one_line_without_its_password(
    postgres_server: Server, capsys: pytest.CaptureFixture[str]
):
    wrong = Server(postgres_server.port, "not-the-password")
    cases = {
        postgres_server.url("no_such_database"): "does not exist",
        wrong.url("postgres"): "password authentication failed",
    }
    for url, message in cases.items():
        assert cli.main(["serve", "status", "--db", url]) == 2
        err = capsys.readouterr().err
        assert (
            message in err and len(err.strip().splitlines()) == 1 and postgres_server.password not in err and "not-the-password" not in err
        ), err


def test_remove_rater_and_remove_operator_end_their_sign_in(store: Store, round_files: RoundFiles, capsys: pytest.CaptureFixture[str]):
    from crisscross.annotate.store import OPERATOR, SessionPolicy
    from tests.serve.round import browser, make_app

    ann = browser(make_app(store, round_files))
    assert ann.post("/signin", data={"token": (token := store.add_rater("ann", NOW))}).status_code == 200
    view = ann.get("/api/batch").json()
    answers = [{"position": i["position"], "score": 3.0, "seconds": 4.0} for i in view["batch"]["items"]]
    assert (
        ann.post(
            "/api/submit", json={"batch_id": view["batch"]["id"], "answers": answers}, headers={"X-CSRF-Token": view["csrf"]}
        ).status_code
        == 200
    )
    boss = store.add_operator("boss", NOW)
    boss_session = store.sign_in(boss, NOW, SessionPolicy(), OPERATOR)[1]
    judged = store.judgments()

    assert cli.main(["serve", "remove-rater", "ann", "--db", store.location]) == 0
    assert capsys.readouterr().out.startswith("rater ann removed from ")
    assert ann.get("/api/batch").status_code == 401 and token_holder(store, token) is None  # the session and the link both end
    assert store.judgments() == judged and len(judged) == len(answers)  # the judgments stay
    assert token_holder(store, boss, OPERATOR) == "boss"
    assert cli.main(["serve", "remove-operator", "boss", "--db", store.location]) == 0
    assert token_holder(store, boss, OPERATOR) is None and store.session_operator(boss_session, NOW, SessionPolicy()) is None
    capsys.readouterr()
    for argv in (["remove-rater", "ann"], ["remove-operator", "nobody"], ["remove-rater", "boss"]):
        assert cli.main(["serve", *argv, "--db", store.location]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"no {argv[0].split('-')[1]} '{argv[1]}'" in err
