"""Machine triage and adaptive replication together, against today's design, on the demo and on the Karpathy test split.

**The combined campaign.** Per rating type (STS, SIS, SITS), people rate a seeded audit
(:func:`crisscross.campaign.triage.audit_sample`, 10%) first; the triage
(:func:`crisscross.campaign.triage.triage`, default settings: the signals of ``use-m3`` and
``bow-glove50``, error ≤ 1.5% at 95%) fits on the audit's labels and the machine labels the pairs
beyond its certified cuts; people rate the audit and every other pair.  Every pair people rate
stops under the ``threshold`` rule of :mod:`crisscross.campaign.replication` (from two judgments,
``alpha`` 0.1, ceiling 5; one rater's sd is measured in the run from the 2,863 SIS pairs CxC's test
release publishes twice, 0.849, as ``adaptive_replication`` does, and serves every type).  The
audit's labels are the adaptive ones too.  VERIFY has no machine signals, so it goes to people whole; the
library has no stop rule for its four answers, so on the demo it stops by *curtailment*, a rule
of this benchmark only: an item stops as soon as no answers still to come out of five could change
whether its plurality answer (ties to the answer listed first, as ``majority-vote`` breaks them) is
"100% yes" / "partially yes".

**The reference, in the same run, is today's design**: every pair rated by five raters (CxC), every
VERIFY candidate answered by five (the demo's ECCV round, ``tasks.replicas``).  Counted: judgments of
rated items, not of gold items (quality control, the same per batch under both designs); the ratios
are combined ÷ fixed.  ``triage only`` (every pair people get × 5) and ``adaptive only`` (the stop
rule on every pair, no triage) are shown beside it.

**(a) The demo** (``build/``, simulated raters): round one (STS, SIS), the SITS round and the VERIFY
round, with the panel's own judgments in table order (they carry no times, so that is their
arrival order).  The stop rule sees every judgment as it arrives; the build's rater QC
(``raters.csv``: excluded raters) then drops those of excluded raters from the used ones, as
``aggregate`` would, and an item left with none gets its five (counted).  The fixed truth is the
build's ``rated.parquet`` (checked against the kept judgments).  The SITS candidates and the VERIFY
candidates are taken as built (a different round one could have derived other SITS pairs).

**(b) The Karpathy test split**: CxC's test release (132,734 pairs) publishes only five-rater means,
so each pair gets the calibrated panel of ``adaptive_replication`` (the same draws: same seed, same
order, so its figures are that benchmark's): five simulated raters around the pair's stretched
``agg_score``; the fixed truth is their mean, ``retest`` a second independent five-rater panel and
``CxC`` the real ``agg_score``.  The captions are ingested and embedded by the stage commands
(``use-m3``, ``bow-glove50``, ``minilm``).  The ECCV round: offline there are only ECCV Caption's
final positives (the ``eccv-caption`` package), not its candidates, answers or raters, so its
VERIFY judgments are not counted and its verification is kept as published; the positives change
only through the CxC SITS positives they contain (every CxC SITS positive of an ECCV query is an
ECCV positive): a pair the combined SITS truth adds is added, one it drops is removed unless it is
an original COCO pair (the package does not say which of them ECCV's raters verified too, so this
is the most the change can remove).

**Figures under both truths.** CxC's bootstrap Spearman (:func:`crisscross.scoring.paired.bootstrap_spearman`,
1,000 samples; ``--quick`` 200) of each embedded encoder: STS by the caption vectors, SIS by the
co-caption means (and ``efficientnet-lite0`` on the demo, whose 97 images all have pixels; the
Karpathy split has pixels for 370 of 5,000 images, so no image encoder there), SITS by the
leave-one-out text proxy (:class:`crisscross.candidates.annotators.TextProxyModel`).  The combined
truth scores every pair: people's adaptive mean where they rated it, the triage's *expected score*
(a ridge regression of the audit's scores on the same signals) where the machine labelled it; its
Spearman is over every pair, as the fixed truth's.  ``people's pairs`` scores both truths on the
pairs people rated alone, which separates the replication's effect from the machine's scores.  The CI is the fixed truth's 95% normal interval (mean ± 1.96
bootstrap sd); ``in`` says whether the combined figure lies inside it.  ECCV: mAP@R and R-Precision
(R = positives in the gallery) of the text proxies over the ECCV queries (the demo's filter
queries; the package's 1,261 image and 1,332 caption queries), with a 1,000-sample bootstrap over
queries for the fixed truth's CI.  The triage's signals are ``use-m3``'s and ``bow-glove50``'s
cosines and the demo panel's latent similarity is ``use-m3``'s: truths the machine helped make
favour those encoders; ``minilm`` (Karpathy) takes no part in either.

``--quick``: 5,000 Karpathy pairs per type (a seeded draw), no ``minilm``, 200 bootstrap samples;
an audit of 500 pairs per type cannot certify a cut, so the machine labels nothing there.
``--cache DIR`` keeps the Karpathy ingest and embed outputs there for the next run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import DEMO_BUILD, save_result
from benchmarks.adaptive_replication import calibrated_means, simulate
from benchmarks.machine_triage import CAPTIONS, SHARED_DATA
from crisscross.aggregate.positives import variant_positives, variant_ranks
from crisscross.annotate.providers import load_cxc_release
from crisscross.campaign.replication import THRESHOLD, ReplicationSettings, rater_sd_from_repeats, replication_decisions
from crisscross.campaign.signals import TextSpace
from crisscross.campaign.triage import LEFT_TO_PEOPLE, POSITIVE, TriageSettings, triage
from crisscross.candidates.annotators import text_proxy_model
from crisscross.core import io as cio
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.core.rng import generator
from crisscross.embed.sets import CAPTIONS as CAPTION_SET
from crisscross.embed.sets import COCAPTION_MEAN, IMAGES, EmbeddingSet, set_dir
from crisscross.formats.eccv import DIRECTIONS, I2T, T2I
from crisscross.ingest.records import caption_images
from crisscross.pipelines import embed, ingest
from crisscross.scoring.models import EmbeddingModel, Gallery
from crisscross.scoring.paired import bootstrap_spearman
from crisscross.scoring.retrieval import PositiveRanks, map_at_r, r_precision
from crisscross.scoring.truths import load_eccv
from crisscross.tasktypes.names import POSITIVE_THRESHOLDS, RATING_TYPES, SIS, SITS, STS, VERIFY, VERIFY_ANSWERS, VERIFY_POSITIVE

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

NAME = "adaptive_campaign"
REPLICAS = 5  # today's design: five raters per pair (CxC), five answers per candidate (the demo's ECCV round)
ALPHA = 0.1
SEED = 0
BOOTSTRAP = 1000
QUICK_BOOTSTRAP = 200
QUICK_PAIRS = 5000
Z95 = 1.959963984540054
BUILD = Path(__file__).resolve().parents[1] / "build"
ENCODERS = ("use-m3", "bow-glove50", "minilm")  # Karpathy: embedded and evaluated; the triage reads TriageSettings().encoders
QUICK_ENCODERS = ("use-m3", "bow-glove50")
DEMO_IMAGE_ENCODERS = ("efficientnet-lite0",)
ECCV = "ECCV"  # the i2t / t2i positives' row in the tables

Scorer = Callable[[Sequence[str], Sequence[str]], "np.ndarray"]


def run(args: argparse.Namespace) -> None:
    logging.getLogger("crisscross").setLevel(logging.WARNING)
    started = time.perf_counter()
    samples = QUICK_BOOTSTRAP if args.quick else BOOTSTRAP
    release = load_cxc_release(SHARED_DATA / "cxc", "test")
    judgments = release.judgments.to_pandas()
    sis = judgments[judgments["task_type"] == SIS]
    rater_sd = rater_sd_from_repeats(sis[["item_id", "score"]], REPLICAS)
    replication = ReplicationSettings(rule=THRESHOLD, alpha=ALPHA, rater_sd=dict.fromkeys(RATING_TYPES, rater_sd))
    triage_settings = TriageSettings()
    print(
        f"  one rater's sd from the SIS pairs CxC's test release publishes twice: {rater_sd:.3f}; threshold rule, alpha {ALPHA:g}",
        flush=True,
    )
    result: dict[str, Any] = {"quick": args.quick, "rater_sd": rater_sd, "alpha": ALPHA, "replicas": REPLICAS, "seed": SEED}
    result["settings"] = {"triage": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(triage_settings).items()}}
    result["bootstrap_samples"] = samples
    sets = {}
    with contextlib.ExitStack() as stack:
        cache = (
            Path(args.cache)
            if getattr(args, "cache", None)
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="crisscross-bench-")))
        )
        builds = (("demo", demo), ("karpathy-test", karpathy))
        if not (BUILD / "positives" / "positives.parquet").is_file():
            print(f"  demo: skipped, no demo build at {BUILD}: build it with `{DEMO_BUILD}` in the project root", flush=True)
            builds = builds[1:]
        for name, build in builds:
            began = time.perf_counter()
            sets[name] = build(replication, triage_settings, samples, args, cache, release)
            sets[name]["seconds"] = round(time.perf_counter() - began, 1)
            print(f"  {name}: {sets[name]['seconds']:.0f}s", flush=True)
    for name, part in sets.items():
        print(f"\n{name}: human judgments (combined = triage + adaptive replication; fixed = 5 per pair)")
        print(judgments_table(part["judgments"]))
        print(f"\n{name}: positives and labels (fixed → combined)")
        print(positives_table(part["positives"]))
        print(f"\n{name}: bootstrap Spearman ×100, fixed truth (95% CI) against the combined campaign's")
        print(spearman_table(part["spearman"]))
        print(f"\n{name}: ECCV positives, mAP@R and R-Precision ×100 over the ECCV queries")
        print(eccv_table(part["eccv"]))
    summary = [summary_row(name, part) for name, part in sets.items()]
    print("\nsummary (ratios against the fixed design in the same run)")
    print(summary_table(summary))
    result.update({"sets": {k: {key: v for key, v in part.items() if key != "frame"} for k, part in sets.items()}, "summary": summary})
    path = save_result(NAME, result)
    print(f"written to {path} ({time.perf_counter() - started:.0f}s)")


# --------------------------------------------------------------------------- (a) the demo


def demo(replication: ReplicationSettings, settings: TriageSettings, samples: int, args, cache: Path, release) -> dict[str, Any]:
    import numpy as np
    import pandas as pd

    del args, cache, release
    items = BUILD / "items"
    embeddings = str(BUILD / "embeddings")
    captions = cio.read_parquet(str(items / "captions.parquet"))
    image_of = caption_images(captions)
    rounds = {
        "round one": (BUILD / "tasks", BUILD / "judgments", BUILD / "rated"),
        "sits": (BUILD / "sits" / "tasks", BUILD / "sits" / "judgments", BUILD / "sits" / "rated"),
        "verify": (BUILD / "verify" / "tasks", BUILD / "verify" / "judgments", BUILD / "verify" / "rated"),
    }
    frames, checks, panel_sd = [], {}, {}
    for name, (tasks_dir, judgments_dir, rated_dir) in rounds.items():
        tasks = cio.read_parquet(str(tasks_dir / "tasks.parquet")).to_pandas()
        gold = set(tasks.loc[tasks["gold"] != "", "item_id"])
        j = cio.read_parquet(str(judgments_dir / "judgments.parquet")).to_pandas()
        j = j[~j["item_id"].isin(gold)].reset_index(drop=True)  # table order: the simulated judgments carry no times
        raters = pd.read_csv(rated_dir / "raters.csv")
        excluded = set(zip(raters.loc[raters["excluded"], "worker"], raters.loc[raters["excluded"], "task_type"], strict=True))
        j["kept"] = [(w, t) not in excluded for w, t in zip(j["worker"], j["task_type"], strict=True)]
        rated = cio.read_parquet(str(rated_dir / "rated.parquet")).to_pandas().set_index("item_id")
        if name == "verify":
            frame, mismatches = verify_round(j, rated)
        else:
            frame, mismatches = rating_round(j, rated, replication)
            kept = j[j["kept"]]
            for kind, group in kept.groupby("task_type"):
                panel_sd[kind] = float(np.sqrt(group.groupby("item_id")["score"].var(ddof=1).mean()))
        checks[name] = mismatches
        frames.append(frame)
    pairs = pd.concat(frames, ignore_index=True)
    rated_pairs = pairs[pairs["task_type"].isin(RATING_TYPES)]
    spaces = [TextSpace.read(embeddings, encoder, image_of) for encoder in settings.encoders]
    fits = combine(pairs, rated_pairs, spaces, image_of, settings)
    print(f"  demo: fixed truth rebuilt from the kept judgments, mismatches per round {checks}; panel sd (kept) {panel_sd}", flush=True)
    encoders = tuple(sorted(p.name for p in (Path(embeddings) / "text").iterdir() if p.is_dir()))
    models = rating_models(embeddings, encoders, DEMO_IMAGE_ENCODERS, image_of)
    gallery = Gallery.from_items(cio.read_parquet(str(items / "images.parquet")), captions)
    queries = cio.read_parquet(str(BUILD / "filter" / "queries.parquet")).to_pandas()
    query_ids = {d: tuple(queries.loc[queries["direction"] == d, "query_id"]) for d in DIRECTIONS}
    verify = pairs[pairs["task_type"] == VERIFY]
    sits = pairs[pairs["task_type"] == SITS]
    original = {(image, caption) for caption, image in gallery.caption_image.items()}

    def eccv_pairs(verified: pd.Series, sits_positive: pd.Series) -> frozenset[tuple[str, str]]:
        """verified ∪ original ∪ the SITS round's positives, as the positives stage merges them."""
        return frozenset(
            set(zip(verify.loc[verified, "id_a"], verify.loc[verified, "id_b"], strict=True))
            | original
            | set(zip(sits.loc[sits_positive, "id_b"], sits.loc[sits_positive, "id_a"], strict=True))
        )

    fixed = eccv_pairs(verify["fixed_pos"], sits["fixed_pos"])
    combined = eccv_pairs(verify["combined_pos"], sits["combined_pos"])
    built = cio.read_parquet(str(BUILD / "positives" / "positives.parquet")).to_pandas()
    built_pairs = set(zip(built["image_id"], built["caption_id"], strict=True))
    print(
        f"  demo: ECCV positives rebuilt {len(fixed):,}, the positives stage's {len(built_pairs):,}, same: {fixed == built_pairs}",
        flush=True,
    )
    proxies = {encoder: text_proxy_model(encoder, embeddings, gallery.caption_image) for encoder in encoders}
    return {
        "frame": pairs,
        "fixed_rebuild_mismatches": checks,
        "panel_sd_kept": panel_sd,
        "triage": fits,
        "judgments": judgment_rows(pairs),
        "positives": positive_rows(pairs) + eccv_positive_rows(fixed, combined, query_ids),
        "spearman": spearman_rows(pairs, models, samples),
        "eccv": eccv_rows(proxies, gallery, query_ids, fixed, combined, samples),
    }


