"""``annotate`` format ``store``: the rater database read as judgments, validated like files."""

from __future__ import annotations

from pathlib import Path

import pytest

from crisscross.annotate.formats import JUDGMENT_FORMATS, DatabaseFormat, JudgmentFileError
from crisscross.annotate.sources import JUDGMENT_SOURCES, SourceSettings
from crisscross.annotate.store import Answer, Store, redact
from tests.serve.round import tasks_table

NOW = 1_800_000_000.0


def test_store_judgments_are_validated_and_quarantined_like_files(store: Store):
    db = store.location
    for rater in ("ann", "bob"):
        while held := store.assignment(rater, NOW, 2, 3600):
            rated = held.task_type != "VERIFY"
            store.submit(
                rater,
                held.batch_id,
                [Answer(i.position, 1.0 if rated else None, None if rated else "mostly no", 5.0) for i in held.items],
                NOW,
                2,
            )
    tasks = tasks_table()
    fewer = tasks.filter([r != "verify-00001" for r in tasks.column("batch_id").to_pylist()])  # a tasks table without one batch
    collected = JUDGMENT_SOURCES.create("import", settings=SourceSettings(judgments=(db,), format="store"))(fewer)
    assert collected.judgments.num_rows == 2 * fewer.num_rows
    assert {r.reason for r in collected.rejected} == {"unknown-task"} and len(collected.rejected) == 2 * 3
    assert collected.rejected[0].source.startswith(f"{redact(db)}:verify-00001:")
    assert collected.facts == {"databases": [redact(db)]}
    row = collected.judgments.to_pylist()[0]
    assert row["source"] == "people" and row["seconds"] == 5.0 and row["time"] == "2027-01-15T08:00:00Z"


def test_the_store_format_reads_databases_not_file_bytes(tmp_path: Path):
    reader = JUDGMENT_FORMATS.create("store")
    assert isinstance(reader, DatabaseFormat)
    with pytest.raises(JudgmentFileError, match="reads a database"):
        reader.read("judgments.csv", b"item_id\n")
    with pytest.raises(FileNotFoundError, match="give the database as --judgments"):
        JUDGMENT_SOURCES.create("import", settings=SourceSettings(format="store"))(tasks_table())
    with pytest.raises(Exception, match="no rater database"):
        JUDGMENT_SOURCES.create("import", settings=SourceSettings(judgments=(str(tmp_path / "none.sqlite"),), format="store"))(
            tasks_table()
        )
