"""The settings check: nested sections, implementation options, fixed-length lists, numbers out of a float's reach."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest

from crisscross.core.errors import ParamError
from crisscross.core.registry import Registry
from crisscross.core.settings import Options, RuleError, setting, settings_from_params

PARTS: Registry[Any] = Registry("part", options=True, supplied=("name",))


@PARTS.register("plain")
def plain_part(name: str, *, size: int = 3, label: str | None = None) -> tuple[str, int, str | None]:
    return name, size, label


@PARTS.register("needs-path")
def path_part(name: str, *, path: str) -> tuple[str, str]:
    return name, path


@PARTS.register("typed")
@dataclass(frozen=True)
class TypedPart:
    weight: float = setting(1.0, low=0.0)
    pair: tuple[float, float] = (0.0, 1.0)

    def __post_init__(self) -> None:
        if self.pair[0] >= self.pair[1]:
            raise ValueError("pair must rise")


@dataclass(frozen=True)
class Inner:
    share: float = setting(0.5, low=0.0, high=1.0)
    per_type: Mapping[str, int] = setting({}, low=1, choices=("A", "B"))
    floor: float = 0.0

    def __post_init__(self) -> None:
        if self.floor > self.share:
            raise RuleError("floor", f"must be at most share={self.share}, got {self.floor}")


@dataclass(frozen=True)
class Entry:
    kind: str = setting("plain", choices=tuple(PARTS.names()))
    shown: bool = True


ENTRY = Annotated[Mapping[str, Any], Options(PARTS, "kind", beside=Entry)]


@dataclass(frozen=True)
class Outer:
    part: str = setting("plain", choices=tuple(PARTS.names()))
    part_options: Annotated[Mapping[str, Any], Options(PARTS, "part")] = setting({})
    inner: Inner = field(default_factory=Inner)
    entries: Mapping[str, ENTRY] = setting({})
    rate: float = 1.0


def outer(given: Mapping[str, Any]) -> Outer:
    return settings_from_params(Outer, given, "outer", "p.yaml")


def test_a_nested_section_is_checked_key_by_key_over_its_defaults() -> None:
    assert outer({}).inner == Inner()
    assert outer({"inner": {"per_type": {"A": 2}}}).inner == Inner(0.5, {"A": 2})
    for given, message in (
        ({"inner": {"shares": 1}}, r"p.yaml: unknown outer.inner params \['shares'\]; known: \['floor', 'per_type', 'share'\]"),
        ({"inner": {"share": 2}}, "p.yaml: outer.inner.share must be >= 0.0 and <= 1.0, got 2"),
        ({"inner": {"per_type": {"C": 2}}}, "p.yaml: outer.inner.per_type has key 'C'"),
        ({"inner": {"per_type": {"A": 0}}}, "p.yaml: outer.inner.per_type.A must be >= 1, got 0"),
        ({"inner": [1]}, "p.yaml: outer.inner must be a mapping of keys to values, got list"),
        ({"inner": {"floor": 0.9}}, r"p.yaml: outer.inner.floor must be at most share=0.5, got 0.9"),  # a rule across fields
    ):
        with pytest.raises(ParamError, match=message):
            outer(given)


def test_options_are_checked_against_what_the_named_implementation_declares() -> None:
    assert outer({"part_options": {"size": 5}}).part_options == {"size": 5}
    assert outer({"part": "needs-path", "part_options": {"path": "x"}}).part_options == {"path": "x"}
    assert outer({"part": "typed", "part_options": {"pair": [1, 2]}}).part_options == {"pair": (1.0, 2.0)}
    for given, message in (
        ({"part_options": {"sise": 5}}, "p.yaml: outer.part_options.sise is not an option of part 'plain'; options: label, size"),
        ({"part_options": {"name": "x"}}, "p.yaml: outer.part_options.name is not an option of part 'plain'"),  # supplied by the caller
        ({"part_options": {"size": "5"}}, "p.yaml: outer.part_options.size must be an integer, got '5'"),
        ({"part": "needs-path"}, "p.yaml: outer.part_options.path is required by part 'needs-path'"),
        ({"part": "typed", "part_options": {"weight": -1}}, "p.yaml: outer.part_options.weight must be >= 0.0, got -1"),
        ({"part": "typed", "part_options": {"pair": [1]}}, r"p.yaml: outer.part_options.pair must be a list of 2, got \[1\]"),
        ({"part": "typed", "part_options": {"pair": [2, 1]}}, "p.yaml: outer.part_options: pair must rise"),
        ({"part": "other"}, "p.yaml: outer.part must be one of"),
    ):
        with pytest.raises(ParamError, match=message):
            outer(given)


def test_entries_name_their_implementation_inside_and_stay_as_written() -> None:
    entries = {"a": {"kind": "needs-path", "path": "p", "shown": False}, "b": {"size": 2}}
    assert outer({"entries": entries}).entries == entries
    for given, message in (
        ({"b": {"sise": 2}}, "p.yaml: outer.entries.b.sise is not an option of part 'plain'; options: kind, label, shown, size"),
        ({"b": {"kind": "needs-path"}}, "p.yaml: outer.entries.b.path is required"),
        ({"b": {"shown": "yes"}}, "p.yaml: outer.entries.b.shown must be true or false"),
        ({"b": 3}, "p.yaml: outer.entries.b must be a mapping, got 3"),
    ):
        with pytest.raises(ParamError, match=message):
            outer({"entries": given})


def test_create_checks_options_the_same_way() -> None:
    assert PARTS.create("plain", name="n", size=4) == ("n", 4, None)
    with pytest.raises(ParamError, match="part 'plain': sise is not an option of part 'plain'; options: label, size"):
        PARTS.create("plain", name="n", sise=4)
    with pytest.raises(ParamError, match="part 'typed': pair must rise"):
        PARTS.create("typed", pair=(1, 0))


def test_a_number_too_large_for_a_float_is_refused_not_an_overflow() -> None:
    with pytest.raises(ParamError, match="p.yaml: outer.rate must be a finite number"):
        outer({"rate": 10**400})
