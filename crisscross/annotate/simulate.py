"""The simulated rater panel: judgments for dry runs and budgeting, every row marked ``simulated``.

:func:`simulate_from_embeddings` (``embeddings=, encoder=, seed=, params=, items=``) is the
``simulate`` judgment source (:data:`crisscross.annotate.sources.JUDGMENT_SOURCES`): a seeded panel
(:class:`Simulate`, :class:`Panel`) whose raters perceive each pair through a reference encoder's
cosines (:class:`Reference`) plus their bias and noise, with careless and straight-lining raters
among them.  How a rater turns what it perceives into a stored judgment is each task type's own
(``TaskType.simulated_answers``, or ``seen`` and ``seen_answers`` for the types whose raters weigh
captions against two images, which need the captions of each image: ``items``, the ingest output).
It returns :class:`~crisscross.annotate.providers.Provided` like the replay.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from crisscross.annotate.catalog import Catalog, load_catalog
from crisscross.annotate.providers import Provided, TableLike, judgments_table, tasks_frame, unjudged_table
from crisscross.core.errors import InputError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.core.rng import generator
from crisscross.core.settings import RuleError, setting, settings_from_params
from crisscross.embed.sets import CAPTIONS, COCAPTION_MEAN, EmbeddingSet, set_dir, unit_rows
from crisscross.formats.schema import SOURCE_SIMULATED
from crisscross.tasktypes import task_type, task_types, type_names
from crisscross.tasktypes.base import SCORE_MAX, SCORE_MIN, RaterDraws, cosine_to_score

DEFAULT_PANEL = "sim"  # worker ids sim-0000 …
SCORE_DECIMALS = 2  # a slider reading like CxC's 2.87 (its appendix)
SECONDS_DECIMALS = 1

NO_VECTOR = "no-vector"  # an id has no usable vector in the reference set


@dataclass(frozen=True)
class SimulateParams:
    """Parameters of the simulated panel; any subset may be given as a dict (:meth:`from_mapping`).

    A rater's score is ``clip(latent + bias + noise, 0, 5)`` rounded to 0.01, where ``latent`` is
    the reference cosine mapped linearly from ``anchors[task] = (cos at 0, cos at 5)`` to 0–5 and
    clipped, ``bias ~ N(0, bias_sd)`` is fixed per rater and ``noise ~ N(0, noise_sd)`` per
    judgment.  Careless raters (``careless_share`` of the panel, rounded to whole raters) ignore
    the item: a ``straightline_share`` of them give one constant score, the rest uniform random
    scores, and they are fast (``careless_seconds_mean``).  VERIFY answers threshold the rater's
    score at ``verify_cuts`` (descending) into VERIFY's answers, best first (``answer_of_score``).  Seconds are lognormal
    with mean ``seconds_mean[task]`` and log-sd ``seconds_sigma``.

    BISON (:meth:`Simulate._judge_bison`): a CHOOSE rater scores every caption of the target by its
    margin (``anchors[CHOOSE]``) plus bias and noise and picks the best, or ``none`` when the best
    is below ``choose_cut``; a VERIFY-TRIPLE rater says the caption fits the target when its score
    (``anchors[VERIFY-TRIPLE]``) plus bias and noise reaches ``triple_cut``, and tells it from
    the decoy when its noisy margin score reaches ``choose_cut``: target (fits, tells apart),
    both (fits, does not), neither (does not fit, tells apart), decoy (neither).  Careless raters
    pick uniformly, straight-liners by their constant.  ``panel_name`` prefixes the worker ids
    and, other than the default, draws other people (:meth:`Panel.draw`): BISON verifies with different raters.
    """

    raters_per_batch: int = setting(5, low=1)
    panel_size: int = setting(40, low=1)
    bias_sd: float = setting(0.3, low=0.0)
    noise_sd: float = setting(0.6, low=0.0)
    careless_share: float = setting(0.1, low=0.0, high=1.0)
    straightline_share: float = setting(0.5, low=0.0, high=1.0)
    anchors: Mapping[str, tuple[float, float]] = setting({}, choices=type_names)  # over each type's own (TaskType.anchors)
    verify_cuts: tuple[float, float, float] = (3.5, 2.5, 1.0)
    seconds_mean: Mapping[str, float] = setting({}, low=0.0, open_range=True, choices=type_names)  # over TaskType.seconds_mean
    seconds_sigma: float = setting(0.5, low=0.0)
    careless_seconds_mean: float = setting(3.0, low=0.0, open_range=True)
    choose_cut: float = 2.5
    triple_cut: float = 2.5
    panel_name: str = DEFAULT_PANEL

    def __post_init__(self) -> None:
        """Per-type values over the defaults, and the rules across fields (types and ranges are the
        fields' own, checked by :func:`~crisscross.core.settings.settings_from_params`)."""
        object.__setattr__(self, "anchors", {**{t.name: t.anchors for t in task_types()}, **self.anchors})
        object.__setattr__(self, "seconds_mean", {**{t.name: t.seconds_mean for t in task_types()}, **self.seconds_mean})
        object.__setattr__(self, "panel_name", self.panel_name.strip())
        if not self.panel_name:
            raise RuleError("panel_name", "must not be blank")
        if self.raters_per_batch > self.panel_size:
            raise RuleError("raters_per_batch", f"must be at most panel_size={self.panel_size}, got {self.raters_per_batch}")
        for kind, (low, high) in self.anchors.items():
            if low >= high:
                raise RuleError(f"anchors.{kind}", f"must be (low, high) with low < high, got {[low, high]}")
        if any(a <= b for a, b in itertools.pairwise(self.verify_cuts)):
            raise RuleError("verify_cuts", f"must be strictly decreasing, got {list(self.verify_cuts)}")

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any] | None) -> SimulateParams:
        """Defaults overridden by ``params``, every value checked and named by its key."""
        return settings_from_params(cls, params or {}, "simulate", "")