def rating_round(j: pd.DataFrame, rated: pd.DataFrame, replication: ReplicationSettings) -> tuple[pd.DataFrame, int]:
    """One rating round's items: the fixed truth, and where the stop rule stops on the judgments as they arrive."""
    import numpy as np

    decisions = replication_decisions(j[["item_id", "task_type", "score"]], REPLICAS, replication).set_index("item_id")
    asked, kept_used = after_qc(j, decisions["used"])
    mean_kept = j[j["kept"]].groupby("item_id")["score"].mean()
    adaptive_mean = j[kept_used].groupby("item_id")["score"].mean()
    frame = rated[["task_type", "id_a", "id_b"]].assign(
        fixed_mean=rated["agg_score"].astype(float),
        fixed_pos=rated["positive"].astype(bool),
        fixed_judgments=j.groupby("item_id").size().reindex(rated.index).to_numpy(),
        adaptive_used=asked.reindex(rated.index).to_numpy(),
        adaptive_mean=adaptive_mean.reindex(rated.index).to_numpy(),
    )
    frame["adaptive_pos"] = frame["adaptive_mean"] >= frame["task_type"].map(POSITIVE_THRESHOLDS)
    frame["topped_up"] = (asked > decisions["used"]).reindex(rated.index).to_numpy()
    mismatches = int((~np.isclose(mean_kept.reindex(rated.index).to_numpy(), frame["fixed_mean"].to_numpy(), atol=1e-9)).sum())
    return frame.rename_axis("item_id").reset_index(), mismatches


