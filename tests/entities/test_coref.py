"""Coreference chains: O(|M|·|C|) links, verification by head noun, replay, and accuracy as errors grow."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest

from crisscross.entities.coref import Chain, chain_accuracy, resolve
from crisscross.entities.mentions import CHUNKER, SENTENCES, Caption, Mention, chunked_mentions
from crisscross.entities.oracle import Oracle, OracleSettings, entity_of


def _mention(caption: str, index: int, text: str, types: str, chain: str = "") -> Mention:
    return Mention("img", caption, index, 0, len(text.split()), text, types, chain, SENTENCES if chain else CHUNKER)


MENTIONS = [
    _mention("c0", 0, "A man", "people"),
    _mention("c0", 1, "a red hat", "clothing"),
    _mention("c1", 0, "A guy", "people"),
    _mention("c1", 1, "a hat", "clothing"),
    _mention("c2", 0, "An older man", "people"),
    _mention("c2", 1, "the street", "scene"),
]


class _Scripted(Oracle):
    """The oracle with verification forced to reject, to see the split by head noun."""

    def verify(self, chain_id, members):
        return False


def test_a_new_mention_is_compared_with_one_representative_per_chain():
    result = resolve("img", MENTIONS, Oracle(OracleSettings(), 1))
    assert [[m.text for m in c.members] for c in result.chains] == [
        ["A man", "A guy", "An older man"],
        ["a red hat", "a hat"],
        ["the street"],
    ]
    # asked (§2.1: never within a caption, never across categories): red hat → none, guy → [man] 1,
    # hat → [red hat] 1, older man → [man, guy] 1, street → none: 3 links, not 15
    assert (result.links_asked, result.naive_links) == (3, 15)
    assert result.chains[0].representative.text == "An older man"  # the longest mention is shown
    assert (result.verified, result.rejected) == (2, 0)


class _Always(Oracle):
    """Says yes to every link, so only the schedule keeps mentions apart."""

    def link(self, mention, other):
        return True


def test_mentions_of_one_caption_or_of_two_categories_are_never_asked_or_linked():
    mentions = [
        _mention("c0", 0, "A man", "people"),
        _mention("c0", 1, "a man", "people"),  # "A man hands a man a cup": two men
        _mention("c0", 2, "a cup", "other"),
        _mention("c1", 0, "A guy", "people"),
    ]
    result = resolve("img", mentions, _Always(OracleSettings(), 1))
    assert [[(m.caption_id, m.index) for m in c.members] for c in result.chains] == [[("c0", 0), ("c1", 0)], [("c0", 1)], [("c0", 2)]]
    assert result.links_asked == 1
    truth = resolve("img", mentions, Oracle(OracleSettings(), 1))  # the oracle's second man of c0 is a second entity
    assert chain_accuracy(truth.chains)["exact"] == 1.0 and truth.links_asked == 1


def test_a_rejected_chain_is_split_by_head_noun():
    result = resolve("img", MENTIONS, _Scripted(OracleSettings(), 1))
    assert [[m.text for m in c.members] for c in result.chains] == [
        ["A man", "An older man"],
        ["a red hat", "a hat"],
        ["A guy"],
        ["the street"],
    ]
    assert (result.verified, result.rejected) == (2, 2)


def test_a_replayed_release_keeps_its_chains_and_asks_nothing():
    given = [
        _mention("c0", 0, "A man", "people", "7"),
        _mention("c1", 0, "a dog", "animals", "7"),
        _mention("c1", 1, "grass", "scene", "2"),
    ]
    result = resolve("img", given, Oracle(OracleSettings(link_error=0.5), 1))
    assert [(c.chain, len(c.members)) for c in result.chains] == [("7", 2), ("2", 1)]
    assert result.links_asked == 0
    assert entity_of(given[1]) == "chain:7"


def test_chain_accuracy_counts_exact_chains_and_pairwise_links():
    truth = resolve("img", MENTIONS, Oracle(OracleSettings(), 1)).chains
    assert chain_accuracy(truth)["exact"] == 1.0
    split = [Chain("img", "1", MENTIONS[0:1]), Chain("img", "2", (MENTIONS[2], MENTIONS[4])), *truth[1:]]
    scores = chain_accuracy(split)
    assert scores["exact"] == pytest.approx(2 / 3)
    assert (scores["link_precision"], scores["link_recall"]) == (1.0, pytest.approx(2 / 4))


def _karpathy_mentions(shared_data: Path, images: int) -> dict[str, list[Mention]]:
    by_image: dict[str, list[Mention]] = defaultdict(list)
    for line in (shared_data / "flickr30k-karpathy" / "test.jsonl").read_text().splitlines():
        row = json.loads(line)
        image = f"f30k:img:{row['file_name'][:-4]}"
        if image not in by_image and len(by_image) == images:
            continue
        caption = Caption(
            image, row["caption_index"], f"f30k:cap:{row['file_name'][:-4]}#{row['caption_index']}", row["file_name"], row["caption_tok"]
        )
        by_image[image] += [m for m in chunked_mentions(caption, "t")[0] if isinstance(m, Mention)]
    return by_image


def test_chain_accuracy_declines_as_the_crowd_errs_more(shared_data: Path):
    """The first 200 Karpathy Flickr30k test images (the report's table uses all 1,000): exact at
    error 0 with 15% of the naive links; exact-chain share and link F1 fall with every step."""
    by_image = _karpathy_mentions(shared_data, 200)
    rows = []
    for rate in (0.0, 0.05, 0.1, 0.2, 0.3):
        oracle = Oracle(OracleSettings(link_error=rate, wrong_answer=rate), 20260701)
        chains, asked, naive = [], 0, 0
        for image, mentions in sorted(by_image.items()):
            result = resolve(image, mentions, oracle)
            chains += result.chains
            asked += result.links_asked
            naive += result.naive_links
        rows.append((rate, asked, naive, chain_accuracy(chains)))
    first = rows[0]
    assert (first[1], first[2]) == (4411, 29235)
    assert first[3] == {"chains": 1994, "true_chains": 1994, "exact": 1.0, "link_precision": 1.0, "link_recall": 1.0, "link_f1": 1.0}
    assert [round(row[3]["exact"], 4) for row in rows] == [1.0, 0.9353, 0.8671, 0.7638, 0.6685]
    for (_, _, _, better), (_, _, _, worse) in pairwise(rows):
        assert worse["exact"] < better["exact"] and worse["link_f1"] < better["link_f1"]
