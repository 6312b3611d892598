"""One image's boxes: its chains through the box tasks, box and chain merging (§2.3), its release files.

Chains split by missed links draw the same entity twice.  Boxes of an image with IoU at least
``merge_iou`` (``merge_iou_other`` when either chain is "other") are merged, transitively; a
people box and a clothing box never are.  A merged box is the coordinate-wise mean of its boxes,
rounded.  Then chains pointing at exactly the same (non-empty) set of boxes become one chain,
keeping the smallest chain id.  Merging repeats until nothing merges (a fixpoint).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crisscross.core.quarantine import Rejected, reject
from crisscross.entities.boxes import BOXED, NOT_VISUAL_CHAIN, SCENE_CHAIN, TASKS, BoxSettings, ChainBoxes, annotate_chain, check_box
from crisscross.entities.coref import Chain, chain_order
from crisscross.entities.files import AnnotatedObject, Annotation, Box, Phrase, write_annotation, write_sentences
from crisscross.entities.mentions import Caption, Mention
from crisscross.entities.oracle import Oracle, OracleSettings, iou

NEVER_MERGED = frozenset(["people", "clothing"])


@dataclass(frozen=True)
class MergedImage:
    chains: tuple[ChainBoxes, ...]  # after chain merging; ``boxes`` are the merged boxes
    merged_boxes: int  # boxes removed by box merging
    merged_chains: int  # chains removed by chain merging


def _mergeable(kinds_a: frozenset[str], kinds_b: frozenset[str]) -> bool:
    return not any(a != b and {a, b} == NEVER_MERGED for a in kinds_a for b in kinds_b)


Node = tuple[Box, frozenset[int]]  # a box and the chains (indexes) it belongs to


def _merge_round(nodes: Sequence[Node], kinds: Sequence[str], merge_iou: float, merge_iou_other: float) -> list[Node] | None:
    """One pass of transitive merging; None when nothing merges (a fixpoint).  Nodes stay apart when
    their coordinates are equal but their chains may not merge (a person and their clothes)."""
    parent = list(range(len(nodes)))
    own_kinds = [frozenset(kinds[c] for c in owners) for _, owners in nodes]
    group_kinds = list(own_kinds)  # at each root: the kinds of its whole group

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    merged_any = False
    for i in range(len(nodes)):
        for j in range(i + 1, len(nodes)):
            a, b = find(i), find(j)
            threshold = merge_iou_other if "other" in own_kinds[i] | own_kinds[j] else merge_iou
            if a != b and _mergeable(group_kinds[a], group_kinds[b]) and iou(nodes[i][0], nodes[j][0]) >= threshold:
                parent[b] = a
                group_kinds[a] = group_kinds[a] | group_kinds[b]
                merged_any = True
    if not merged_any:
        return None
    groups: dict[int, list[Node]] = {}
    for i, node in enumerate(nodes):
        groups.setdefault(find(i), []).append(node)
    out: list[Node] = []
    for members in groups.values():
        mean: Box = tuple(int(round(sum(b[k] for b, _ in members) / len(members))) for k in range(4))  # type: ignore[assignment]
        out.append((mean, frozenset().union(*(owners for _, owners in members))))
    return sorted(out, key=_node_order)


def _node_order(node: Node) -> tuple[Box, tuple[int, ...]]:
    return node[0], tuple(sorted(node[1]))


def merge_image(results: Sequence[ChainBoxes], merge_iou: float, merge_iou_other: float) -> MergedImage:
    """Boxes merged until no two mergeable boxes are close enough (so merging a merged image changes
    nothing, and a replayed release comes back unchanged), then chains with equal box sets; a merged
    chain's task counts are the sum of its parts'."""
    kinds = [r.chain.kind for r in results]
    nodes = sorted({(box, frozenset([index])) for index, r in enumerate(results) for box in r.boxes}, key=_node_order)
    drawn = sum(len(r.boxes) for r in results)
    while (merged := _merge_round(nodes, kinds, merge_iou, merge_iou_other)) is not None:
        nodes = merged
    box_sets: dict[int, set[int]] = {}
    for number, (_, owners) in enumerate(nodes):
        for index in owners:
            box_sets.setdefault(index, set()).add(number)
    by_set: dict[frozenset[int], list[ChainBoxes]] = {}
    out: list[ChainBoxes] = []
    for index in sorted(range(len(results)), key=lambda i: chain_order(results[i].chain.chain)):
        if index in box_sets:
            by_set.setdefault(frozenset(box_sets[index]), []).append(results[index])
        else:
            out.append(results[index])
    for numbers, same in by_set.items():
        first = same[0]
        members = tuple(sorted({m for r in same for m in r.chain.members}, key=lambda m: (m.caption_id, m.index)))
        tasks = tuple((task, sum(dict(r.tasks).get(task, 0) for r in same)) for task in TASKS)
        boxes = tuple(sorted(nodes[n][0] for n in numbers))
        out.append(ChainBoxes(Chain(first.chain.image_id, first.chain.chain, members), BOXED, boxes, tasks))
    out.sort(key=lambda r: chain_order(r.chain.chain))
    return MergedImage(tuple(out), drawn - len(nodes), len(results) - len(out))


def release_files(
    image: Mapping[str, object], captions: Sequence[Caption], mentions: Sequence[Mention], merged: MergedImage
) -> tuple[bytes, bytes]:
    """``Sentences/<image>.txt`` and ``Annotations/<image>.xml`` of one image.

    A mention's bracket carries its final chain and its own types; a mention whose chain went to
    review keeps no bracket's chain it could point to, so it is written as plain words."""
    chain_of = {(m.caption_id, m.index): r.chain.chain for r in merged.chains for m in r.chain.members}
    lines = []
    for caption in sorted(captions, key=lambda c: c.position):
        phrases = [
            Phrase(m.first, m.end, chain_of[(m.caption_id, m.index)], m.types)
            for m in sorted(mentions, key=lambda m: m.index)
            if m.caption_id == caption.caption_id and (m.caption_id, m.index) in chain_of
        ]
        lines.append((caption.text.split(), phrases))
    objects: list[AnnotatedObject] = []
    owners: dict[Box, list[str]] = {}
    for r in merged.chains:
        for box in r.boxes:
            owners.setdefault(box, []).append(r.chain.chain)
    for box, names in sorted(owners.items(), key=lambda item: (chain_order(item[1][0]), item[0])):
        objects.append(AnnotatedObject(tuple(names), box))
    for r in merged.chains:
        if r.outcome in (SCENE_CHAIN, NOT_VISUAL_CHAIN):
            objects.append(AnnotatedObject((r.chain.chain,), None, scene=r.outcome == SCENE_CHAIN, nobox=r.outcome == NOT_VISUAL_CHAIN))
    annotation = Annotation(str(image["file_name"]), int(image["width"]), int(image["height"]), 3, tuple(objects))  # type: ignore[call-overload]
    return write_sentences(lines), write_annotation(annotation)


