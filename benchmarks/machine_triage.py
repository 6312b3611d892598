"""Machine triage on the real CxC releases: how many pairs the machine labels, and how often people agree.

For each split (``test``, ``val``; ``--quick``: ``test`` with ``use-m3`` and ``bow-glove50`` only),
the Karpathy captions are ingested and embedded by the stage commands (``use-m3``, ``bow-glove50``,
``minilm``), the CxC release files give every pair and its human label (the mean of its published
``agg_score`` rows against the positive threshold: STS and SITS ≥ 3, SIS ≥ 2.5), and
:func:`crisscross.campaign.triage.triage` runs with the default settings (10% audit, error ≤ 1.5%
with 95% confidence) as if people had rated only the audit.  The machine's labels of the other 90%
are then checked against CxC's.

Each split runs the default design (a 10% audit, one turn); ``test`` also runs ``MULTI_TURN``: a 3%
first audit, then two more turns, each auditing a quarter of the band the last left, refitting on
every audit and certifying new cuts on its own (ECCV Caption §6's multi-turn scheme);
``machine by turn`` says what each turn added.

**The reference is the fixed design in the same run**: every pair rated by five people, as CxC did.
``human pairs`` (the audit, the pairs between the cuts and those without a signal) over all pairs is
the share of that design's judgments the triage still asks for.  ``agree`` comes with its exact
(Clopper–Pearson) 95% interval.  The shared copy of the val split holds text for 7,350 of its 25,000
captions, so most val pairs have no signal and go to people: ``signal`` says how many have one.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import SHARED_DATA, save_result
from crisscross.annotate.providers import load_cxc_release
from crisscross.campaign.signals import TextSpace
from crisscross.campaign.triage import LEFT_TO_PEOPLE, TriageSettings, triage
from crisscross.core import io as cio
from crisscross.ingest.records import caption_images
from crisscross.pipelines import embed, ingest
from crisscross.tasktypes.names import POSITIVE_THRESHOLDS

if TYPE_CHECKING:
    import pandas as pd

NAME = "machine_triage"
CAPTIONS = {"test": SHARED_DATA / "coco-karpathy" / "test5k.jsonl", "val": SHARED_DATA / "coco-karpathy" / "val5k_partial.jsonl"}
ENCODERS = ("use-m3", "bow-glove50", "minilm")
QUICK_ENCODERS = ("use-m3", "bow-glove50")
RATERS = 5  # CxC's raters per pair: the fixed design
SEED = 0
MULTI_TURN = TriageSettings(audit_share=0.03, turns=3)  # on test, beside the default design


def run(args: argparse.Namespace) -> None:
    logging.getLogger("crisscross").setLevel(logging.WARNING)
    encoders = QUICK_ENCODERS if args.quick else ENCODERS
    splits = ("test",) if args.quick else ("test", "val")
    settings = TriageSettings()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="crisscross-bench-") as tmp:
        for split in splits:
            designs = (settings, MULTI_TURN) if split == "test" else (settings,)
            rows += measure(split, encoders, designs, Path(tmp) / split)
    print(table(rows))
    path = save_result(
        NAME, {"quick": args.quick, "encoders": list(encoders), "designs": [vars(settings), vars(MULTI_TURN)], "seed": SEED, "rows": rows}
    )
    print(f"written to {path}")


def embedded(split: str, encoders: tuple[str, ...], root: Path) -> tuple[Path, Path]:
    """The split's captions ingested and embedded by the stage commands."""
    items, embeddings = root / "items", root / "embeddings"
    root.mkdir(parents=True)
    params = root / "params.json"
    params.write_text(json.dumps({"embed": {"text_encoders": list(encoders), "image_encoders": [], "batch_size": 256}}))
    with contextlib.redirect_stdout(io.StringIO()):
        ingest.main(["--in", str(CAPTIONS[split]), "--out", str(items)])
        embed.main(["--in", str(items), "--out", str(embeddings), "--params", str(params)])
    return items, embeddings


