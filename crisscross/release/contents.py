"""The tables a release holds, built from the rounds' outputs.

Inputs are the aggregate stage's folders (``rated.parquet``, ``judgments_kept.parquet``,
``raters.csv``, ``facts.json``), optionally the annotate stage's ``judgments.parquet`` of each
round (for gold and excluded judgments too; with its ``replication.parquet`` when the round was
replicated adaptively) and the ingest stage's items (each pair's split, caption text, the
Karpathy-shaped document).  Raters appear only under pseudonyms
(:mod:`crisscross.release.pseudonyms`); submission times are left out, since they can link a
pseudonym back to a platform's records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from crisscross.aggregate.round import KEPT_JUDGMENTS, RATED_COLUMNS
from crisscross.annotate.providers import CXC_WORKER
from crisscross.campaign.replication import DECISIONS_FILE, FIXED
from crisscross.core.errors import InputError, ParamError
from crisscross.core.ids import IdFormError, published, split_id
from crisscross.formats.schema import SOURCE_REPLAY
from crisscross.release.pseudonyms import Salt, pseudonyms
from crisscross.tasktypes import rated_type_names, task_type
from crisscross.tasktypes.verify import VERIFY

# the aggregate stage's rated columns, with the round, the split and the published ids beside the ids
PAIR_COLUMNS = (
    "round",
    "split",
    "task_type",
    "item_id",
    "id_a",
    "id_b",
    "published_a",
    "published_b",
    *RATED_COLUMNS[RATED_COLUMNS.index("sampling_method") :],
)
JUDGMENT_COLUMNS = (
    "round",
    "task_type",
    "item_id",
    "id_a",
    "id_b",
    "rater",
    "score",
    "answer",
    "seconds",
    "batch_id",
    "source",
    "simulated",
    "status",
)
KEPT, EXCLUDED, GOLD = "kept", "excluded-rater", "gold"  # a judgment's status: aggregated, its rater failed QC, a gold item
ITEM_ROWS, SOURCE_ROWS = "item", "source-row"  # CxC CSV rows: one per rated item, or one per replayed release row
CXC_ROW_MODES = (ITEM_ROWS, SOURCE_ROWS)
REPLICATION_COLUMNS = ("item_id", "task_type", "stopped", "open")  # what the release reads of DECISIONS_FILE
UNSPLIT = "all"  # the split name of items their source gave no split (files sts_all.csv, …)


@dataclass(frozen=True)
class RoundInput:
    """One annotation round: its aggregate folder and, optionally, its annotate folder."""

    number: int
    rated: Path
    judgments: Path | None = None


@dataclass(frozen=True)
class Round:
    number: int
    rated: pd.DataFrame
    kept: pd.DataFrame
    judgments: pd.DataFrame  # every judgment when the annotate folder was given, else the kept ones
    raters: pd.DataFrame
    facts: dict[str, Any]
    all_judgments: bool
    replication: pd.DataFrame | None = None  # the annotate stage's decisions per item when it replicated adaptively
    rule: str = FIXED  # its stop rule (annotate report.json's replication.rule)


@dataclass(frozen=True)
class Contents:
    """Everything the release writes, in memory; rater ids are already pseudonyms."""

    pairs: pd.DataFrame  # PAIR_COLUMNS, sorted by task type then item id
    judgments: pd.DataFrame  # JUDGMENT_COLUMNS
    raters: pd.DataFrame  # round, rater, task type, the rater report's statistics, excluded, reasons
    kept: pd.DataFrame  # kept judgments (score per row), for replayed releases' source rows
    facts: dict[int, dict[str, Any]]  # round → task type → the aggregate stage's facts
    rounds: tuple[Round, ...]

    @property
    def simulated(self) -> bool:
        return bool(self.pairs["simulated"].any() or self.judgments["simulated"].any())

    @property
    def splits(self) -> list[str]:
        return sorted(set(self.pairs["split"]))


def _need(path: Path, producer: str) -> Path:
    if not path.is_file():
        raise InputError(f"no {path}: run the {producer} stage first (or name the right folder)")
    return path


def read_round(spec: RoundInput) -> Round:
    rated = pq.read_table(_need(spec.rated / "rated.parquet", "aggregate")).to_pandas()
    kept = pq.read_table(_need(spec.rated / KEPT_JUDGMENTS, "aggregate")).to_pandas()
    raters = pd.read_csv(
        _need(spec.rated / "raters.csv", "aggregate"), dtype={"worker": str, "task_type": str, "reasons": str}, keep_default_na=False
    )
    facts = json.loads(_need(spec.rated / "facts.json", "aggregate").read_text(encoding="utf-8"))
    judgments = kept
    replication, rule = None, FIXED
    if spec.judgments is not None:
        judgments = pq.read_table(_need(spec.judgments / "judgments.parquet", "annotate")).to_pandas()
        replication, rule = read_replication(spec.judgments)
    return Round(spec.number, rated, kept, judgments, raters, facts, spec.judgments is not None, replication, rule)


def read_replication(folder: Path) -> tuple[pd.DataFrame | None, str]:
    """An annotate output's per-item stop decisions and rule; none (the fixed design) without its decisions file."""
    path = folder / DECISIONS_FILE
    if not path.is_file():
        return None, FIXED
    report = json.loads(_need(folder / "report.json", "annotate").read_text(encoding="utf-8"))
    rule = (report.get("replication") or {}).get("rule")
    if not rule:
        raise InputError(f"{folder / 'report.json'} names no replication.rule beside {path}: rerun the annotate stage")
    decisions = pq.read_table(path).to_pandas()
    missing = sorted(set(REPLICATION_COLUMNS) - set(decisions.columns))
    if missing:
        raise InputError(f"{path} has no {missing[0]} column: rerun the annotate stage")
    return decisions[list(REPLICATION_COLUMNS)], str(rule)


