"""Datasets a release carries beside the rated rounds: COCO-BISON triples, Flickr30k Entities boxes
and the labels a machine assigned (``crisscross triage``), which never join people's tables.

Each is read from its stage's output folder into a :class:`Part` — the files written under
``data/<name>/``, its tables, its counts, whether it is simulated and its card section — so the
build, the card, Croissant, the diff and the loader treat every part alike (``PARTS``, by name).
Worker ids in a part's tables become the same pseudonyms as in ``judgments.parquet``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from crisscross.campaign.triage import DECIDED_BY_MACHINE
from crisscross.core import io
from crisscross.core.errors import InputError
from crisscross.core.registry import Registry
from crisscross.formats.schema import SOURCE_PEOPLE, SOURCE_SIMULATED
from crisscross.release.card import md
from crisscross.release.pseudonyms import Salt, pseudonyms

BISON, ENTITIES, MACHINE_LABELS = "bison", "entities", "machine_labels"
BISON_JSON = "bison_annotations.json"
ENTITY_FOLDERS = {"Sentences": ("txt", "text/plain"), "Annotations": ("xml", "application/xml")}
# what the diff counts as one unit of each part's tables: a changed unit is one removed and one added
DIFF_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    BISON: {"triples": ("caption", "target", "decoy")},
    ENTITIES: {
        "boxes": ("image_id", "xmin", "ymin", "xmax", "ymax", "chains"),
        "chains": ("image_id", "chain", "caption_id", "index", "kind", "outcome"),
    },
    MACHINE_LABELS: {"labels": ("task_type", "item_id", "positive")},
}
# the columns of the triage stage's machine_labels.parquet a release needs, typed: an empty table reads back without its types
MACHINE_LABEL_TYPES = {
    "item_id": str,
    "task_type": str,
    "id_a": str,
    "id_b": str,
    "positive": bool,
    "score": "float64",
    "expected_score": "float64",
    "cut": "float64",
    "bound": "float64",
    "audited": "int64",
    "signals": str,
    "reason": str,
    "simulated_audit": bool,
}
BISON_CITATION = """@inproceedings{hu2019bison,
  title = {Evaluating Text-to-Image Matching using Binary Image Selection ({BISON})},
  author = {Hu, Hexiang and Misra, Ishan and van der Maaten, Laurens},
  booktitle = {ICCV Workshops},
  year = {2019}
}"""
ENTITIES_CITATION = """@inproceedings{plummer2015flickr30k,
  title = {Flickr30k Entities: Collecting Region-to-Phrase Correspondences for Richer Image-to-Sentence Models},
  author = {Plummer, Bryan A. and Wang, Liwei and Cervantes, Chris M. and Caicedo, Juan C. and Hockenmaier, Julia and Lazebnik, Svetlana},
  booktitle = {ICCV},
  year = {2015}
}"""


@dataclass(frozen=True)
class Part:
    """One dataset under ``data/<name>/``: its bytes, tables, counts and card section."""

    name: str
    title: str
    files: Mapping[str, bytes]  # path under data/<name>/ → bytes (tables written as Parquet and CSV besides)
    tables: Mapping[str, pd.DataFrame]  # stem → table (data/<name>/<stem>.parquet and .csv)
    counts: Mapping[str, Any]  # release.json's parts.<name>
    simulated: bool
    source: str  # who annotated: a PLATFORMS key of the build
    card: tuple[str, ...]  # its card section, Markdown lines without the heading
    citation: str
    notes: Mapping[str, str]  # path under data/<name>/ → what it holds
    collection: str  # how it was collected, for Croissant's rai:dataCollection
    file_sets: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # folder → (file suffix, encoding)


PARTS: Registry[Part] = Registry("release part")  # name → reader(folder=, salt=, settings=)


def units(name: str, tables: Mapping[str, pd.DataFrame]) -> dict[str, frozenset[tuple[str, ...]]]:
    """``<part>/<table>`` → its rows as tuples of :data:`DIFF_KEYS` (as text): what a diff compares."""
    found = {}
    for stem, keys in DIFF_KEYS[name].items():
        table = tables.get(stem)
        rows = [] if table is None else table[list(keys)].astype(str).itertuples(index=False, name=None)
        found[f"{name}/{stem}"] = frozenset(rows)
    return found


def _need(path: Path, producer: str) -> Path:
    if not path.is_file():
        raise InputError(f"no {path}: run the {producer} stage first (or name the right folder)")
    return path


@PARTS.register(BISON)
def read_bison(folder: Path, salt: Salt, settings: Mapping[str, Any]) -> Part:
    """The ``bison --verified`` output: the released JSON as is, the triples with pseudonymous
    chooser and verifiers, the yields of its report."""
    document_bytes = _need(folder / BISON_JSON, "bison --verified").read_bytes()
    document = json.loads(document_bytes)
    triples = pq.read_table(_need(folder / "triples.parquet", "bison --verified")).to_pandas()
    report = json.loads(_need(folder / "report.json", "bison --verified").read_text(encoding="utf-8"))
    if len(document.get("data", [])) != len(triples):
        raise InputError(
            f"{folder / BISON_JSON} has {len(document.get('data', []))} triples, triples.parquet {len(triples)}: rerun the bison stage"
        )
    verifiers = triples["verifiers"].str.split(";")
    workers = [*triples["chooser"], *(w for ws in verifiers for w in ws)]
    simulated = bool(document.get("info", {}).get("simulated", False))
    names = pseudonyms(workers, salt, simulated=set(workers) if simulated else ())
    released = triples.assign(
        chooser=triples["chooser"].map(names), verifiers=[";".join(names[w] for w in ws) for ws in verifiers]
    ).sort_values("bison_id", kind="stable")
    yields, verification = report.get("yields", {}), report.get("verification", {})
    encoders = ", ".join(sorted(set(triples["encoder"]))) or "not recorded"
    counts = {
        "triples": len(released),
        "captions": int(released["caption"].nunique()),
        "target_images": int(released["target"].nunique()),
        "decoy_images": int(released["decoy"].nunique()),
        "yields": yields,
    }
    funnel = [
        ("images", yields.get("images")),
        ("with a decoy", yields.get("with_decoy")),
        ("with a chosen caption", yields.get("choose_kept")),
        ("answered none (discarded)", yields.get("choose_none")),
        ("triples verified", verification.get("verified")),
        ("triples accepted", yields.get("triples_accepted")),
    ]
    card = (
        "Binary image selection (BISON; Hu et al. 2019): each triple is a caption, the image it describes (the target) and a "
        "similar decoy image; a system is asked which of the two images the caption describes. "
        f"`data/{BISON}/{BISON_JSON}` is in COCO-BISON's released JSON shape (`info`, `data` with `bison_id`, `caption_id`, "
        "`caption`, `true_image_id`, `image_candidates`); `triples.csv` / `triples.parquet` hold the canonical ids, the caption text, "
        "the decoy's similarity and encoder, and the pseudonymous chooser and verifiers.",
        "",
        f"Built as §4.1 of the paper: (1) each image's nearest other image by its captions' mean embedding ({md(encoders)}) is its "
        "decoy; (2) one rater saw both images and the target's captions and chose a caption that describes the target but not "
        "the decoy, or none; (3) other raters saw that caption with both images in a seeded order, and a triple is kept only "
        "when every verifier answered *target*."
        + (" SIMULATED: the choosers and verifiers are a simulated panel, not people." if simulated else ""),
        "",
        "| step | count |",
        "|---|---|",
        *[f"| {step} | {value:,} |" for step, value in funnel if isinstance(value, int)],
        "",
        f"Image yield: {yields.get('image_yield', 0):.1%} of the images became the target of a triple "
        f"(the paper's COCO-BISON: {yields.get('paper_image_yield', 0):.1%}).",
        "",
        "BISON accuracy of models on these triples (the share whose caption scores the target above the decoy):",
        "",
        "```bash",
        f"crisscross evaluate --in build/embeddings --items build/items --truth coco --bison <release>/data/{BISON}/{BISON_JSON} "
        "--out build/evaluation --params params.yaml",
        "```",
    )
    return Part(
        name=BISON,
        title="COCO-BISON triples",
        files={BISON_JSON: document_bytes},
        tables={"triples": released.reset_index(drop=True)},
        counts=counts,
        simulated=simulated,
        source=SOURCE_SIMULATED if simulated else SOURCE_PEOPLE,
        card=card,
        citation=BISON_CITATION,
        collection="COCO-BISON triples (Hu et al. 2019 §4.1): decoys by caption-embedding similarity, a caption chosen per target and decoy, verified by other raters.",
        notes={
            BISON_JSON: "COCO-BISON's released JSON shape: caption, true image and the two image candidates per triple",
            "triples.csv": "one accepted triple per row: caption, target and decoy ids, caption text, similarity, encoder, pseudonymous chooser and verifiers",
            "triples.parquet": "the same as triples.csv",
        },
    )


@PARTS.register(ENTITIES)
def read_entities(folder: Path, salt: Salt, settings: Mapping[str, Any]) -> Part:
    """The ``boxes`` output: ``release/Sentences`` and ``release/Annotations`` as they are, the
    box and chain tables, the counts of its report.  Who drew the boxes is not in that output, so
    it comes from ``release.entities_source``."""
    release = folder / "release"
    files: dict[str, bytes] = {}
    for sub, (suffix, _) in ENTITY_FOLDERS.items():
        found = sorted((release / sub).glob(f"*.{suffix}"))
        if not found:
            raise InputError(f"no {release / sub}/*.{suffix}: run the boxes stage first (or name its output folder)")
        files.update({f"{sub}/{p.name}": p.read_bytes() for p in found})
    boxes = pq.read_table(_need(folder / "boxes.parquet", "boxes")).to_pandas().sort_values(["image_id", "box"], kind="stable")
    chains = (
        pq.read_table(_need(folder / "chains.parquet", "boxes"))
        .to_pandas()
        .sort_values(["image_id", "chain", "caption_id", "index"], kind="stable")
    )
    report = json.loads(_need(folder / "report.json", "boxes").read_text(encoding="utf-8"))
    source = str(settings.get("entities_source", SOURCE_SIMULATED))
    outcomes = {str(k): int(v) for k, v in chains.drop_duplicates(["image_id", "chain"])["outcome"].value_counts().sort_index().items()}
    counts = {
        "images": sum(1 for name in files if name.startswith("Annotations/")),
        "captions": int(chains["caption_id"].nunique()),
        "chains": int(chains[["image_id", "chain"]].drop_duplicates().shape[0]),
        "mentions": len(chains),
        "boxes": len(boxes),
        "chain_outcomes": outcomes,
        "merging": report.get("merging", {}),
    }
    merging = report.get("merging", {})
    card = (
        "Phrase grounding in Flickr30k Entities' released file formats (Plummer et al. 2015): the noun phrases of each caption "
        "are linked into coreference chains (one entity of the image) and each chain gets its bounding boxes, or is marked "
        f"*scene* or *no box*. `data/{ENTITIES}/Sentences/<image>.txt` brackets every mention as `[/EN#<chain>/<type> words]`; "
        f"`data/{ENTITIES}/Annotations/<image>.xml` holds the image size and one `<object>` per box with the chains it belongs "
        "to (1-based pixel corners), or a chain's scene / no-box flags. `boxes` and `chains` (CSV and Parquet) are the same "
        "boxes and mentions as tables (0-based corners).",
        "",
        "Built as §2 of the paper: mentions chunked from the captions and typed; chains from *same entity?* link answers, each "
        "chain then verified; every chain through box requirement, drawing, quality and coverage tasks; boxes of an image "
        "that overlap enough merged"
        + (f" ({merging.get('boxes_drawn', 0):,} drawn, {merging.get('merged_boxes', 0):,} merged away)." if merging else ".")
        + (" SIMULATED: the crowd that linked and drew is simulated, not people." if source == SOURCE_SIMULATED else ""),
        "",
        "| images | captions | chains | mentions | boxes | chains with boxes / scene / no box |",
        "|---|---|---|---|---|---|",
        f"| {counts['images']:,} | {counts['captions']:,} | {counts['chains']:,} | {counts['mentions']:,} | {counts['boxes']:,} | "
        f"{outcomes.get('boxes', 0):,} / {outcomes.get('scene', 0):,} / {outcomes.get('nobox', 0):,} |",
    )
    return Part(
        name=ENTITIES,
        title="Flickr30k Entities boxes",
        files=files,
        tables={"boxes": boxes.reset_index(drop=True), "chains": chains.reset_index(drop=True)},
        counts=counts,
        simulated=source == SOURCE_SIMULATED,
        source=source,
        card=card,
        citation=ENTITIES_CITATION,
        collection="Flickr30k Entities (Plummer et al. 2015 §2): mentions linked into coreference chains, boxes drawn per chain, checked for quality and coverage, merged.",
        notes={
            "Sentences/": "one file per image: its captions, mentions bracketed with their chain and type (Flickr30k Entities' format)",
            "Annotations/": "one file per image: size, boxes with their chains, scene and no-box chains (Flickr30k Entities' format)",
            "boxes.csv": "one merged box per row: image, box number, 0-based corners, its chains (;-joined)",
            "boxes.parquet": "the same as boxes.csv",
            "chains.csv": "one mention per row: image, chain, caption, mention index, type, the chain's outcome (boxes, scene, nobox)",
            "chains.parquet": "the same as chains.csv",
        },
        file_sets=dict(ENTITY_FOLDERS),
    )


@PARTS.register(MACHINE_LABELS)
def read_machine_labels(folder: Path, salt: Salt, settings: Mapping[str, Any]) -> Part:
    """The ``triage`` output's ``machine_labels.parquet``: the machine's labels in use, each with its
    provenance (score, certified cut, audited pairs, error bound, signals, reason, and whatever else
    the triage records) and ``source`` ``machine``, in a folder of their own so no table of people's
    labels takes them in.  The card has a row per certified cut (a later triage turn certifies its own)."""
    found = pq.read_table(_need(folder / "machine_labels.parquet", "triage")).to_pandas()
    missing = sorted(set(MACHINE_LABEL_TYPES) - set(found.columns))
    if missing:
        raise InputError(f"{folder / 'machine_labels.parquet'} has no {missing[0]} column: rerun the triage stage")
    labels = (
        found.astype(MACHINE_LABEL_TYPES)
        .assign(source=DECIDED_BY_MACHINE)
        .sort_values(["task_type", "item_id"], kind="stable")
        .reset_index(drop=True)
    )
    names = {True: "positive", False: "negative"}
    by_type = {
        str(kind): {names[bool(positive)]: len(rows) for positive, rows in group.groupby("positive", sort=True)}
        for kind, group in labels.groupby("task_type", sort=True)
    }
    cuts = labels.groupby(["task_type", "positive", "cut", "audited", "bound"], sort=True).size().rename("labels").reset_index()
    simulated = bool(labels["simulated_audit"].any())
    card = (
        "These labels were assigned by a calibrated machine with a certified error bound, never by people (`crisscross triage`). "
        "Per task type, a logistic regression over the text encoders' signals was fitted on an audit sample "
        "that raters labelled; a pair is labelled only beyond a cut where the Clopper–Pearson upper bound on the share of audited "
        "pairs rated otherwise stays within the triage's `max_error` (at confidence 1 − `delta`). Pairs between the cuts went to "
        "raters." + (" SIMULATED: the audit the machine learnt from was rated by a simulated panel, not people." if simulated else ""),
        "",
        f"They are kept apart: `data/{MACHINE_LABELS}/labels.csv` and `labels.parquet` hold them, each row with its provenance "
        "(`score`, `cut`, `audited` pairs behind the cut, error `bound`, `signals`, `reason`; `expected_score`, a regression's "
        "estimate of people's 0–5 score for the graded types, never a rating) and `source` *machine*; the rounds' "
        "tables (`data/pairs.parquet`, the files per task type and split, `data/judgments.parquet`) hold none of these items, and "
        "no count of people's labels includes them.",
        "",
        "| task type | label | machine labels | cut (score) | audited pairs behind it | error bound |",
        "|---|---|---|---|---|---|",
        *[
            f"| {md(row.task_type)} | {names[bool(row.positive)]} | {row.labels:,} | {'≥' if row.positive else '≤'} {row.cut:.3f} | "
            f"{row.audited:,} | {row.bound:.4f} |"
            for row in cuts.itertuples()
        ],
    )
    return Part(
        name=MACHINE_LABELS,
        title="Machine labels",
        files={},
        tables={"labels": labels},
        counts={"labels": len(labels), "by_type": by_type},
        simulated=simulated,
        source=DECIDED_BY_MACHINE,
        card=card,
        citation="",
        collection="Machine labels (crisscross triage): a regression over text-encoder signals fitted on "
        "an audit raters labelled, labels only beyond cuts whose error rate a Clopper–Pearson bound certifies; kept apart from people's labels.",
        notes={
            "labels.csv": "one label a calibrated machine assigned (never people) per row: item, task type, ids, positive, and its "
            "provenance (score, certified cut, audited pairs behind it, error bound, signals, reason, as the triage records it; "
            "expected_score: a regression's estimate of people's 0–5 score, never a rating); source machine",
            "labels.parquet": "the same as labels.csv",
        },
    )


def read_parts(folders: Mapping[str, Path], salt: Salt, settings: Mapping[str, Any]) -> tuple[Part, ...]:
    """Each named part read from its folder, in name order."""
    return tuple(PARTS.create(name, folder=folders[name], salt=salt, settings=settings) for name in sorted(folders))


def write_part(data: Path, part: Part) -> None:
    """``data/<name>/``: its files as read, each table as Parquet and as CSV."""
    root = data / part.name
    for name, payload in sorted(part.files.items()):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        io.write_bytes(str(root / name), payload)
    for stem, table in sorted(part.tables.items()):
        root.mkdir(parents=True, exist_ok=True)
        io.write_parquet(str(root / f"{stem}.parquet"), pa.Table.from_pandas(table, preserve_index=False))
        io.write_bytes(str(root / f"{stem}.csv"), io.frame_csv_bytes(table))
