"""What a release build is asked for (:class:`ReleaseRequest`, the ``release`` params section) and what it
decides before writing anything (:class:`Plan`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crisscross.core.errors import ParamError
from crisscross.core.settings import setting
from crisscross.formats.cxc import CXC_SPLITS
from crisscross.formats.schema import SOURCE_PEOPLE, SOURCE_REPLAY, SOURCE_SIMULATED
from crisscross.release.contents import CXC_ROW_MODES, ITEM_ROWS, Contents, RoundInput
from crisscross.release.parts import Part
from crisscross.release.versions import SIMULATED_LABEL, ReleaseDiff, Version

DEFAULT_CITATION = """@misc{crisscross,
  title = {crisscross: graded image and caption similarity judgments},
  note = {Built with the methods of Crisscrossed Captions (Parekh et al., EACL 2021) and ECCV Caption (Chun et al., ECCV 2022)}
}
@inproceedings{parekh2021crisscrossed,
  title = {Crisscrossed Captions: Extended Intramodal and Intermodal Semantic Similarity Judgments for {MS-COCO}},
  author = {Parekh, Zarana and Baldridge, Jason and Cer, Daniel and Waters, Austin and Yang, Yinfei},
  booktitle = {EACL},
  year = {2021}
}"""


SALT_ENV = "CRISSCROSS_RELEASE_SALT"


@dataclass(frozen=True)
class ReleaseSettings:
    """The ``release`` section of ``params.yaml``: what the card and metadata say, and how ids are hidden."""

    name: str = "crisscross-demo"
    title: str = "crisscross demo: graded image and caption similarity"
    description: str = (
        "Graded caption-caption (STS), image-image (SIS) and caption-image (SITS) similarity judgments and verified "
        "image-caption matches (VERIFY) over MS-COCO images and captions, in the Crisscrossed Captions file shapes."
    )
    version: str = "auto"  # auto: the smallest version the diff against the previous release allows
    date: str | None = None  # YYYY-MM-DD; null: $SOURCE_DATE_EPOCH, else today (UTC)
    previous: str | None = None  # the release this one follows (a folder; may be the output folder itself)
    licence: str = "CC BY 4.0"
    licence_url: str = "https://creativecommons.org/licenses/by/4.0/"
    citation: str = DEFAULT_CITATION
    url: str = "https://github.com/google-research-datasets/Crisscrossed-Captions"
    creator: str = "crisscross contributors"
    limitations: tuple[str, ...] = ()
    salt_env: str = SALT_ENV  # the pseudonym key: this environment variable, else ...
    salt_file: str = "~/.config/crisscross/release-salt"  # ... this file (created when missing; never inside the release)
    cxc_rows: str = setting(ITEM_ROWS, choices=CXC_ROW_MODES)
    merge_splits: tuple[str, ...] = CXC_SPLITS  # examples of these splits get cxc_scores in the Karpathy merge (as CxC's script)
    # who linked and drew the Flickr30k Entities chains and boxes (--entities): the boxes stage's output does not say
    entities_source: str = setting(SOURCE_SIMULATED, choices=(SOURCE_SIMULATED, SOURCE_PEOPLE, SOURCE_REPLAY))

    def metadata(self) -> dict[str, Any]:
        """What a patch release may change: the descriptive fields (not version, date or where files are)."""
        keys = (
            "name",
            "title",
            "description",
            "licence",
            "licence_url",
            "citation",
            "url",
            "creator",
            "limitations",
            "cxc_rows",
            "merge_splits",
        )
        return {k: list(v) if isinstance(v, tuple) else v for k, v in ((k, getattr(self, k)) for k in keys)}


@dataclass(frozen=True)
class ReleaseRequest:
    rounds: tuple[RoundInput, ...]  # empty: a release of parts alone
    items: Path | None  # needed with rounds
    out: Path
    settings: ReleaseSettings
    params: Mapping[str, Any] = field(default_factory=dict)  # the whole params document, recorded as build params
    version: str = "auto"
    date: str | None = None
    simulated: bool = False  # the explicit flag a simulated build needs
    previous: Path | None = None
    positives: Path | None = None
    karpathy: Path | None = None
    embeddings: Path | None = None
    attribution: Path | None = None
    lock: Path | None = None
    parts: Mapping[str, Path] = field(default_factory=dict)  # part name (PARTS) → its stage's output folder


@dataclass(frozen=True)
class Plan:
    """What is decided before anything is written: the contents, version, diff and previous release."""

    contents: Contents
    version: Version
    date: str
    diff: ReleaseDiff | None
    previous_version: Version | None
    previous_changelog: str
    parts: tuple[Part, ...] = ()

    @property
    def simulated(self) -> bool:
        return self.contents.simulated or any(p.simulated for p in self.parts)


def rounds_from(rated: Sequence[str], judgments: Sequence[str] | None) -> tuple[RoundInput, ...]:
    """Round inputs from the comma-separated ``--rated`` and ``--judgments`` lists (same order)."""
    if judgments and len(judgments) != len(rated):
        raise ParamError(
            f"--judgments names {len(judgments)} folder(s) for {len(rated)} --rated folder(s): give one per round, in the same order"
        )
    return tuple(RoundInput(i, Path(r), Path(judgments[i - 1]) if judgments else None) for i, r in enumerate(rated, 1))


def release_name(name: str, simulated: bool) -> str:
    return f"{name}-{SIMULATED_LABEL}" if simulated and SIMULATED_LABEL not in name.lower() else name