def item_splits(items: Path) -> dict[str, str]:
    """Canonical id → split, for every image and caption of the ingest stage's tables."""
    images = pq.read_table(_need(items / "images.parquet", "ingest"), columns=["image_id", "split"]).to_pandas()
    captions = pq.read_table(_need(items / "captions.parquet", "ingest"), columns=["caption_id", "split"]).to_pandas()
    return {
        **dict(zip(images["image_id"], images["split"], strict=True)),
        **dict(zip(captions["caption_id"], captions["split"], strict=True)),
    }


def pair_table(rounds: Sequence[Round], splits: Mapping[str, str]) -> pd.DataFrame:
    """Every rated item of every round with its split (the split of its first id) and published ids."""
    frames = [r.rated.assign(round=r.number) for r in rounds if not r.rated.empty]
    if not frames:
        raise InputError("no rated pairs in any --rated folder: nothing to release")
    pairs = pd.concat(frames, ignore_index=True)
    unknown = sorted(set(pairs["id_a"]) - set(splits))
    if unknown:
        raise InputError(
            f"{len(unknown)} rated id(s) are not in the --items tables, e.g. {unknown[0]}: give the items the rounds were built from"
        )
    duplicated = pairs[pairs.duplicated(["task_type", "item_id"], keep=False)]
    if not duplicated.empty:
        first = duplicated.iloc[0]
        raise InputError(
            f"item {first['item_id']} is rated in more than one round ({sorted(set(duplicated['round']))}): a release holds each pair once"
        )
    kinds = pairs["task_type"].map(lambda t: task_type(t).kinds)
    try:
        published_a = [published(i, k[0]) for i, k in zip(pairs["id_a"], kinds, strict=True)]
        published_b = [published(i, k[1]) for i, k in zip(pairs["id_b"], kinds, strict=True)]
    except IdFormError as error:
        raise InputError(f"a rated id has no published form: {error}") from error
    split = pairs["id_a"].map(splits).replace("", UNSPLIT)
    pairs = pairs.assign(split=split, published_a=published_a, published_b=published_b)
    return pairs[list(PAIR_COLUMNS)].sort_values(["task_type", "item_id"], kind="stable").reset_index(drop=True)


def judgment_table(rounds: Sequence[Round], names: Mapping[str, str]) -> pd.DataFrame:
    """Every judgment of every round with its rater's pseudonym and status (kept, excluded-rater, gold)."""
    frames = []
    for r in rounds:
        frame = r.judgments
        excluded = set(
            zip(
                r.raters.loc[r.raters["excluded"].astype(bool), "worker"],
                r.raters.loc[r.raters["excluded"].astype(bool), "task_type"],
                strict=True,
            )
        )
        kept = set(zip(r.kept["item_id"], r.kept["worker"], r.kept["batch_id"], strict=True))
        status = [
            KEPT if (i, w, b) in kept else EXCLUDED if (w, t) in excluded else GOLD
            for i, w, b, t in zip(frame["item_id"], frame["worker"], frame["batch_id"], frame["task_type"], strict=True)
        ]
        frames.append(frame.assign(round=r.number, rater=frame["worker"].map(names), status=status))
    table = pd.concat(frames, ignore_index=True)[list(JUDGMENT_COLUMNS)]
    return table.sort_values(["round", "task_type", "item_id", "rater", "batch_id"], kind="stable").reset_index(drop=True)