class _UnitRows:
    """An embedding set's id index; rows are checked and normalised only when looked up."""

    def __init__(self, vectors: EmbeddingSet, name: str) -> None:
        self.name = name
        self.vectors = vectors.vectors
        self.row = vectors.row_of()
        if len(self.row) != len(vectors.ids):
            raise ValueError(f"{name}: {len(vectors.ids) - len(self.row)} repeated ids; a reference needs one row per id")

    def lookup(self, ids: list[str]) -> tuple[np.ndarray, list[str]]:
        """Unit vectors of ``ids`` (NaN rows where absent or without a direction) and why each
        missing one is missing ('' when found)."""
        rows = np.fromiter((self.row.get(i, -1) for i in ids), dtype=np.int64, count=len(ids))
        present = rows >= 0
        out = np.full((len(ids), self.vectors.shape[1]), np.nan)
        out[present] = unit_rows(np.asarray(self.vectors[rows[present]], dtype=np.float64))
        usable = np.isfinite(out).all(axis=1)
        why = [
            "" if good else f"{i} {'has a zero or non-finite vector in' if r >= 0 else 'is not in'} {self.name}"
            for i, r, good in zip(ids, rows, usable, strict=True)
        ]
        return out, why


class Reference:
    """The reference text encoder's vectors: captions, and images as their co-caption means."""

    def __init__(self, captions: EmbeddingSet, images: EmbeddingSet, name: str = "reference") -> None:
        if captions.dim != images.dim:
            raise ValueError(f"{name}: caption vectors are {captions.dim}-d but image vectors {images.dim}-d")
        self.name = name
        self._sets = {
            CAPTION_KIND: _UnitRows(captions, f"{name}/{CAPTIONS}"),
            IMAGE_KIND: _UnitRows(images, f"{name}/{COCAPTION_MEAN}"),
        }

    @classmethod
    def read(cls, embeddings: str | Path, encoder: str) -> Reference:
        """From an embed output: ``text/<encoder>/captions`` and ``text/<encoder>/cocaption_mean``."""
        root = str(embeddings)
        return cls(
            EmbeddingSet.read(set_dir(root, "text", encoder, CAPTIONS)),
            EmbeddingSet.read(set_dir(root, "text", encoder, COCAPTION_MEAN)),
            name=f"text/{encoder}",
        )

    def pair_cosines(self, kinds: tuple[str, str], a: list[str], b: list[str]) -> tuple[np.ndarray, list[str]]:
        """Cosines of ``a[i]`` and ``b[i]`` (ids of ``kinds``; NaN when a vector is missing) and why."""
        (va, why_a), (vb, why_b) = self._sets[kinds[0]].lookup(a), self._sets[kinds[1]].lookup(b)
        return np.einsum("ij,ij->i", va, vb), ["; ".join(w for w in pair if w) for pair in zip(why_a, why_b, strict=True)]

    def cosines(self, frame: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
        """Cosine of every task row's pair (NaN when a vector is missing) and why it is missing.

        Captions are their own vectors and images their co-caption means, by the id kinds of the
        task type: STS caption–caption, SIS mean–mean, SITS and VERIFY caption–mean.  A caption
        compared with its own image is part of that image's mean, which is why such pairs score
        high, as people rate them.
        """
        sides = []
        for column, side in (("id_a", 0), ("id_b", 1)):
            kinds = np.asarray([task_type(t).kinds[side] for t in frame["task_type"]], dtype=object)
            ids = frame[column].to_numpy(dtype=object)
            vectors = np.full((len(frame), self._sets[CAPTION_KIND].vectors.shape[1]), np.nan)
            why = np.full(len(frame), "", dtype=object)
            for kind, rows in self._sets.items():
                mask = kinds == kind
                vectors[mask], found_why = rows.lookup(list(ids[mask]))
                why[mask] = found_why
            sides.append((vectors, why))
        (a, why_a), (b, why_b) = sides
        details = ["; ".join(w for w in pair if w) for pair in zip(why_a, why_b, strict=True)]
        return np.einsum("ij,ij->i", a, b), details


@dataclass(frozen=True, eq=False)
class Panel:
    """The simulated raters: ids ``sim-0000`` …, with fixed bias and careless behaviour."""

    workers: tuple[str, ...]
    bias: np.ndarray  # added to every score of the rater
    careless: np.ndarray  # bool: ignores the item
    straightline: np.ndarray  # bool, careless raters only: gives ``constant`` every time
    constant: np.ndarray  # the straight-liner's score

    @classmethod
    def draw(cls, params: SimulateParams, seed: int) -> Panel:
        """Another ``panel_name`` draws other people (biases, careless raters), not the same people
        renamed: BISON's verifiers must not share the choosers' biases.  The default panel keeps
        the draw every earlier build used."""
        named = () if params.panel_name == DEFAULT_PANEL else (params.panel_name,)
        rng = generator(seed, "panel", *named)
        n = params.panel_size
        order = rng.permutation(n)
        careless_rows = order[: round(params.careless_share * n)]
        straight_rows = careless_rows[: round(params.straightline_share * len(careless_rows))]
        careless, straightline = np.zeros(n, bool), np.zeros(n, bool)
        careless[careless_rows] = True
        straightline[straight_rows] = True
        bias = rng.normal(0.0, params.bias_sd, n)
        constant = np.round(rng.uniform(SCORE_MIN, SCORE_MAX, n), SCORE_DECIMALS)
        return cls(tuple(f"{params.panel_name}-{i:04d}" for i in range(n)), bias, careless, straightline, constant)


class Simulate:
    """The ``simulate`` provider: a seeded panel judges every batch, ``raters_per_batch`` distinct
    raters per batch (see :class:`SimulateParams` for the rater model).

    Randomness comes from generators keyed by the seed and stable names: ``panel`` draws the
    raters' traits, each ``batch_id`` its raters, each (batch, item) its scores and times.  So the
    output does not depend on row order, and an item's judgments do not depend on which other
    items or batches exist.  Items lacking a reference vector are listed as unjudged with reason
    ``no-vector``.  Rows have ``source = simulate`` and ``simulated = True``; ``time`` is null
    (there is no submission clock).
    """

    def __init__(
        self, reference: Reference, seed: int, params: SimulateParams | Mapping[str, Any] | None = None, catalog: Catalog | None = None
    ) -> None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"simulate seed must be a non-negative integer, got {seed!r}")
        self.reference = reference
        self.catalog = catalog  # what BISON's raters are shown (the captions of each image)
        self.seed = seed
        self.params = params if isinstance(params, SimulateParams) else SimulateParams.from_mapping(params)
        self.panel = Panel.draw(self.params, seed)

    def latent(self, tasks: TableLike) -> np.ndarray:
        """Each task row's latent 0–5 similarity (NaN when a vector is missing)."""
        return self._latent(tasks_frame(tasks))[0]

    def _latent(self, frame: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
        cosine, details = self.reference.cosines(frame)
        low = frame["task_type"].map(lambda t: self.params.anchors[t][0]).to_numpy(np.float64)
        high = frame["task_type"].map(lambda t: self.params.anchors[t][1]).to_numpy(np.float64)
        return cosine_to_score(cosine, low, high), details

    def __call__(self, tasks: TableLike) -> Provided:
        frame = tasks_frame(tasks)
        from_pairs = {t.name: t.simulated_from_pairs for t in task_types()}
        is_bison = ~frame["task_type"].map(from_pairs).fillna(True).to_numpy(dtype=bool)
        regular, bison = frame[~is_bison], frame[is_bison]
        latent, details = self._latent(regular)
        missing = np.isnan(latent)
        judged = [self._judge(regular[~missing], latent[~missing])]
        unjudged = [unjudged_table(regular[missing], NO_VECTOR, [d for d, m in zip(details, missing, strict=True) if m])]
        if len(bison):
            made, lacking, why = self._judge_bison(bison)
            judged.append(made)
            unjudged.append(unjudged_table(bison[lacking], NO_VECTOR, why))
        judgments = pd.concat([j for j in judged if len(j)], ignore_index=True) if any(len(j) for j in judged) else judged[0]
        table = pa.concat_tables(unjudged).sort_by([("batch_id", "ascending"), ("item_id", "ascending")])
        return Provided(judgments_table(judgments), table)

    def _raters(self, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each row's raters (rows × raters, by batch) and its two standard-normal and one uniform draws."""
        p, r = self.params, self.params.raters_per_batch
        batch_raters = {
            b: np.sort(generator(self.seed, "batch", b).choice(p.panel_size, size=r, replace=False)) for b in sorted(set(rows["batch_id"]))
        }
        raters = np.array([batch_raters[b] for b in rows["batch_id"]], dtype=np.int64).reshape(len(rows), r)
        normal, unit = np.empty((2, len(rows), r)), np.empty((len(rows), r))
        for i, (batch, item) in enumerate(zip(rows["batch_id"], rows["item_id"], strict=True)):
            rng = generator(self.seed, "item", batch, item)
            normal[:, i] = rng.standard_normal((2, r))
            unit[i] = rng.random(r)
        return raters, normal, unit

    def _seconds(self, rows: pd.DataFrame, careless: np.ndarray, normal: np.ndarray) -> np.ndarray:
        p = self.params
        task_seconds = rows["task_type"].map(p.seconds_mean).to_numpy(np.float64)[:, None]
        mean_seconds = np.where(careless, p.careless_seconds_mean, task_seconds)
        return np.round(mean_seconds * np.exp(p.seconds_sigma * normal - p.seconds_sigma**2 / 2), SECONDS_DECIMALS)

    def _judge_bison(self, rows: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, list[str]]:
        """Judgments of the types whose raters weigh captions against two images (BISON's; see
        :class:`SimulateParams`, each type's ``seen_answers``), the rows that lack a vector (or captions) and why."""
        if self.catalog is None:
            kinds = ", ".join(sorted(set(rows["task_type"])))
            raise InputError(f"simulate: {kinds} tasks need the captions table: give annotate --items (the ingest output)")
        p, panel = self.params, self.panel
        raters, normal, unit = self._raters(rows)
        careless, straight = panel.careless[raters], panel.straightline[raters]
        answers = np.empty(raters.shape, dtype=object)
        lacking = np.zeros(len(rows), dtype=bool)
        why = []
        for i, row in enumerate(rows.itertuples(index=False)):
            rater = task_type(row.task_type)
            seen = rater.seen(row.item_id, row.id_a, row.id_b, self.catalog, self.seed)
            n = len(seen.captions)
            to_target, problem_t = self.reference.pair_cosines((CAPTION_KIND, IMAGE_KIND), list(seen.captions), [seen.target] * n)
            to_decoy, problem_d = self.reference.pair_cosines((CAPTION_KIND, IMAGE_KIND), list(seen.captions), [seen.decoy] * n)
            if n == 0 or np.isnan(to_target).any() or np.isnan(to_decoy).any():
                lacking[i] = True
                why.append("; ".join(filter(None, [*problem_t, *problem_d])) or f"{seen.target} has no caption in the captions table")
                continue
            rng = generator(self.seed, "bison", row.batch_id, row.item_id)
            noise = p.noise_sd * rng.standard_normal((raters.shape[1], n))
            draws = RaterDraws(
                pick=rng.integers(n + 1, size=raters.shape[1]),
                bias=panel.bias[raters[i]],
                constant=panel.constant[raters[i]],
                normal=normal[0, i],
                unit=unit[i],
            )
            attentive, sloppy, lined = rater.seen_answers(seen, to_target - to_decoy, to_target, draws, noise, p)
            answers[i] = np.where(careless[i], np.where(straight[i], lined, sloppy), attentive)
        kept = ~lacking
        r = raters.shape[1]
        judged = rows[kept]
        repeated = {c: np.repeat(judged[c].to_numpy(dtype=object), r) for c in ("item_id", "task_type", "id_a", "id_b", "batch_id")}
        frame = pd.DataFrame(
            {
                **repeated,
                "worker": np.asarray(panel.workers, dtype=object)[raters[kept]].ravel(),
                "score": np.nan,
                "answer": answers[kept].ravel(),
                "seconds": self._seconds(judged, careless[kept], normal[1][kept]).ravel(),
                "time": None,
                "source": SOURCE_SIMULATED,
                "simulated": True,
            }
        )
        return frame, lacking, why

    def _judge(self, rows: pd.DataFrame, latent: np.ndarray) -> pd.DataFrame:
        """``raters_per_batch`` judgments of every row, by its batch's raters (arrays are rows × raters)."""
        p, panel, r = self.params, self.panel, self.params.raters_per_batch
        raters, normal, unit = self._raters(rows)

        attentive = np.clip(latent[:, None] + panel.bias[raters] + p.noise_sd * normal[0], SCORE_MIN, SCORE_MAX)
        uniform = SCORE_MIN + (SCORE_MAX - SCORE_MIN) * unit
        careless = panel.careless[raters]
        score = np.where(careless, np.where(panel.straightline[raters], panel.constant[raters], uniform), attentive)
        score = np.round(score, SCORE_DECIMALS)
        stored_score, stored_answer = np.empty(score.shape), np.empty(score.shape, dtype=object)
        kinds = rows["task_type"].to_numpy(dtype=object)
        for kind in pd.unique(kinds):
            of_kind = kinds == kind
            stored_score[of_kind], stored_answer[of_kind] = task_type(kind).simulated_answers(score[of_kind], p.verify_cuts)
        seconds = self._seconds(rows, careless, normal[1])
        repeated = {c: np.repeat(rows[c].to_numpy(dtype=object), r) for c in ("item_id", "task_type", "id_a", "id_b", "batch_id")}
        return pd.DataFrame(
            {
                **repeated,
                "worker": np.asarray(panel.workers, dtype=object)[raters].ravel(),
                "score": stored_score.ravel(),
                "answer": stored_answer.ravel(),
                "seconds": seconds.ravel(),
                "time": None,
                "source": SOURCE_SIMULATED,
                "simulated": True,
            }
        )


def simulate_from_embeddings(
    embeddings: str | Path,
    encoder: str,
    seed: int,
    params: SimulateParams | Mapping[str, Any] | None = None,
    items: str | Path | None = None,
) -> Simulate:
    """The ``simulate`` provider with ``encoder``'s text vectors from an embed output as reference
    (and the captions table of ``items``, an ingest output, for BISON's task types)."""
    return Simulate(Reference.read(embeddings, encoder), seed, params, load_catalog(str(items)) if items is not None else None)
