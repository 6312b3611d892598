"""``crisscross serve`` and its operator commands: sign-in links, status, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from crisscross.annotate.store import Answer, Store, token_hash
from crisscross.pipelines import cli, serve
from tests.serve.round import RoundFiles, make_store

NOW = 1_800_000_000.0


def test_add_rater_prints_a_link_whose_token_only_the_hash_of_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    db = tmp_path / "round.sqlite"
    serve.main(["add-rater", "ann", "--db", str(db), "--url", "http://10.0.0.5:8080/"])
    link = capsys.readouterr().out.strip()
    assert link.startswith("http://10.0.0.5:8080/signin#token=")
    token = link.split("#token=", 1)[1]
    store = Store(str(db))
    assert store.rater_of(token) == "ann"
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("round.sqlite*")).decode("latin-1")  # the file and its WAL
    assert token not in stored and token_hash(token) in stored


def test_status_shows_progress_per_type_and_gold_accuracy_per_rater(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    db = tmp_path / "round.sqlite"
    store = make_store(db)
    held = store.assignment("ann", NOW, 5, 3600)
    store.submit("ann", held.batch_id, [Answer(i.position, 4.5, None, 2.0) for i in held.items], NOW, 5)
    store.assignment("bob", 4e9, 5, 3600)
    report = serve.main(["status", "--db", str(db)])
    out = capsys.readouterr().out
    assert "SIS: 0 done / 1 assigned / 0 open of 1 batches; 2 judgments" in out
    assert "STS: 0 done / 0 assigned / 2 open of 2 batches" in out
    assert "ann SIS: 2 judgments, 0/1 gold passed" in out  # sis-00001's gold is a known negative, rated 4.5
    assert report["raters"] == [{"worker": "ann", "task_type": "SIS", "judgments": 2, "gold_seen": 1, "gold_passed": 0}]


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