def rater_table(rounds: Sequence[Round], names: Mapping[str, str]) -> pd.DataFrame:
    frames = [r.raters.assign(round=r.number, rater=r.raters["worker"].map(names)).drop(columns=["worker"]) for r in rounds]
    table = pd.concat(frames, ignore_index=True)
    columns = ["round", "rater", *[c for c in table.columns if c not in ("round", "rater")]]
    return table[columns].sort_values(["round", "rater", "task_type"], kind="stable").reset_index(drop=True)


def no_rounds() -> Contents:
    """The contents of a release without rated rounds (COCO-BISON triples or Flickr30k Entities alone)."""
    return Contents(
        _empty(PAIR_COLUMNS),
        _empty(JUDGMENT_COLUMNS),
        _empty(("round", "rater", "task_type", "excluded")),
        _empty(("round", "task_type", "item_id", "id_a", "id_b", "worker", "score", "source")),
        {},
        (),
    )


def _empty(columns: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


def simulated_workers(rounds: Sequence[Round], workers: Sequence[str]) -> set[str]:
    """The ``workers`` that are not people: all of them when no judgment comes from people, else
    those whose every judgment (in every round) comes from the simulated panel."""
    judgments = pd.concat([r.judgments[["worker", "simulated"]] for r in rounds], ignore_index=True)
    if judgments["simulated"].all():
        return set(workers)
    every = judgments.groupby("worker", sort=True)["simulated"].all()
    return set(every[every].index)


def collect(specs: Sequence[RoundInput], items: Path, salt: Salt) -> Contents:
    rounds = tuple(read_round(s) for s in specs)
    workers = [w for r in rounds for frame in (r.judgments, r.raters, r.kept) for w in frame["worker"]]
    names = pseudonyms(workers, salt, simulated_workers(rounds, workers))
    kept = pd.concat([r.kept.assign(round=r.number) for r in rounds], ignore_index=True)
    return Contents(
        pair_table(rounds, item_splits(items)),
        judgment_table(rounds, names),
        rater_table(rounds, names),
        kept[["round", "task_type", "item_id", "id_a", "id_b", "worker", "score", "source"]],
        {r.number: r.facts for r in rounds},
        rounds,
    )


def cxc_rows(contents: Contents, task: str, split: str, mode: str) -> list[tuple[str, str, float, str]]:
    """Rows ``(id a, id b, agg_score, sampling_method)`` of one CxC file.

    ``item``: one row per rated item, its aggregate.  ``source-row``: one row per kept judgment of
    a replayed CxC release (each such judgment is one published row, score = its ``agg_score``), so
    pairs CxC published twice (SIS, both orders) come back as two rows, as published.
    """
    pairs = contents.pairs[(contents.pairs["task_type"] == task) & (contents.pairs["split"] == split)]
    if mode == ITEM_ROWS:
        return list(pairs[["id_a", "id_b", "agg_score", "sampling_method"]].itertuples(index=False, name=None))
    kept = contents.kept[contents.kept["item_id"].isin(set(pairs["item_id"]))]
    foreign = kept[(kept["source"] != SOURCE_REPLAY) | ~kept["worker"].str.startswith(CXC_WORKER)]
    if not foreign.empty:
        raise ParamError(
            f"release.cxc_rows: {SOURCE_ROWS} needs judgments replayed from a CxC release; {task} has {len(foreign)} others (e.g. worker source {foreign['source'].iloc[0]!r})"
        )
    methods = dict(zip(pairs["item_id"], pairs["sampling_method"], strict=True))
    rows = sorted(zip(kept["id_a"], kept["id_b"], kept["score"].astype(float), kept["item_id"].map(methods), strict=True))
    return [(a, b, s, m) for a, b, s, m in rows]


def verify_maps(pairs: pd.DataFrame) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """VERIFY positives as ECCV Caption's maps: image → captions and caption → images, by native
    ids (COCO integers), keys as text, lists sorted."""
    verified = pairs[(pairs["task_type"] == VERIFY.name) & pairs["positive"].astype(bool)]
    image_to_caption: dict[str, list[Any]] = {}
    caption_to_image: dict[str, list[Any]] = {}
    for image, caption in sorted(zip(verified["id_a"].map(_native), verified["id_b"].map(_native), strict=True)):
        image_to_caption.setdefault(str(image), []).append(caption)
        caption_to_image.setdefault(str(caption), []).append(image)
    return image_to_caption, {k: sorted(v) for k, v in caption_to_image.items()}


def _native(canonical: str) -> int | str:
    native = split_id(canonical)[2]
    return int(native) if native.isdigit() else native


def rating_pairs(pairs: pd.DataFrame) -> pd.DataFrame:
    return pairs[pairs["task_type"].isin(rated_type_names())]


def positives_per_query(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per task type and query (``id_a``): how many of its rated pairs are positive."""
    counts = pairs.groupby(["task_type", "id_a"])["positive"].sum().astype(np.int64)
    return counts.rename("positives").reset_index()
