"""The dataset card (``README.md``) and its plots.

Every value that comes from outside (captions, names, licences, reasons) passes :func:`md`, which
backslash-escapes Markdown and HTML punctuation, so a caption like ``<img src=x onerror=…>`` or
``[click](http://…)`` is shown as text, never rendered.  A SIMULATED banner heads the card, the
plots and every section that reports judgments when any judgment is simulated.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from crisscross.aggregate.plots import DPI, SIMULATED_NOTE, item_std_png, png_bytes, score_distribution_png
from crisscross.aggregate.quality import QualityRules
from crisscross.formats.cxc import CXC_FILES
from crisscross.release.contents import EXCLUDED, GOLD, Contents, positives_per_query, rating_pairs
from crisscross.tasktypes import rated_type_names, task_types, type_names
from crisscross.tasktypes.base import TaskType

if TYPE_CHECKING:  # matplotlib (0.3 s) loads when a plot is drawn, not with the stage command
    from matplotlib.figure import Figure

BANNER = (
    "> **SIMULATED** — the judgments in this release come from a simulated rater panel, not from people. "
    "Use it to test pipelines and loaders; never report its scores as human judgments."
)
PLOTS = {
    "plots/score_distribution.png": "aggregated score per task type and sampling method",
    "plots/item_std.png": "standard deviation of the ratings of each item",
    "plots/positives_per_query.png": "positives per query (first id of a pair) per task type",
}
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]#!|<>&~])")  # what can start markup inline or in a table cell


def md(value: object) -> str:
    """Text safe to put in Markdown: punctuation backslash-escaped, newlines and tabs as spaces."""
    return _MD_SPECIAL.sub(r"\\\1", re.sub(r"\s+", " ", str(value)).strip())


def fenced(text: str, language: str = "") -> str:
    """A code block whose fence is longer than any backtick run inside, so the text cannot end it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass(frozen=True)
class Section:
    """A part's own section: its title, Markdown lines (values already escaped), the tables
    ``load_release`` gives for it and the paper to cite."""

    title: str
    lines: Sequence[str]
    tables: Sequence[str]
    citation: str


@dataclass(frozen=True)
class CardInputs:
    """What the card says beyond the tables: the release's metadata and build facts."""

    title: str
    name: str
    version: str
    date: str
    description: str
    licence: str
    licence_url: str
    citation: str
    url: str
    limitations: tuple[str, ...]
    encoders: tuple[tuple[str, str, str], ...]  # (modality, encoder, version)
    rules: Mapping[str, float]  # quality rules over their defaults
    image_licences: Mapping[str, int]  # licence → images (from the attribution file)
    attribution_file: str
    files: Mapping[str, str]  # release file → what it holds
    examples: Sequence[tuple[str, str, str, float]] = field(default_factory=tuple)  # (type, text a, text b, score)
    changelog_entry: str = ""
    simulated: bool = False  # a part is simulated (the rounds say so themselves)
    sections: Sequence[Section] = ()  # the parts' sections (COCO-BISON, Flickr30k Entities, machine labels)
    replication: Sequence[str] = ()  # per task type, the replication its items had (release.labels.obtained)
    machine_labels: str = ""  # what a machine labelled, or that it labelled nothing; empty: no labels section
    front_matter: str = ""  # the YAML header Hugging Face reads (release.hub), ``---`` lines included


def plots(contents: Contents) -> dict[str, bytes]:
    """The card's PNGs (same bytes for the same tables: no timestamps in the files); the score
    plots only when there are rated (0–5) pairs (COCO-BISON's rounds answer, they do not score)."""
    ratings = rating_pairs(contents.pairs)
    simulated = contents.simulated
    found = {}
    if not ratings.empty:
        found["plots/score_distribution.png"] = score_distribution_png(ratings, simulated=simulated, title="Aggregated scores")
        found["plots/item_std.png"] = item_std_png(ratings, simulated=simulated, title="Standard deviation of ratings per item")
    found["plots/positives_per_query.png"] = png_bytes(positives_figure(contents.pairs, simulated=simulated))
    return found


