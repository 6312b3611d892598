"""FindDecoys and AssembleBison with TestPipeline: the library's results, refusals in the quarantine."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from crisscross.aggregate.bison import Triple
from crisscross.aggregate.round import RoundSettings, aggregate_round
from crisscross.beam.bison import AssembleBison, BisonInputs
from crisscross.beam.decoys import FindDecoys
from crisscross.candidates.bison import Chosen, DecoySettings
from crisscross.embed.sets import COCAPTION_MEAN, EmbeddingSet, set_dir
from crisscross.formats.schema import item_id
from crisscross.tasktypes.names import CHOOSE, VERIFY_TRIPLE


def write_items(root: Path) -> Path:
    items = root / "items"
    items.mkdir()
    images = [{"image_id": f"x:img:{k}", "path": f"/p/{k}.jpg", "n_captions": 1} for k in "abcde"]
    captions = [{"caption_id": f"x:cap:{k}{n}", "image_id": f"x:img:{k}", "text": "t"} for k in "abcd" for n in (1, 2)]
    pq.write_table(pa.Table.from_pylist(images), items / "images.parquet")
    pq.write_table(pa.Table.from_pylist(captions), items / "captions.parquet")
    return items


def test_find_decoys(tmp_path: Path) -> None:
    items = write_items(tmp_path)
    embeddings = tmp_path / "embeddings"
    vectors = np.asarray([[1, 0], [0.9, 0.2], [0, 1], [0.1, 1]], dtype=np.float32)
    EmbeddingSet([f"x:img:{k}" for k in "abcd"], vectors).write(set_dir(str(embeddings), "text", "toy", COCAPTION_MEAN))
    with TestPipeline() as pipeline:
        out = pipeline | FindDecoys(str(items), str(embeddings), DecoySettings(encoder="toy", block=3))
        pairs = out.decoys | "Pairs" >> beam.Map(lambda d: (d.target, d.decoy, d.rank))
        assert_that(
            pairs, equal_to([("x:img:a", "x:img:b", 1), ("x:img:b", "x:img:a", 1), ("x:img:c", "x:img:d", 1), ("x:img:d", "x:img:c", 1)])
        )
        reasons = out.rejected | "Reasons" >> beam.Map(lambda r: (r.key, r.reason))
        assert_that(reasons, equal_to([("x:img:e", "no-captions")]), label="Rejected")


def judgments(rows: list[tuple[str, str, str, str, str]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "item_id": item_id(kind, a, b),
                "task_type": kind,
                "id_a": a,
                "id_b": b,
                "worker": worker,
                "score": np.nan,
                "answer": answer,
                "seconds": 9.0,
                "time": None,
                "batch_id": "b1",
                "source": "people",
                "simulated": False,
            }
            for kind, a, b, worker, answer in rows
        ]
    )


def write_round(folder: Path, frame: pd.DataFrame) -> None:
    folder.mkdir(parents=True)
    tasks = frame.drop_duplicates("item_id")[["item_id", "task_type", "id_a", "id_b", "batch_id"]].assign(
        sampling_method="m", gold="", position=1
    )
    result = aggregate_round(frame, tasks, RoundSettings())
    pq.write_table(pa.Table.from_pandas(result.rated, preserve_index=False), folder / "rated.parquet")
    pq.write_table(pa.Table.from_pandas(result.kept, preserve_index=False), folder / "judgments_kept.parquet")


def test_assemble_bison(tmp_path: Path) -> None:
    items = write_items(tmp_path)
    write_round(
        tmp_path / "choose",
        judgments(
            [
                (CHOOSE, "x:img:a", "x:img:b", "c1", "x:cap:a2"),
                (CHOOSE, "x:img:c", "x:img:d", "c1", "none"),
                (CHOOSE, "x:img:d", "x:img:c", "c1", "x:cap:a1"),  # not a caption of d
            ]
        ),
    )
    write_round(
        tmp_path / "verify",
        judgments([(VERIFY_TRIPLE, "x:cap:a2", "x:img:b", w, "target") for w in ("v1", "v2")]),
    )
    inputs = BisonInputs(str(tmp_path / "choose"), str(items), str(tmp_path / "verify"))
    with TestPipeline() as pipeline:
        out = pipeline | AssembleBison(inputs)
        assert_that(out.chosen, equal_to([([Chosen("x:cap:a2", "x:img:a", "x:img:b")], {"chosen": 1, "none": 1, "other_task_types": 0})]))
        accepted = (
            [Triple("x:cap:a2", "x:img:a", "x:img:b", "c1", ("v1", "v2"))],
            {"verified": 1, "accepted": 1, "not_accepted": 0, "verifier_was_chooser": 0},
        )
        assert_that(out.triples, equal_to([accepted]), label="Triples")
        assert_that(out.rejected | beam.Map(lambda r: r.reason), equal_to(["caption-not-of-target"]), label="Rejected")
    with TestPipeline() as pipeline:  # before the VERIFY-TRIPLE round: the candidates only
        out = pipeline | AssembleBison(BisonInputs(str(tmp_path / "choose"), str(items), None))
        assert_that(out.triples, equal_to([]), label="NoTriples")