def measure(split: str, encoders: tuple[str, ...], designs: tuple[TriageSettings, ...], root: Path) -> list[dict[str, Any]]:
    started = time.perf_counter()
    items, embeddings = embedded(split, encoders, root)
    prepared_s = time.perf_counter() - started
    image_of = caption_images(cio.read_parquet(str(items / "captions.parquet")))
    spaces = [TextSpace.read(str(embeddings), encoder, image_of) for encoder in encoders]
    release = load_cxc_release(SHARED_DATA / "cxc", split)
    pairs = release.items.to_pandas().drop_duplicates("item_id")[["item_id", "task_type", "id_a", "id_b"]]
    score = release.judgments.to_pandas().groupby("item_id")["score"].mean()
    people_positive = {
        item: bool(score[item] >= POSITIVE_THRESHOLDS[kind]) for item, kind in zip(pairs["item_id"], pairs["task_type"], strict=True)
    }
    rows = []
    for settings in designs:
        started = time.perf_counter()
        done = triage(pairs, people_positive, spaces, image_of, settings, SEED)
        triage_s = time.perf_counter() - started
        d = done.decisions
        d["people"] = d["item_id"].map(people_positive)
        design = f"{settings.audit_share:.0%} audit, {settings.turns} turn{'s' * (settings.turns > 1)}"
        print(f"  {split}, {design}: ingest + embed {prepared_s:.0f}s, triage of {len(d):,} pairs {triage_s:.1f}s", flush=True)
        rows += [
            row(split, design, kind, d[d["task_type"] == kind], [fit.summary() for fit in done.turns[kind]]) for kind in sorted(done.turns)
        ]
        rows.append(row(split, design, "all", d, None))
        rows[-1]["triage_s"] = round(triage_s, 2)
    return rows


def row(split: str, design: str, kind: str, d: pd.DataFrame, fits: list[dict[str, Any]] | None) -> dict[str, Any]:
    from scipy.stats import binomtest  # after crisscross: the numeric policy is set before numpy loads

    rest = d[~d["audit"]]
    machine = rest[rest["label"] != LEFT_TO_PEOPLE]
    agree = int((machine["label"].astype(bool) == machine["people"]).sum())
    interval = binomtest(agree, len(machine)).proportion_ci(confidence_level=0.95, method="exact") if len(machine) else None
    human = int(d["audit"].sum()) + len(rest) - len(machine)
    return {
        "split": split,
        "design": design,
        "type": kind,
        "pairs": len(d),
        "signal": int(d["score"].notna().sum()),
        "audit": int(d["audit"].sum()),
        "machine": len(machine),
        "machine_share": len(machine) / len(rest) if len(rest) else 0.0,
        "machine_positive": int((machine["label"] == 1).sum()),
        "agree": agree / len(machine) if len(machine) else None,
        "agree_low": interval.low if interval else None,
        "agree_high": interval.high if interval else None,
        "human_pairs": human,
        "human_judgments": human * RATERS,
        "fixed_judgments": len(d) * RATERS,
        "human_over_fixed": human / len(d),
        "machine_by_turn": {int(t): int(n) for t, n in machine["turn"].value_counts().sort_index().items()},
        "cuts": [fit["cuts"] for fit in fits] if fits else None,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = "| split | design | type | pairs | signal | audit | machine (of the rest) | machine by turn | agree (95% CI) | human pairs / fixed design |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        agree = "–" if r["agree"] is None else f"{r['agree']:.2%} ({r['agree_low']:.2%}–{r['agree_high']:.2%})"
        by_turn = ", ".join(f"turn {t}: {n:,}" for t, n in r["machine_by_turn"].items()) or "–"
        lines.append(
            f"| {r['split']} | {r['design']} | {r['type']} | {r['pairs']:,} | {r['signal']:,} | {r['audit']:,} "
            f"| {r['machine']:,} ({r['machine_share']:.1%}) | {by_turn} "
            f"| {agree} | {r['human_pairs']:,} / {r['pairs']:,} = {r['human_over_fixed']:.3f} |"
        )
    return "\n".join(lines)