def positives_figure(pairs: pd.DataFrame, *, simulated: bool) -> Figure:
    """Histogram of positives per query, one panel per task type."""
    from matplotlib.figure import Figure

    counts = positives_per_query(pairs)
    kinds = [t for t in type_names() if t in set(counts["task_type"])]
    figure = Figure(figsize=(4.2 * max(1, len(kinds)), 4.0), dpi=DPI, layout="constrained")
    figure.suptitle("Positives per query" + (f" — {SIMULATED_NOTE}" if simulated else ""))
    for axes, kind in zip(np.atleast_1d(figure.subplots(1, max(1, len(kinds)))), kinds, strict=False):
        values = counts.loc[counts["task_type"] == kind, "positives"].to_numpy()
        axes.hist(values, bins=np.arange(-0.5, max(int(values.max()), 1) + 1.5, 1.0), color="tab:blue")
        axes.set_title(f"{kind} ({len(values):,} queries)")
        axes.set_xlabel("positive pairs of the query")
        axes.set_ylabel("queries")
    return figure


def render(contents: Contents, inputs: CardInputs) -> str:
    simulated = contents.simulated or inputs.simulated
    pairs = contents.pairs
    parts = [inputs.front_matter + f"# {md(inputs.title)} {md(inputs.version)}", ""]
    if simulated:
        parts += [BANNER, ""]
    parts += [f"Release `{inputs.name}` version `{inputs.version}` of {inputs.date}. {md(inputs.description)}", ""]
    if not pairs.empty:
        parts += [
            "## What it holds",
            "",
            table(
                ["split", "task type", "pairs", "positives", "sampling methods"],
                (
                    (
                        md(split),
                        kind,
                        f"{len(rows):,}",
                        f"{int(rows['positive'].sum()):,}",
                        ", ".join(f"{md(m)} {n:,}" for m, n in rows.groupby("sampling_method").size().items()),
                    )
                    for (split, kind), rows in pairs.groupby(["split", "task_type"], sort=True)
                ),
            ),
            "",
            "\n".join(_positives_rule(set(pairs["task_type"]), contents.facts)),
            "",
            "## How it was built",
            "",
            *_built(contents, inputs, simulated),
            *_labels(inputs),
            "## Plots",
            "",
            *[f"![{text}]({path})\n" for path, text in PLOTS.items() if path in inputs.files],
        ]
    else:
        parts += _labels(inputs)
    for section in inputs.sections:
        parts += [f"## {md(section.title)}", "", *section.lines, ""]
    kinds = set(pairs["task_type"])
    loading = ['pairs = release.frames["pairs"]          # pandas'] if not pairs.empty else []
    loading += [f'{t.lower()} = release.tables["{t.lower()}_test"]         # pyarrow' for t in CXC_FILES if t in kinds][:1]
    loading += [f'{key.replace("/", "_")} = release.frames["{key}"]' for section in inputs.sections for key in section.tables]
    parts += [
        "## Files",
        "",
        table(["file", "what"], ((f"`{name}`", md(text)) for name, text in sorted(inputs.files.items()))),
        "",
        "Every file is listed with its SHA-256 in `SHA256SUMS`; `crisscross release verify <folder>` checks them and the row "
        "counts in `release.json` (also `sha256sum -c SHA256SUMS`). Rater ids are pseudonyms (a keyed hash; the key is not "
        "in the release; simulated raters, who are not people, are named under a public key, so a simulated release is "
        "byte-identical wherever it is built).",
        "",
        "## Loading and evaluating",
        "",
        fenced(
            "import crisscross\n\n"
            f'release = crisscross.load_release("{inputs.name}")\n'
            + "".join(f"{line}\n" for line in loading)
            + "print(release.version, release.simulated)",
            "python",
        ),
        "",
        *(
            [
                fenced(
                    f"crisscross evaluate --in build/embeddings --items build/items --truth release:{inputs.name} --out build/evaluation --params params.yaml",
                    "bash",
                ),
                "",
            ]
            if any(kind.retrieval for kind in _present(kinds))
            else []
        ),
        "## Licence and attribution",
        "",
        f"Annotations: {md(inputs.licence)} ({md(inputs.licence_url)}). Images and captions keep their own licences; the images' "
        "licences, from the source's attribution file"
        + (f" (`{md(inputs.attribution_file)}`, copied as `ATTRIBUTION.csv`):" if inputs.image_licences else ": not given for this build."),
        "",
        *(
            [table(["image licence", "images"], ((md(k), v) for k, v in sorted(inputs.image_licences.items()))), ""]
            if inputs.image_licences
            else []
        ),
        "## Citation",
        "",
        fenced("\n".join([inputs.citation, *(s.citation for s in inputs.sections if s.citation)]), "bibtex"),
        "",
        "## Known limitations",
        "",
        *[f"- {md(text)}" for text in _limitations(contents, inputs, simulated)],
        "",
        "## Changes",
        "",
        inputs.changelog_entry.replace("## ", "### ", 1) if inputs.changelog_entry else "First release.",
        "",
    ]
    return "\n".join(parts)


