"""TFDS's ``CroissantBuilder`` preparing a release's judgments, against the readers it stands on.

The release is the demo's, ``releases/demo-simulated`` (built by ``DVC_NO_ANALYTICS=1 dvc repro`` in
the project root; without it the benchmark says so and measures nothing), and the record set its
``judgments`` table (``data/judgments.parquet``, every row).  Timed, as a user calls them
(``README.md``, "Use a release"), imports done beforehand and not timed:

- **builder**: ``tensorflow_datasets.dataset_builders.CroissantBuilder`` made from the release's
  ``croissant.json`` for that one record set and ``download_and_prepare()`` into an empty folder:
  the builder reads the records with mlcroissant inside a Beam pipeline on Beam's local runner and
  writes them as TFDS ``array_record`` files (once; three times in a full run, each into a new folder).

**The references, in the same run**: ``mlcroissant`` reading the same record set (``Dataset`` made
from the same ``croissant.json``, every record iterated: what the builder's pipeline reads), and
the same Parquet file read whole by pyarrow (``pq.read_table``) and by pandas (``pd.read_parquet``);
mlcroissant three times (five in a full run), the Parquet readers, which take milliseconds, 30 times
each; the median kept.  mlcroissant is timed before the builder, which reads through it, so its own
first use is paid among its repeats.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import DEMO_BUILD, save_result

NAME = "release_loaders"
RELEASE = Path(__file__).resolve().parents[1] / "releases" / "demo-simulated"
TABLE = "judgments"
PARQUET_REPEATS = 30  # a read takes milliseconds: enough for a median on a shared host


def run(args: argparse.Namespace) -> None:
    import crisscross

    try:
        import apache_beam  # noqa: F401  (the builder imports it on first use: imported here, so no reader's time holds an import)
        import mlcroissant as mlc
        import pandas as pd
        import pyarrow.parquet as pq
        import tensorflow_datasets as tfds
    except ImportError as error:
        print(f"skipped: {error.name} is not installed (TFDS comes with pip install -e '.[tfds]')")
        return
    if not (RELEASE / "croissant.json").is_file():
        print(f"skipped: no demo release at {RELEASE}: build it with `{DEMO_BUILD}` in the project root")
        return
    from crisscross.release.croissant import record_set_id

    release = crisscross.load_release(RELEASE)
    parquet = RELEASE / "data" / f"{TABLE}.parquet"
    jsonld = RELEASE / "croissant.json"
    set_id = record_set_id(f"data/{TABLE}.parquet")
    version = release.version.split("-")[0]  # TFDS takes x.y.z only, not a simulated release's 1.0.0-simulated
    rows = release.tables[TABLE].num_rows

    def builder_rows(folder: Path) -> int:
        builder = tfds.dataset_builders.CroissantBuilder(
            jsonld=jsonld,
            record_set_ids=[set_id],
            file_format="array_record",
            disable_shuffling=True,
            data_dir=folder,
            overwrite_version=version,
        )
        builder.download_and_prepare()
        return int(builder.info.splits["default"].num_examples)

    def croissant_rows() -> int:
        return sum(1 for _ in mlc.Dataset(jsonld=jsonld).records(set_id))

    builds, repeats = (1, 3) if args.quick else (3, 5)
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # mlcroissant and TFDS log every step; TFDS warns that Beam's local runner is the one timed
    tfds.disable_progress_bar()
    try:
        croissant = [timed(croissant_rows, rows, "mlcroissant") for _ in range(repeats)]  # first: the builder reads through it
        with tempfile.TemporaryDirectory(prefix="crisscross-bench-") as tmp:
            builder = [timed(lambda n=n: builder_rows(Path(tmp) / f"tfds-{n}"), rows, "builder") for n in range(builds)]
    finally:
        logging.disable(previous)
    arrow = [timed(lambda: pq.read_table(parquet).num_rows, rows, "pyarrow") for _ in range(PARQUET_REPEATS)]
    pandas = [timed(lambda: len(pd.read_parquet(parquet)), rows, "pandas") for _ in range(PARQUET_REPEATS)]
    timings = {"builder": builder, "mlcroissant": croissant, "pyarrow": arrow, "pandas": pandas}
    seconds = {name: statistics.median(times) for name, times in timings.items()}
    ratios = {f"builder_over_{name}": seconds["builder"] / seconds[name] for name in ("mlcroissant", "pyarrow", "pandas")}
    print(f"release {RELEASE.name} {release.version}: record set {set_id!r}, {rows:,} rows ({parquet.stat().st_size:,} bytes of Parquet)")
    print(f"  TFDS CroissantBuilder download_and_prepare: {seconds['builder']:.2f} s (median of {builds})")
    print(
        f"  mlcroissant, every record (reference): {seconds['mlcroissant']:.2f} s; the builder takes {ratios['builder_over_mlcroissant']:.1f}×"
    )
    print(f"  pyarrow read_table (reference): {seconds['pyarrow'] * 1000:.1f} ms; the builder takes {ratios['builder_over_pyarrow']:,.0f}×")
    print(f"  pandas read_parquet (reference): {seconds['pandas'] * 1000:.1f} ms; the builder takes {ratios['builder_over_pandas']:,.0f}×")
    path = save_result(
        NAME,
        {
            "quick": args.quick,
            "release": RELEASE.name,
            "version": release.version,
            "record_set": set_id,
            "rows": rows,
            "seconds": seconds,
            "ratios": ratios,
        },
    )
    print(f"written to {path}")


def timed(read: Callable[[], int], rows: int, reader: str) -> float:
    """Seconds ``read`` takes; it must return every row of the table, so each reader is timed on the same work."""
    started = time.perf_counter()
    got = read()
    elapsed = time.perf_counter() - started
    if got != rows:
        raise RuntimeError(f"{reader} read {got:,} rows of {TABLE}, the release holds {rows:,}")
    return elapsed