def after_qc(j: pd.DataFrame, used: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Judgments asked per item (the first ``used`` in arrival order; an item none of whose used
    judgments survives rater QC gets them all) and the mask of the used judgments QC keeps."""
    rank = j.groupby("item_id", sort=False).cumcount() + 1
    limit = j["item_id"].map(used)
    inside = rank <= limit
    survivors = (inside & j["kept"]).groupby(j["item_id"]).sum()
    empty = set(survivors.index[survivors == 0])
    inside = inside | j["item_id"].isin(empty)
    asked = inside.groupby(j["item_id"]).sum()
    return asked, inside & j["kept"]


def plurality_positive(counts: np.ndarray) -> bool:
    """Whether the most frequent answer (ties to the one listed first in VERIFY_ANSWERS) is a yes."""
    import numpy as np

    return VERIFY_ANSWERS[int(np.argmax(counts))] in VERIFY_POSITIVE


def curtailed(answers: Sequence[str]) -> int:
    """Answers needed until none still to come (of ``REPLICAS``) could change the label.  Piling all
    of them on one answer is the best any completion can do for that answer, so four checks decide."""
    import numpy as np

    counts = np.zeros(len(VERIFY_ANSWERS), dtype=np.int64)
    for n, answer in enumerate(answers, start=1):
        counts[VERIFY_ANSWERS.index(answer)] += 1
        left = REPLICAS - n
        if left <= 0 or len({plurality_positive(counts + left * np.eye(len(counts), dtype=np.int64)[k]) for k in range(len(counts))}) == 1:
            return n
    return len(answers)


def verify_round(j: pd.DataFrame, rated: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The VERIFY round: the fixed truth, and curtailment on the answers as they arrive."""
    import numpy as np
    import pandas as pd

    assert set(VERIFY_ANSWERS[:2]) == set(VERIFY_POSITIVE)
    used = j.groupby("item_id", sort=False)["answer"].agg(lambda a: curtailed(list(a)))
    asked, kept_used = after_qc(j, used)
    seen = j.groupby("item_id", sort=False).cumcount() + 1 <= j["item_id"].map(used)

    def label(mask: pd.Series) -> pd.Series:
        codes = j.loc[mask, "answer"].map(VERIFY_ANSWERS.index)
        counts = pd.crosstab(j.loc[mask, "item_id"], codes).reindex(columns=range(len(VERIFY_ANSWERS)), fill_value=0)
        return pd.Series([plurality_positive(row) for row in counts.to_numpy()], index=counts.index)

    frame = rated[["task_type", "id_a", "id_b"]].assign(
        fixed_mean=np.nan,
        fixed_pos=rated["positive"].astype(bool),
        fixed_judgments=j.groupby("item_id").size().reindex(rated.index).to_numpy(),
        adaptive_used=asked.reindex(rated.index).to_numpy(),
        adaptive_mean=np.nan,
        adaptive_pos=label(kept_used).reindex(rated.index).to_numpy().astype(bool),
        topped_up=(asked > used).reindex(rated.index).to_numpy(),
    )
    mismatches = int((label(j["kept"]).reindex(rated.index).to_numpy() != frame["fixed_pos"].to_numpy()).sum())
    every = pd.Series(True, index=j.index)
    if (label(seen).reindex(rated.index) != label(every).reindex(rated.index)).any():
        raise AssertionError("curtailment changed a label on the answers it saw")  # it is exact before rater QC
    return frame.rename_axis("item_id").reset_index(), mismatches


def combine(pairs: pd.DataFrame, rated: pd.DataFrame, spaces, image_of, settings: TriageSettings) -> dict[str, Any]:
    """Triage on the rating pairs, fitted on the audit's adaptive labels; fills ``audit``, ``machine``,
    ``machine_pos`` and the combined campaign's columns of ``pairs`` (in place)."""
    import numpy as np

    people_positive = dict(zip(rated["item_id"], rated["adaptive_pos"].astype(bool), strict=True))  # triage reads the audit's only
    people_score = dict(zip(rated["item_id"], rated["adaptive_mean"], strict=True))
    began = time.perf_counter()
    done = triage(rated[["item_id", "task_type", "id_a", "id_b"]], people_positive, spaces, image_of, settings, SEED, people_score)
    seconds = time.perf_counter() - began
    d = done.decisions.set_index("item_id").reindex(pairs["item_id"])
    pairs["audit"] = d["audit"].eq(True).to_numpy()
    label = d["label"].fillna(LEFT_TO_PEOPLE).astype(int).to_numpy()
    pairs["machine"] = ~pairs["audit"].to_numpy() & (label != LEFT_TO_PEOPLE)
    pairs["machine_pos"] = label == POSITIVE
    machine = pairs["machine"].to_numpy()
    pairs["combined_pos"] = np.where(machine, pairs["machine_pos"], pairs["adaptive_pos"]).astype(bool)
    pairs["combined_mean"] = np.where(machine, d["expected_score"].to_numpy(), pairs["adaptive_mean"])  # the machine's: its expected score
    pairs["combined_judgments"] = np.where(machine, 0, pairs["adaptive_used"])
    print(f"  triage of {len(rated):,} pairs {seconds:.1f}s: the machine labels {int(machine.sum()):,}", flush=True)
    return {kind: [fit.summary() for fit in fits] for kind, fits in sorted(done.turns.items())} | {"seconds": round(seconds, 2)}


# --------------------------------------------------------------------------- (b) the Karpathy test split


def embedded(encoders: tuple[str, ...], root: Path) -> tuple[Path, Path]:
    """The test split's captions ingested and embedded by the stage commands (kept in ``root`` when it has them)."""
    import json

    items, embeddings = root / "items", root / "embeddings"
    done = embeddings / "report.json"
    if done.is_file() and all((embeddings / "text" / e / CAPTION_SET / "vectors.npy").is_file() for e in encoders):
        return items, embeddings
    root.mkdir(parents=True, exist_ok=True)
    params = root / "params.json"
    params.write_text(json.dumps({"embed": {"text_encoders": list(encoders), "image_encoders": [], "batch_size": 256}}))
    with contextlib.redirect_stdout(io.StringIO()):
        ingest.main(["--in", str(CAPTIONS["test"]), "--out", str(items)])
        embed.main(["--in", str(items), "--out", str(embeddings), "--params", str(params)])
    return items, embeddings


def karpathy(replication: ReplicationSettings, settings: TriageSettings, samples: int, args, cache: Path, release) -> dict[str, Any]:
    import numpy as np
    import pandas as pd

    encoders = QUICK_ENCODERS if args.quick else ENCODERS
    began = time.perf_counter()
    items, embeddings = embedded(encoders, cache / "karpathy-test")
    print(f"  karpathy-test: ingest + embed ({', '.join(encoders)}) {time.perf_counter() - began:.0f}s", flush=True)
    judgments = release.judgments.to_pandas()
    ids = release.items.to_pandas().drop_duplicates("item_id").set_index("item_id")[["task_type", "id_a", "id_b"]]
    scores = judgments.groupby(["task_type", "item_id"])["score"].mean()
    rng = np.random.default_rng(SEED)  # adaptive_replication's generator: the same panel, draw for draw
    frames, stretches, decide_s = [], {}, 0.0
    for kind in RATING_TYPES:
        real = scores[kind]
        if args.quick:
            real = real.iloc[np.sort(generator(SEED, "quick", kind).choice(len(real), size=QUICK_PAIRS, replace=False))]
        values = real.to_numpy(np.float64)
        true_mean, stretches[kind] = calibrated_means(values, replication.rater_sd[kind], rng)
        panel = simulate(true_mean, replication.rater_sd[kind], rng)
        retest = simulate(true_mean, replication.rater_sd[kind], rng)
        long = pd.DataFrame({"item_id": np.repeat(real.index.to_numpy(), REPLICAS), "task_type": kind, "score": panel.ravel()})
        t0 = time.perf_counter()
        decisions = replication_decisions(long, REPLICAS, replication).set_index("item_id").reindex(real.index)
        decide_s += time.perf_counter() - t0
        threshold = POSITIVE_THRESHOLDS[kind]
        frame = ids.reindex(real.index).assign(
            real_mean=values,
            retest_mean=retest.mean(axis=1),
            fixed_mean=panel.mean(axis=1),
            fixed_judgments=REPLICAS,
            adaptive_used=decisions["used"].to_numpy(),
            adaptive_mean=decisions["mean"].to_numpy(),
            topped_up=False,
        )
        frame["fixed_pos"] = frame["fixed_mean"] >= threshold
        frame["adaptive_pos"] = frame["adaptive_mean"] >= threshold
        frames.append(frame.rename_axis("item_id").reset_index())
    pairs = pd.concat(frames, ignore_index=True)
    print(f"  karpathy-test: stop rule on {len(pairs):,} pairs {decide_s:.0f}s", flush=True)
    captions = cio.read_parquet(str(items / "captions.parquet"))
    image_of = caption_images(captions)
    spaces = [TextSpace.read(str(embeddings), encoder, image_of) for encoder in settings.encoders]
    fits = combine(pairs, pairs, spaces, image_of, settings)
    agreement_real = {
        kind: float(((g["real_mean"] >= POSITIVE_THRESHOLDS[kind]) == g["fixed_pos"]).mean()) for kind, g in pairs.groupby("task_type")
    }
    gallery = Gallery.from_items(cio.read_parquet(str(items / "images.parquet")), captions)
    truth, _ = load_eccv()
    query_ids = {I2T: tuple(sorted({q for q, _ in truth.i2t})), T2I: tuple(sorted({q for q, _ in truth.t2i}))}
    fixed = frozenset(truth.i2t) | frozenset((image, caption) for caption, image in truth.t2i)
    sits = pairs[pairs["task_type"] == SITS]
    original = {(image, caption) for caption, image in image_of.items()}
    before = set(zip(sits.loc[sits["fixed_pos"], "id_b"], sits.loc[sits["fixed_pos"], "id_a"], strict=True))
    after = set(zip(sits.loc[sits["combined_pos"], "id_b"], sits.loc[sits["combined_pos"], "id_a"], strict=True))
    images, captions_q = set(query_ids[I2T]), set(query_ids[T2I])
    dropped = {p for p in (before - after) - original if p in fixed}
    added = {p for p in after - before if p[0] in images or p[1] in captions_q}
    combined = (fixed - dropped) | added
    print(
        f"  karpathy-test: ECCV positive (image, caption) pairs {len(fixed):,}; the combined SITS truth drops {len(dropped):,}, adds {len(added):,}",
        flush=True,
    )
    models = rating_models(str(embeddings), encoders, (), image_of)
    proxies = {encoder: text_proxy_model(encoder, str(embeddings), gallery.caption_image) for encoder in encoders}
    return {
        "frame": pairs,
        "encoders": list(encoders),
        "stretch": stretches,
        "decide_s": round(decide_s, 1),
        "fixed_agrees_with_cxc_labels": agreement_real,
        "triage": fits,
        "eccv_change": {"dropped": len(dropped), "added": len(added)},
        "judgments": judgment_rows(pairs),
        "positives": positive_rows(pairs) + eccv_positive_rows(fixed, combined, query_ids),
        "spearman": spearman_rows(pairs, models, samples),
        "eccv": eccv_rows(proxies, gallery, query_ids, fixed, combined, samples),
    }


# --------------------------------------------------------------------------- measures


def by_type(pairs: pd.DataFrame) -> Iterable[tuple[str, pd.DataFrame]]:
    kinds = [k for k in (*RATING_TYPES, VERIFY) if (pairs["task_type"] == k).any()]
    yield from ((k, pairs[pairs["task_type"] == k]) for k in kinds)
    yield "all", pairs


def judgment_rows(pairs: pd.DataFrame) -> list[dict[str, Any]]:
    rows = []
    for kind, p in by_type(pairs):
        people = ~p["machine"]
        fixed = int(p["fixed_judgments"].sum())
        row = {
            "type": kind,
            "pairs": len(p),
            "audit": int(p["audit"].sum()),
            "machine": int(p["machine"].sum()),
            "fixed": fixed,
            "triage_only": int(p.loc[people, "fixed_judgments"].sum()),
            "adaptive_only": int(p["adaptive_used"].sum()),
            "combined": int(p["combined_judgments"].sum()),
            "topped_up": int(p["topped_up"].sum()),
        }
        rows.append(row | {f"{k}_ratio": row[k] / fixed for k in ("triage_only", "adaptive_only", "combined")})
    return rows


def positive_rows(pairs: pd.DataFrame) -> list[dict[str, Any]]:
    rows = []
    for kind, p in by_type(pairs):
        fixed, combined, machine = p["fixed_pos"].to_numpy(), p["combined_pos"].to_numpy(), p["machine"].to_numpy()
        rows.append(
            {
                "type": kind,
                "fixed": int(fixed.sum()),
                "combined": int(combined.sum()),
                "kept": float((fixed & combined).sum() / max(fixed.sum(), 1)),
                "added": int((combined & ~fixed).sum()),
                "agree": float((fixed == combined).mean()),
                "machine": int(machine.sum()),
                "machine_agree": float((fixed == combined)[machine].mean()) if machine.any() else None,
                "people_agree": float((fixed == combined)[~machine].mean()),
            }
        )
    return rows


def eccv_positive_rows(fixed: frozenset, combined: frozenset, query_ids: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """The positives of the ECCV queries: image queries' (image, caption) pairs and caption queries'."""
    images, captions = set(query_ids[I2T]), set(query_ids[T2I])

    def of_queries(pairs: frozenset) -> set[tuple[str, str, str]]:
        return {(I2T, i, c) for i, c in pairs if i in images} | {(T2I, c, i) for i, c in pairs if c in captions}

    f, c = of_queries(fixed), of_queries(combined)
    return [
        {
            "type": ECCV,
            "fixed": len(f),
            "combined": len(c),
            "kept": len(f & c) / max(len(f), 1),
            "added": len(c - f),
            "agree": None,
            "machine": None,
            "machine_agree": None,
            "people_agree": None,
        }
    ]


def rating_models(
    embeddings: str, encoders: Sequence[str], image_encoders: Sequence[str], image_of: Mapping[str, str]
) -> dict[str, dict[str, Scorer]]:
    """Per rating type, each model's pair scorer: caption vectors (STS), co-caption means and image
    encoders (SIS), the leave-one-out text proxy (SITS)."""
    out: dict[str, dict[str, Scorer]] = {STS: {}, SIS: {}, SITS: {}}
    for encoder in encoders:
        text = EmbeddingModel(encoder, {CAPTION_KIND: EmbeddingSet.read(set_dir(embeddings, "text", encoder, CAPTION_SET))}, joint=False)
        means = EmbeddingModel(encoder, {IMAGE_KIND: EmbeddingSet.read(set_dir(embeddings, "text", encoder, COCAPTION_MEAN))}, joint=False)
        proxy = text_proxy_model(encoder, embeddings, image_of)
        out[STS][encoder] = lambda a, b, m=text: m.pair_scores(CAPTION_KIND, list(a), CAPTION_KIND, list(b))
        out[SIS][f"{encoder} (means)"] = lambda a, b, m=means: m.pair_scores(IMAGE_KIND, list(a), IMAGE_KIND, list(b))
        out[SITS][f"{encoder} (proxy)"] = lambda a, b, m=proxy: m.pair_scores(CAPTION_KIND, list(a), IMAGE_KIND, list(b))
    for encoder in image_encoders:
        model = EmbeddingModel(encoder, {IMAGE_KIND: EmbeddingSet.read(set_dir(embeddings, "image", encoder, IMAGES))}, joint=False)
        out[SIS][encoder] = lambda a, b, m=model: m.pair_scores(IMAGE_KIND, list(a), IMAGE_KIND, list(b))
    return out


def spearman_rows(pairs: pd.DataFrame, models: Mapping[str, Mapping[str, Scorer]], samples: int) -> list[dict[str, Any]]:
    """CxC's bootstrap Spearman of every model under the fixed truth and the combined campaign's
    (every pair; a machine-labelled pair by the triage's expected score), and both on the pairs
    people rated alone; the same draws for every truth of one pair set."""

    def boot(p: pd.DataFrame, human: str, scores: np.ndarray, kind: str) -> tuple[float, float]:
        mean, sd = bootstrap_spearman(
            p["id_a"].to_numpy(), p["id_b"].to_numpy(), p[human].to_numpy(), scores, samples, generator(SEED, "spearman", kind)
        )
        return 100 * mean, 100 * sd

    rows = []
    for kind in RATING_TYPES:
        p = pairs[pairs["task_type"] == kind]
        people = ~p["machine"].to_numpy()
        for name, scorer in models.get(kind, {}).items():
            scores = scorer(p["id_a"], p["id_b"])
            fixed, sd = boot(p, "fixed_mean", scores, kind)
            combined, _ = boot(p, "combined_mean", scores, kind)
            rated, _ = boot(p[people], "combined_mean", scores[people], kind) if not people.all() else (combined, sd)
            same, same_sd = boot(p[people], "fixed_mean", scores[people], kind) if not people.all() else (fixed, sd)
            row = {
                "type": kind,
                "model": name,
                "pairs": len(p),
                "people_pairs": int(people.sum()),
                "fixed": fixed,
                "fixed_sd": sd,
                "combined": combined,
                "delta": combined - fixed,
                "within": bool(abs(combined - fixed) <= Z95 * sd),
                "same_pairs": same,
                "same_pairs_sd": same_sd,
                "people_pairs_combined": rated,
                "delta_same_pairs": rated - same,
                "within_same_pairs": bool(abs(rated - same) <= Z95 * same_sd),
            }
            if "real_mean" in p:
                row["cxc"] = boot(p, "real_mean", scores, kind)[0]
                row["retest_delta"] = boot(p, "retest_mean", scores, kind)[0] - fixed
            rows.append(row)
    return rows


def per_query(ranked: PositiveRanks) -> dict[str, np.ndarray]:
    """mAP@R and R-Precision of each query (NaN: no positive in the gallery), by the library's functions on one query at a time."""
    import numpy as np

    out = {"mAP@R": np.full(len(ranked.counts), np.nan), "R-Precision": np.full(len(ranked.counts), np.nan)}
    for q in range(len(ranked.counts)):
        lo, hi = int(ranked.indptr[q]), int(ranked.indptr[q + 1])
        if hi > lo:
            one = PositiveRanks(np.asarray([0, hi - lo], dtype=np.int64), ranked.ranks[lo:hi])
            out["mAP@R"][q], out["R-Precision"][q] = map_at_r(one)[0], r_precision(one)[0]
    assert np.isclose(np.nanmean(out["mAP@R"]), map_at_r(ranked)[0]) and np.isclose(np.nanmean(out["R-Precision"]), r_precision(ranked)[0])
    return out


def eccv_rows(models, gallery: Gallery, query_ids, fixed: frozenset, combined: frozenset, samples: int) -> list[dict[str, Any]]:
    """mAP@R and R-Precision of each text proxy on the ECCV queries under both truths (each block of
    scores ranked against both), with a bootstrap over the queries for the fixed truth's CI."""
    import numpy as np

    rows = []
    for direction, (_, item_kind) in DIRECTIONS.items():
        queries = query_ids[direction]
        mapped = variant_positives({"fixed": fixed, "combined": combined}, direction, queries, gallery.ids(item_kind))
        for encoder, model in models.items():
            values = {name: per_query(ranked) for name, ranked in variant_ranks(model, gallery, direction, queries, mapped).items()}
            for metric in ("mAP@R", "R-Precision"):
                f, c = values["fixed"][metric], values["combined"][metric]
                present = f[~np.isnan(f)]
                draws = generator(SEED, "eccv", direction).integers(0, len(present), size=(samples, len(present)))
                sd = 100 * float(present[draws].mean(axis=1).std())
                fixed_value, combined_value = 100 * float(np.nanmean(f)), 100 * float(np.nanmean(c))
                rows.append(
                    {
                        "direction": direction,
                        "model": f"{encoder} (proxy)",
                        "metric": metric,
                        "queries": int((~np.isnan(f)).sum()),
                        "fixed": fixed_value,
                        "fixed_sd": sd,
                        "combined": combined_value,
                        "delta": combined_value - fixed_value,
                        "within": bool(abs(combined_value - fixed_value) <= Z95 * sd),
                    }
                )
    return rows


# --------------------------------------------------------------------------- tables


def judgments_table(rows: list[dict[str, Any]]) -> str:
    head = "| type | pairs | audit | machine | fixed | triage only | adaptive only | combined | combined / fixed | topped up |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(
            f"| {r['type']} | {r['pairs']:,} | {r['audit']:,} | {r['machine']:,} | {r['fixed']:,} | {r['triage_only']:,} ({r['triage_only_ratio']:.3f}) "
            f"| {r['adaptive_only']:,} ({r['adaptive_only_ratio']:.3f}) | {r['combined']:,} | **{r['combined_ratio']:.3f}** | {r['topped_up']:,} |"
        )
    return "\n".join(lines)


def _share(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}%}"


