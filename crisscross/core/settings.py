"""Stage settings: typed dataclasses whose fields are the stage's ``params.yaml`` section.

A stage's defaults come from its settings class (one home for each default), and its section is
checked against the class where it is read: unknown keys, wrong types, values out of range or not
among the choices fail with the dotted key (``similarity.k``) and what is allowed.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, Field, field, fields
from typing import Any, TypeVar

from crisscross.core.errors import ParamError

T = TypeVar("T")


def setting(
    default: Any, *, low: float | None = None, high: float | None = None, open_range: bool = False, choices: tuple[Any, ...] | None = None
) -> Any:
    """A settings field with its allowed range (inclusive; ``open_range``: both ends excluded) or
    choices (for strings, or for each element of a list; of a mapping, the range is its values'
    and the choices its keys')."""
    metadata = {"low": low, "high": high, "open": open_range, "choices": choices}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _default(f: Field) -> Any:
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]


def params_of(settings: Any) -> dict[str, Any]:
    """A settings class's defaults, or an instance's values, as a params section (tuples as lists)."""
    out = {}
    for f in fields(settings):
        value = _default(f) if isinstance(settings, type) else getattr(settings, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def settings_from_params(cls: type[T], given: Mapping[str, Any], section: str, where: str = "params", **fixed: Any) -> T:
    """An instance of ``cls`` from a params section over the class defaults, every value checked."""
    if not isinstance(given, Mapping):
        raise ParamError(f"{where}: {section} must be a mapping of keys to values, got {type(given).__name__}")
    known = [f.name for f in fields(cls) if f.name not in fixed]
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ParamError(f"{where}: unknown {section} params {unknown}; known: {sorted(known)}")
    hints = typing.get_type_hints(cls)
    values = {
        f.name: _check(f"{where}: {section}.{f.name}", given[f.name], hints[f.name], f.metadata) for f in fields(cls) if f.name in given
    }
    return cls(**values, **fixed)


def _check(key: str, value: Any, hint: Any, rules: Mapping[str, Any]) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        arms = [a for a in args if a is not type(None)]
        if len(arms) > 1:  # e.g. ``str | tuple[str, ...]``: the first arm the value passes
            refusals = []
            for arm in arms:
                try:
                    return _check(key, value, arm, rules)
                except ParamError as error:
                    refusals.append(str(error).removeprefix(f"{key} "))
            raise ParamError(f"{key} {'; or '.join(refusals)}")
        hint = arms[0]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ParamError(f"{key} must be a list, got {value!r}")
        return tuple(_check(f"{key}[{i}]", v, args[0], rules) for i, v in enumerate(value))
    if origin in (Mapping, dict) or hint in (dict, Mapping) or origin is typing.Mapping:
        if not isinstance(value, Mapping):
            raise ParamError(f"{key} must be a mapping, got {value!r}")
        keys = rules.get("choices")
        stray = [k for k in value if keys is not None and k not in keys]
        if stray:
            raise ParamError(f"{key} has key {stray[0]!r}; its keys must be among {list(keys)}")
        if len(args) == 2:
            return {k: _check(f"{key}.{k}", v, args[1], {**rules, "choices": None}) for k, v in value.items()}
        return dict(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ParamError(f"{key} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParamError(f"{key} must be an integer, got {value!r}")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ParamError(f"{key} must be a finite number, got {value!r}")
        value = float(value)
    elif hint is str and (not isinstance(value, str) or not value):
        raise ParamError(f"{key} must be a non-empty string, got {value!r}")
    low, high, choices = rules.get("low"), rules.get("high"), rules.get("choices")
    if choices is not None and value not in choices:
        raise ParamError(f"{key} must be one of {list(choices)}, got {value!r}")
    strict = bool(rules.get("open"))
    if (low is not None and (value <= low if strict else value < low)) or (
        high is not None and (value >= high if strict else value > high)
    ):
        bounds = " and ".join(
            b
            for b in (
                f"{'>' if strict else '>='} {low}" if low is not None else "",
                f"{'<' if strict else '<='} {high}" if high is not None else "",
            )
            if b
        )
        raise ParamError(f"{key} must be {bounds}, got {value!r}")
    return value
