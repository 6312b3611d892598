"""The release's pure parts on their own: the version rule, pseudonyms and their salt, the card's
Markdown escaping."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from crisscross.core.errors import ParamError
from crisscross.release.card import fenced, md, table
from crisscross.release.pseudonyms import PUBLIC_SALT, Salt, load_salt, pseudonym, pseudonyms
from crisscross.release.versions import ReleaseDiff, TableDiff, TypeDiff, Version, changelog_entry, choose_version

SALT = Salt(b"0123456789abcdef0123", "a test")


# --------------------------------------------------------------------------- versions


def test_versions_parse_order_and_bump() -> None:
    assert str(Version.parse(" 1.2.3-simulated ")) == "1.2.3-simulated"
    assert Version.parse("1.10.0") > Version.parse("1.9.9")
    assert [str(Version.parse("1.2.3").bumped(level)) for level in ("none", "patch", "minor", "major")] == [
        "1.2.3",
        "1.2.4",
        "1.3.0",
        "2.0.0",
    ]
    for bad in ("1.2", "01.2.3", "v1.2.3", "1.2.3-"):
        with pytest.raises(ParamError, match="not a semantic version"):
            Version.parse(bad)


@pytest.mark.parametrize(
    ("diff", "level"),
    [
        (ReleaseDiff((), ()), "none"),
        (ReleaseDiff((), ("license",)), "patch"),
        (ReleaseDiff((TypeDiff("STS", 10, 12, added={"c2c_isim": 2}),), ()), "minor"),
        (ReleaseDiff((TypeDiff("STS", 10, 10, scores_changed=3),), ()), "minor"),
        (ReleaseDiff((TypeDiff("STS", 10, 10, became_negative=1),), ()), "major"),
        (ReleaseDiff((TypeDiff("STS", 10, 9, removed={"c2c_isim": 1}),), ()), "major"),
        (ReleaseDiff((), (), (TableDiff("bison/triples", 5, 6, 1, 0),)), "minor"),
        (ReleaseDiff((), (), (TableDiff("bison/triples", 5, 5, 1, 1),)), "major"),
    ],
)
def test_a_diff_needs_the_smallest_bump_that_tells_users_what_changed(diff: ReleaseDiff, level: str) -> None:
    assert diff.level == level
    previous = Version(1, 4, 2)
    assert choose_version("auto", previous, diff, simulated=False) == previous.bumped(level)


def test_a_requested_version_below_the_rule_or_with_a_wrong_label_is_refused() -> None:
    flipped = ReleaseDiff((TypeDiff("SIS", 4, 4, became_positive=1),), ())
    with pytest.raises(
        ParamError,
        match=r"version 1\.5\.0 is too low: the diff against 1\.4\.2 needs a major bump \(0 pairs removed, 1 positives flipped\)",
    ):
        choose_version("1.5.0", Version(1, 4, 2), flipped, simulated=False)
    assert str(choose_version("3.0.0", Version(1, 4, 2), flipped, simulated=True)) == "3.0.0-simulated"
    with pytest.raises(ParamError, match="only a simulated build carries a label"):
        choose_version("2.0.0-simulated", Version(1, 4, 2), flipped, simulated=False)
    assert str(choose_version("auto", None, None, simulated=True)) == "1.0.0-simulated"


def test_the_changelog_says_what_changed_and_why_the_bump() -> None:
    diff = ReleaseDiff((TypeDiff("STS", 10, 12, added={"c2c_isim": 2}),), ("license",), (TableDiff("entities/boxes", 3, 4, 1, 0),))
    entry = changelog_entry(Version(1, 1, 0), "2026-11-26", diff, Version(1, 0, 0))
    assert entry.startswith("## 1.1.0 — 2026-11-26\n")
    assert "Against 1.0.0: **minor** (2 pairs added, 0 scores or labels refined, no positive flipped, 1 data rows added)." in entry
    assert "| entities/boxes | 3 | 4 | 1 | 0 |" in entry and "Metadata changed: license." in entry
    assert "First release." in changelog_entry(Version(1, 0, 0), "2026-11-26", None, None)


# --------------------------------------------------------------------------- pseudonyms


def test_pseudonyms_are_keyed_stable_and_simulated_raters_use_the_public_key() -> None:
    table = pseudonyms(["w2", "w1", "w1", "sim-3"], SALT, simulated={"sim-3"})
    assert list(table) == ["sim-3", "w1", "w2"]
    assert table["w1"] == pseudonym("w1", SALT) != pseudonym("w1", Salt(b"another salt of 16+ bytes", "b"))
    assert table["sim-3"] == pseudonym("sim-3", PUBLIC_SALT)
    assert all(p.startswith("rater-") and len(p) == len("rater-") + 16 for p in table.values())


def test_a_short_salt_or_a_salt_file_inside_the_release_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ParamError, match="needs at least 16"):
        Salt(b"short", "here")
    with pytest.raises(ParamError, match="lies inside the release folder"):
        load_salt("NO_SUCH_VAR", str(tmp_path / "release" / "salt"), str(tmp_path / "release"), environ={})


def test_a_missing_salt_file_is_made_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "config" / "release-salt"
    first = load_salt("NO_SUCH_VAR", str(path), str(tmp_path / "release"), environ={})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(first.key) >= 16
    assert load_salt("NO_SUCH_VAR", str(path), str(tmp_path / "release"), environ={}).key == first.key
    from_env = load_salt("SALT_VAR", str(path), str(tmp_path / "release"), environ={"SALT_VAR": "x" * 20})
    assert from_env.key == b"x" * 20 and from_env.origin == "$SALT_VAR"


# --------------------------------------------------------------------------- card


def test_card_text_cannot_start_markup_or_end_its_fence() -> None:
    assert md("a *b* | <script>\n[x](y)") == r"a \*b\* \| \<script\> \[x\](y)"
    block = fenced("text with ``` inside", "yaml")
    assert block.startswith("````yaml\n") and block.endswith("\n````")
    assert table(["a", "b"], [[1, 2]]) == "| a | b |\n|---|---|\n| 1 | 2 |"