def positives_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| type | positives fixed → combined | fixed kept | added | labels agree | machine labels agree | people's agree |",
        "|" + "---|" * 7,
    ]
    for r in rows:
        lines.append(
            f"| {r['type']} | {r['fixed']:,} → {r['combined']:,} | {_share(r['kept'])} | {r['added']:,} | {_share(r['agree'])} "
            f"| {_share(r['machine_agree'])} ({r['machine'] if r['machine'] is not None else '–'}) | {_share(r['people_agree'])} |"
        )
    return "\n".join(lines)


def spearman_table(rows: list[dict[str, Any]]) -> str:
    head = "| type | model | CxC real | fixed (95% CI) | combined | Δ | in CI | people's pairs: fixed (95% CI) | combined | Δ | in CI | Δ retest |"
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        ci = f"{r['fixed']:.1f} ({r['fixed'] - Z95 * r['fixed_sd']:.1f}–{r['fixed'] + Z95 * r['fixed_sd']:.1f})"
        same = f"{r['same_pairs']:.1f} ({r['same_pairs'] - Z95 * r['same_pairs_sd']:.1f}–{r['same_pairs'] + Z95 * r['same_pairs_sd']:.1f})"
        cxc = f"{r['cxc']:.1f}" if "cxc" in r else "–"
        retest = f"{r['retest_delta']:+.2f}" if "retest_delta" in r else "–"
        lines.append(
            f"| {r['type']} | {r['model']} | {cxc} | {ci} | {r['combined']:.1f} | {r['delta']:+.2f} | {'yes' if r['within'] else 'no'} "
            f"| {same} ({r['people_pairs']:,} pairs) | {r['people_pairs_combined']:.1f} | {r['delta_same_pairs']:+.2f} | {'yes' if r['within_same_pairs'] else 'no'} | {retest} |"
        )
    return "\n".join(lines)


