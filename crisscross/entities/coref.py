"""Cross-caption coreference chains of one image, asked in O(|M|·|C|) links (§2.1).

Mentions are taken in caption order.  A new mention is compared with one representative of each
existing chain (its longest mention, the earliest of equals) until one link is confirmed; with
none it starts a chain.  Transitivity makes the other links unnecessary: the naive scheme asks
|M|(|M|-1)/2.  As in the paper, a chain that already holds a mention of the same caption, or
whose category differs from the mention's, is not asked: neither can be coreferent.  Every chain of more than one mention is then verified once; a rejected chain is
split by head noun (the last word of each mention).  A replayed release (every mention with a
``given_chain``) keeps its chains and asks nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

import pyarrow as pa

from crisscross.core.settings import setting
from crisscross.entities.mentions import Mention
from crisscross.entities.oracle import Oracle, OracleSettings, image_entities


@dataclass(frozen=True)
class Chain:
    image_id: str
    chain: str  # the chain id, unique within its image ("1", "2", … or the release's)
    members: tuple[Mention, ...]  # in caption order

    @property
    def representative(self) -> Mention:
        """The longest mention (most specific, §2.2); the earliest of equally long ones."""
        return min(self.members, key=lambda m: (-len(m.text.split()), m.caption_id, m.index))

    @property
    def kind(self) -> str:
        return self.representative.kind


@dataclass
class Resolution:
    chains: list[Chain]
    links_asked: int = 0
    naive_links: int = 0
    verified: int = 0
    rejected: int = 0  # chains the verification split


def resolve(image_id: str, mentions: Sequence[Mention], oracle: Oracle) -> Resolution:
    """One image's chains, asking the oracle for links and verifications."""
    ordered = sorted(mentions, key=lambda m: (m.caption_id, m.index))
    oracle = oracle.for_image(ordered)
    naive = len(ordered) * (len(ordered) - 1) // 2
    if ordered and all(m.given_chain for m in ordered):
        groups: dict[str, list[Mention]] = {}
        for mention in ordered:
            groups.setdefault(mention.given_chain, []).append(mention)
        chains = [Chain(image_id, chain, tuple(members)) for chain, members in groups.items()]
        return Resolution(chains, 0, naive)
    open_chains: list[list[Mention]] = []
    asked = 0
    for mention in ordered:
        for members in open_chains:
            if not _may_corefer(mention, members):
                continue
            asked += 1
            if oracle.link(mention, Chain(image_id, "", tuple(members)).representative):
                members.append(mention)
                break
        else:
            open_chains.append([mention])
    result = Resolution([], asked, naive)
    pieces: list[list[Mention]] = []
    for number, members in enumerate(open_chains, start=1):
        if len(members) > 1:
            result.verified += 1
            if not oracle.verify(f"{image_id}#{number}", members):
                result.rejected += 1
                by_head: dict[str, list[Mention]] = {}
                for mention in members:
                    by_head.setdefault(mention.head, []).append(mention)
                pieces.extend(by_head.values())
                continue
        pieces.append(members)
    pieces.sort(key=lambda ms: (ms[0].caption_id, ms[0].index))
    result.chains = [Chain(image_id, str(n), tuple(ms)) for n, ms in enumerate(pieces, start=1)]
    return result


def _may_corefer(mention: Mention, members: Sequence[Mention]) -> bool:
    """§2.1's two assumptions: no two mentions of one caption, no two categories in one chain."""
    return members[0].kind == mention.kind and all(m.caption_id != mention.caption_id for m in members)


CHAINS_SCHEMA = pa.schema(
    [
        ("image_id", pa.string()),
        ("chain", pa.string()),
        ("caption_id", pa.string()),
        ("index", pa.int32()),
        ("representative", pa.bool_()),
        ("kind", pa.string()),
    ]
)


def chains_table(chains: Iterable[Chain]) -> pa.Table:
    """One row per mention: its image, chain, whether it represents the chain, the chain's category."""
    rows = []
    for chain in chains:
        rep = chain.representative
        for m in chain.members:
            rows.append(
                {
                    "image_id": chain.image_id,
                    "chain": chain.chain,
                    "caption_id": m.caption_id,
                    "index": m.index,
                    "representative": m == rep,
                    "kind": chain.kind,
                }
            )
    rows.sort(key=lambda r: (r["image_id"], chain_order(r["chain"]), r["caption_id"], r["index"]))
    return pa.Table.from_pylist(rows, schema=CHAINS_SCHEMA)


def chain_order(chain: str) -> tuple[int, str]:
    """Numeric chain ids in number order ("2" before "10"), others after them."""
    return (int(chain), "") if chain.isdigit() else (1 << 62, chain)


def chain_accuracy(chains: Sequence[Chain]) -> dict[str, float]:
    """Chains against the oracle's entities: the share of true chains found exactly, and pairwise
    link precision / recall / F1 (a link: two mentions of one chain)."""
    found = {frozenset(m.mention_id for m in c.members) for c in chains}
    truth = image_entities(m for c in chains for m in c.members)  # mention ids hold their caption's
    true_groups: dict[tuple[str, str], set[str]] = {}
    predicted_pairs: set[tuple[str, str]] = set()
    for chain in chains:
        for m in chain.members:
            true_groups.setdefault((chain.image_id, truth[m.mention_id]), set()).add(m.mention_id)
        predicted_pairs |= {tuple(sorted(p)) for p in combinations((m.mention_id for m in chain.members), 2)}  # type: ignore[misc]
    true_pairs = {tuple(sorted(p)) for group in true_groups.values() for p in combinations(group, 2)}
    exact = sum(1 for group in true_groups.values() if frozenset(group) in found)
    hits = len(predicted_pairs & true_pairs)
    precision = hits / len(predicted_pairs) if predicted_pairs else 1.0
    recall = hits / len(true_pairs) if true_pairs else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "chains": len(chains),
        "true_chains": len(true_groups),
        "exact": exact / len(true_groups) if true_groups else 1.0,
        "link_precision": precision,
        "link_recall": recall,
        "link_f1": f1,
    }


@dataclass(frozen=True)
class CorefSettings:
    """``params.yaml`` ``coref:``: the simulated crowd's error rates (:mod:`crisscross.entities.oracle`)."""

    link_error: float = setting(0.0, low=0.0, high=1.0)  # a link answer is wrong
    wrong_answer: float = setting(0.0, low=0.0, high=1.0)  # a chain verification answer is wrong
    strict: bool = setting(False)

    def oracle(self, seed: int) -> Oracle:
        return Oracle(OracleSettings(link_error=self.link_error, wrong_answer=self.wrong_answer), seed)