Imported = tuple[str | None, Sequence[Box]]  # a chain's outcome when its source says (a release), and its boxes


def imported_from_annotation(image_id: str, annotation: Annotation) -> dict[str, Imported]:
    """A release's chains of one image as imported outcomes and boxes (``<image_id>#<chain>``)."""
    out: dict[str, Imported] = {}
    for chain, boxes in annotation.boxes().items():
        out[f"{image_id}#{chain}"] = (BOXED, tuple(boxes))
    for obj in annotation.objects:
        if obj.box is None:
            for chain in obj.names:
                out.setdefault(f"{image_id}#{chain}", (SCENE_CHAIN if obj.scene else NOT_VISUAL_CHAIN, ()))
    return out


def _imported_outcome(chain: Chain, given: str | None, boxes: Sequence[Box]) -> str:
    """A chain with kept boxes is boxed; without, a release's scene / no-box flag holds, else its category decides
    (a Label Studio task left without rectangles)."""
    if boxes:
        return BOXED
    if given in (SCENE_CHAIN, NOT_VISUAL_CHAIN):
        return given
    return SCENE_CHAIN if chain.kind == "scene" else NOT_VISUAL_CHAIN


@dataclass(frozen=True)
class BoxTask:
    """A chain's box-drawing task for Label Studio, with the boxes the chain got."""

    key: str  # <image_id>#<chain>
    image_value: str
    caption: Caption
    first: int
    end: int
    kind: str
    size: tuple[int, int]
    boxes: tuple[Box, ...]


@dataclass(frozen=True)
class ImageResult:
    image_id: str
    stem: str
    merged: MergedImage
    sentences: bytes
    annotation: bytes
    tasks: tuple[BoxTask, ...]
    before_merge: int  # boxes drawn before merging


def annotate_image(
    image: Mapping[str, Any],
    captions: Sequence[Caption],
    chains: Sequence[Chain],
    settings: BoxSettings,
    seed: int,
    imported: Mapping[str, Imported] | None,
    source: str,
) -> list[ImageResult | Rejected]:
    """One image's chains through the box tasks (or their imported boxes: Label Studio, a release), merged,
    with its release files and box tasks; chains that go to review and bad boxes are ``Rejected``."""
    size = (int(image.get("width") or 0), int(image.get("height") or 0))
    if size[0] < 2 or size[1] < 2:
        return [
            reject("chain", f"{c.image_id}#{c.chain}", "no-pixels", f"image {image.get('image_id')} has no readable pixels", source, {})
            for c in chains
        ]
    oracle = Oracle(OracleSettings(wrong_answer=settings.wrong_answer, box_jitter=settings.box_jitter), seed)
    oracle = oracle.for_image(m for chain in chains for m in chain.members)
    out: list[ImageResult | Rejected] = []
    results: list[ChainBoxes] = []
    for chain in chains:
        key = f"{chain.image_id}#{chain.chain}"
        if imported is not None:
            outcome, given = imported.get(key, (None, ()))
            boxes = []
            for box in given:
                why = check_box(box, *size)
                if why:
                    out.append(reject("box", key, why, f"box {list(box)} in an image of {size[0]}×{size[1]}", source, {"box": list(box)}))
                else:
                    boxes.append(box)
            results.append(ChainBoxes(chain, _imported_outcome(chain, outcome, boxes), tuple(boxes), tuple((t, 0) for t in TASKS)))
            continue
        result = annotate_chain(chain, size, oracle, settings.max_steps, source)
        if isinstance(result, Rejected):
            out.append(result)
        else:
            results.append(result)
    merged = merge_image(results, settings.merge_iou, settings.merge_iou_other)
    mentions = [m for r in results for m in r.chain.members]
    sentences, annotation = release_files(image, captions, mentions, merged)
    by_caption = {c.caption_id: c for c in captions}
    tasks = []
    for r in results:
        rep = r.chain.representative
        if r.outcome == BOXED and rep.caption_id in by_caption:
            image_value = f"{settings.image_root}{image['file_name']}"
            tasks.append(
                BoxTask(
                    f"{r.chain.image_id}#{r.chain.chain}",
                    image_value,
                    by_caption[rep.caption_id],
                    rep.first,
                    rep.end,
                    r.chain.kind,
                    size,
                    r.boxes,
                )
            )
    stem = str(image["file_name"]).rsplit("/", 1)[-1].rsplit(".", 1)[0]
    before = sum(len(r.boxes) for r in results)
    out.append(ImageResult(str(image["image_id"]), stem, merged, sentences, annotation, tuple(tasks), before))
    return out