def eccv_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| direction | model | metric | queries | fixed (95% CI) | combined | Δ | in CI |", "|" + "---|" * 8]
    for r in rows:
        ci = f"{r['fixed']:.2f} ({r['fixed'] - Z95 * r['fixed_sd']:.2f}–{r['fixed'] + Z95 * r['fixed_sd']:.2f})"
        lines.append(
            f"| {r['direction']} | {r['model']} | {r['metric']} | {r['queries']:,} | {ci} | {r['combined']:.2f} | {r['delta']:+.3f} | {'yes' if r['within'] else 'no'} |"
        )
    return "\n".join(lines)


def summary_row(name: str, part: Mapping[str, Any]) -> dict[str, Any]:
    total = next(r for r in part["judgments"] if r["type"] == "all")
    labels = next(r for r in part["positives"] if r["type"] == "all")
    eccv = next(r for r in part["positives"] if r["type"] == ECCV)
    spearman, retrieval = part["spearman"], part["eccv"]
    return {
        "set": name,
        "pairs": total["pairs"],
        "machine": total["machine"],
        "fixed": total["fixed"],
        "combined": total["combined"],
        "ratio": total["combined_ratio"],
        "adaptive_only_ratio": total["adaptive_only_ratio"],
        "triage_only_ratio": total["triage_only_ratio"],
        "kept": labels["kept"],
        "agree": labels["agree"],
        "eccv_kept": eccv["kept"],
        "spearman_within": f"{sum(r['within'] for r in spearman)} of {len(spearman)}",
        "spearman_same_pairs_within": f"{sum(r['within_same_pairs'] for r in spearman)} of {len(spearman)}",
        "eccv_within": f"{sum(r['within'] for r in retrieval)} of {len(retrieval)}",
    }


def summary_table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| set | pairs (machine) | human judgments combined / fixed | ratio (adaptive only, triage only) | positives kept | labels agree "
        "| ECCV positives kept | Spearman Δ in CI (same pairs) | ECCV Δ in CI |"
    )
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(
            f"| {r['set']} | {r['pairs']:,} ({r['machine']:,}) | {r['combined']:,} / {r['fixed']:,} | **{r['ratio']:.3f}** "
            f"({r['adaptive_only_ratio']:.3f}, {r['triage_only_ratio']:.3f}) | {r['kept']:.2%} | {r['agree']:.2%} | {r['eccv_kept']:.2%} "
            f"| {r['spearman_within']} ({r['spearman_same_pairs_within']}) | {r['eccv_within']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.adaptive_campaign", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 Karpathy pairs per type, no minilm, 200 bootstrap samples")
    parser.add_argument("--cache", help="keep the Karpathy ingest and embed outputs in this folder for the next run")
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