def _labels(inputs: CardInputs) -> list[str]:
    """Who labelled what: the replication people's labels had per task type, then the machine's share."""
    if not inputs.machine_labels:
        return []
    lines = ["## How the labels were obtained", ""]
    if inputs.replication:
        lines += [
            "Every label of the rounds' tables aggregates raters' judgments. Per task type, the judgments its items actually had "
            "(every judgment on a released item in `data/judgments.parquet`, including those of raters that quality control excluded) and "
            "whether replication stopped early:",
            "",
            *[f"- {md(line)}" for line in inputs.replication],
            "",
        ]
    return [*lines, md(inputs.machine_labels), ""]


def _present(kinds: set[str]) -> list[TaskType]:
    """The registered types the release holds, in their order."""
    return [kind for kind in task_types() if kind.name in kinds]


def _sampling(kinds: set[str]) -> list[str]:
    """How the release's pairs were sampled: each type's paragraph, once when types share one."""
    return list(dict.fromkeys(kind.sampling for kind in _present(kinds) if kind.sampling))


def _positives_rule(kinds: set[str], facts: Mapping[int, Mapping[str, Any]]) -> list[str]:
    """What each task type the release holds is, and what makes one of its pairs positive (a rated
    type's threshold as its rounds applied it: the build's ``aggregate.thresholds`` may move it)."""
    applied = {kind: f["threshold"] for rounds in facts.values() for kind, f in rounds.items() if f.get("threshold") is not None}
    return [
        f"- **{md(kind.name)}** ({md(kind.title)}; {md(kind.source or 'a plugin task type')}): "
        f"positive when {md(kind.positive_rule(applied.get(kind.name)))}."
        for kind in _present(kinds)
    ]


def _built(contents: Contents, inputs: CardInputs, simulated: bool) -> list[str]:
    judgments = contents.judgments
    rounds = table(
        ["round", "task types", "items", "judgments", "raters", "usual raters per item", "Krippendorff's α"],
        (
            (
                number,
                ", ".join(sorted(facts)),
                f"{sum(f['items'] for f in facts.values()):,}",
                f"{sum(f['judgments'] for f in facts.values()):,}",
                f"{judgments.loc[judgments['round'] == number, 'rater'].nunique():,}",
                ", ".join(f"{k} {f['usual_judgments_per_item']}" for k, f in sorted(facts.items())),
                ", ".join(
                    f"{k} {'n/a' if f['alpha'] is None else format(f['alpha'], '.3f')} ({f['alpha_level']})"
                    for k, f in sorted(facts.items())
                ),
            )
            for number, facts in sorted(contents.facts.items())
        ),
    )
    gold = judgments["status"] == GOLD
    complete = all(r.all_judgments for r in contents.rounds)
    gold_line = (
        f"Gold items: {int(gold.sum()):,} of {len(judgments):,} judgments ({gold.mean():.1%}) were on gold items (known positives "
        "and negatives mixed into every batch, used for quality control only)."
        if complete
        else "Gold rate: not known for this release (built without the rounds' annotate outputs, so only the aggregated judgments are included)."
    )
    raters = contents.raters
    excluded = raters[raters["excluded"].astype(bool)]
    rules = {**asdict(QualityRules()), **inputs.rules}
    encoders = (
        table(["modality", "encoder", "version"], ((md(m), md(e), md(v)) for m, e, v in inputs.encoders))
        if inputs.encoders
        else "Encoders: not recorded for this build."
    )
    source = "a SIMULATED rater panel" if simulated else ", ".join(sorted(set(judgments["source"].map(md))))
    kinds = set(contents.pairs["task_type"])
    lines = [
        *[line for paragraph in _sampling(kinds) for line in (paragraph, "")],
        "Encoders used to sample candidates:",
        "",
        encoders,
        "",
        f"Judgments came from {source}:",
        "",
        rounds,
        "",
        gold_line,
        "",
        "Quality control excluded a rater (per task type) who failed any rule: "
        + ", ".join(f"{md(k)} {v:g}" for k, v in sorted(rules.items()))
        + f". Excluded: {len(excluded):,} of {len(raters):,} (rater, task type) rows; their "
        f"{int((judgments['status'] == EXCLUDED).sum()):,} judgments are in `data/judgments.parquet` with status `excluded-rater`, "
        "the reasons in `data/qc_exclusions.csv`.",
        "",
    ]
    if len(excluded):
        lines += [
            table(
                ["round", "rater", "task type", "reasons"], ((r.round, r.rater, r.task_type, md(r.reasons)) for r in excluded.itertuples())
            ),
            "",
        ]
    if inputs.examples:
        lines += ["Examples (highest-rated pair of each type with text):", ""]
        lines += [table(["type", "a", "b", "score"], ((k, md(a), md(b), f"{s:.2f}") for k, a, b, s in inputs.examples)), ""]
    return lines


def _limitations(contents: Contents, inputs: CardInputs, simulated: bool) -> list[str]:
    found = list(inputs.limitations)
    rounds = not contents.pairs.empty
    if simulated:
        found.insert(
            0,
            "SIMULATED judgments: scores follow an encoder's similarity plus noise, not human perception."
            if rounds
            else "SIMULATED annotations: a simulated panel or crowd answered, not people.",
        )
    pooled = {(n, k): f["pooled_items"] for n, facts in contents.facts.items() for k, f in facts.items() if f.get("pooled_items")}
    if pooled:
        found.append(
            "Pairs judged in both orders or in several batches are pooled into one item (mean of all judgments): "
            + ", ".join(f"round {n} {k} {v:,}" for (n, k), v in sorted(pooled.items()))
            + "."
        )
    if rounds:
        found.append("STS and SIS pairs are symmetric: their ids are written in a fixed order, not the order raters saw them.")
    return found


def example_pairs(contents: Contents, texts: Mapping[str, str]) -> list[tuple[str, str, str, float]]:
    """The highest-rated pair with text of each rating type whose ids are captions (STS, SITS)."""
    found = []
    for kind in rated_type_names():
        rows = contents.pairs[contents.pairs["task_type"] == kind].sort_values(["agg_score", "item_id"], ascending=[False, True])
        for row in rows.itertuples():
            a, b = texts.get(row.id_a), texts.get(row.id_b)
            if a is not None or b is not None:
                found.append((kind, a if a is not None else row.published_a, b if b is not None else row.published_b, float(row.agg_score)))
                break
    return found


def summary(contents: Contents) -> dict[str, Any]:
    """Per task type: pairs, positives, pairs per sampling method (for ``release.json``)."""
    return {
        kind: {
            "pairs": len(rows),
            "positives": int(rows["positive"].sum()),
            "by_method": {str(m): int(n) for m, n in rows.groupby("sampling_method").size().items()},
        }
        for kind, rows in contents.pairs.groupby("task_type", sort=True)
    }
