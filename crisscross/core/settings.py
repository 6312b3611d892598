"""Stage settings: typed dataclasses whose fields are the stage's ``params.yaml`` section.

A stage's defaults come from its settings class (one home for each default), and its section is
checked against the class where it is read: unknown keys, wrong types, values out of range or not
among the choices fail with the dotted key (``similarity.k``) and what is allowed.  The check goes
down every nested mapping: a field typed as a settings class is a nested section checked key by
key (``annotate.replication.alpha``; a rule across a class's fields names the field that breaks
it, :class:`RuleError`), and a mapping of options whose keys depend on a named
implementation (``ingest.reader_options`` of the reader ``ingest.reader``) is checked against what
that implementation declares (:class:`Options`, :meth:`~crisscross.core.registry.Registry.options`).

The params file itself is read by :func:`parse_params` (:class:`ParamsLoader`): a key written twice
at any depth, a key that is not a string, aliases that expand without bound, or a file that is not
YAML is a one-line error naming the file and line, never a document that says something other
than what it seems to.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypeVar

import yaml

from crisscross.core.errors import ParamError

if TYPE_CHECKING:
    from crisscross.core.registry import Registry

T = TypeVar("T")


def setting(
    default: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    open_range: bool = False,
    choices: tuple[Any, ...] | Callable[[], Sequence[Any]] | None = None,
) -> Any:
    """A settings field with its allowed range (inclusive; ``open_range``: both ends excluded) or
    choices (for strings, or for each element of a list; of a mapping, the range is its values'
    and the choices its keys').  A nested section is a field typed as a settings class, with
    ``field(default_factory=TheClass)``."""
    metadata = {"low": low, "high": high, "open": open_range, "choices": choices}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


class RuleError(ValueError):
    """A rule across a settings class's fields, broken: raised by the class (``__post_init__``)
    with the field whose value breaks it (``raters_per_batch``, ``anchors.STS``), so the params
    error names its dotted key (``annotate.simulate.raters_per_batch``) as a field's own check does."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name} {problem}")
        self.field_name, self.problem = field_name, problem


@dataclass(frozen=True)
class Options:
    """``Annotated[Mapping[str, Any], Options(...)]``: the keyword options of the implementation of
    ``registry`` that ``named_by`` names — a sibling setting (``reader_options`` of ``reader``), or,
    with ``beside``, a key of the mapping itself, whose other fixed keys the settings class
    ``beside`` declares (a model entry's ``source`` and ``gallery``).  The options are checked
    against :meth:`Registry.options <crisscross.core.registry.Registry.options>` and stay a mapping
    of the keys given: the implementation's keyword arguments."""

    registry: Registry[Any]
    named_by: str
    beside: type | None = None

    def check(self, key: _Key, value: Any, context: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise ParamError(f"{key} must be a mapping, got {value!r}")
        fixed = [f.name for f in fields(self.beside)] if self.beside else []
        own: dict[str, Any] = {}
        if self.beside:
            made, own = _settings(self.beside, {k: v for k, v in value.items() if k in fixed}, key)
            name = getattr(made, self.named_by)
        else:
            name = context[self.named_by]
        options = _options(self.registry, name, {k: v for k, v in value.items() if k not in fixed}, key, fixed)
        return {k: own[k] if k in own else options[k] for k in value}


class _Key(NamedTuple):
    """Where a value sits: the params file (or what is being built) and the dotted key in it."""

    where: str
    path: str

    def __str__(self) -> str:
        return f"{self.where}: {self.path}" if self.where and self.path else self.where or self.path

    def sub(self, name: object) -> _Key:
        return _Key(self.where, f"{self.path}.{name}" if self.path else str(name))

    def item(self, index: int) -> _Key:
        return _Key(self.where, f"{self.path}[{index}]")


def _default(f: Field) -> Any:
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]


def _has_default(f: Field) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def params_of(settings: Any) -> dict[str, Any]:
    """A settings class's defaults, or an instance's values, as a params section (tuples as lists;
    nested sections stay settings instances)."""
    out = {}
    for f in fields(settings):
        value = _default(f) if isinstance(settings, type) else getattr(settings, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def settings_from_params(cls: type[T], given: Mapping[str, Any], section: str, where: str = "params", **fixed: Any) -> T:
    """An instance of ``cls`` from a params section over the class defaults, every value checked."""
    return _settings(cls, given, _Key(where, section), fixed)[0]


def checked_options(registry: Registry[Any], name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` checked as keyword options of ``registry``'s implementation ``name`` (what
    :meth:`Registry.create <crisscross.core.registry.Registry.create>` passes on)."""
    return _options(registry, name, given, _Key(f"{registry.kind} {name!r}", ""), ())


def _options(registry: Registry[Any], name: str, given: Mapping[str, Any], key: _Key, beside: typing.Sequence[str]) -> dict[str, Any]:
    cls = registry.options(name)
    known = [f.name for f in fields(cls)]
    stray = sorted(str(k) for k in given if k not in known)
    if stray:
        raise ParamError(
            f"{key.sub(stray[0])} is not an option of {registry.kind} {name!r}; options: {', '.join(sorted([*known, *beside]))}"
        )
    return _settings(cls, given, key, required_by=f" by {registry.kind} {name!r}")[1]


def _settings(
    cls: type[T], given: Any, key: _Key, fixed: Mapping[str, Any] | None = None, required_by: str = ""
) -> tuple[T, dict[str, Any]]:
    """An instance of ``cls`` from ``given`` over its defaults, and the checked values of the keys
    given.  A rule across fields the class refuses names the field (:class:`RuleError`), any other
    ``ValueError`` of the class the section."""
    fixed = fixed or {}
    if not isinstance(given, Mapping):
        raise ParamError(f"{key} must be a mapping of keys to values, got {type(given).__name__}")
    known = [f.name for f in fields(cls) if f.name not in fixed]
    unknown = sorted(str(k) for k in given if k not in known)
    if unknown:
        raise ParamError(f"{key.where + ': ' if key.where else ''}unknown {key.path} params {unknown}; known: {sorted(known)}")
    missing = [f.name for f in fields(cls) if f.name not in given and f.name not in fixed and not _has_default(f)]
    if missing:
        raise ParamError(f"{key.sub(missing[0])} is required{required_by}")
    hints = typing.get_type_hints(cls, include_extras=True)
    context = {f.name: _default(f) for f in fields(cls) if _has_default(f)}
    values: dict[str, Any] = {}
    for f in sorted(fields(cls), key=lambda f: _options_of(hints[f.name]) is not None):  # options last: they read their implementation
        if f.name in given or (_options_of(hints[f.name]) and f.name in context):  # the default options may lack a required one
            value = given[f.name] if f.name in given else context[f.name]
            values[f.name] = _check(key.sub(f.name), value, hints[f.name], f.metadata, {**context, **values})
    try:
        made = cls(**values, **fixed)
    except ParamError:
        raise
    except RuleError as error:
        raise ParamError(f"{key.sub(error.field_name)} {error.problem}") from None
    except ValueError as error:
        raise ParamError(f"{key}: {error}") from None
    return made, {k: values[k] for k in given}


def _options_of(hint: Any) -> Options | None:
    if typing.get_origin(hint) is Annotated:
        return next((extra for extra in hint.__metadata__ if isinstance(extra, Options)), None)
    return None


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def _choices(rules: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """A setting's choices; a callable gives them when checked (task types: plugins register late)."""
    choices = rules.get("choices")
    return tuple(choices()) if callable(choices) else choices


def _check(key: _Key, value: Any, hint: Any, rules: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> Any:
    options = _options_of(hint)
    if options is not None:
        return options.check(key, value, context or {})
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        arms = [a for a in args if a is not type(None)]
        if len(arms) > 1:  # e.g. ``str | tuple[str, ...]``: the first arm the value passes
            refusals = []
            for arm in arms:
                try:
                    return _check(key, value, arm, rules, context)
                except ParamError as error:
                    refusals.append(str(error).removeprefix(f"{key} "))
            raise ParamError(f"{key} {'; or '.join(refusals)}")
        hint = arms[0]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _settings(hint, value, key)[0]
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ParamError(f"{key} must be a list, got {value!r}")
        if args and args[-1] is not Ellipsis:  # a fixed length, e.g. ``tuple[float, float]``
            if len(value) != len(args):
                raise ParamError(f"{key} must be a list of {len(args)}, got {value!r}")
            return tuple(_check(key.item(i), v, arm, rules) for i, (v, arm) in enumerate(zip(value, args, strict=True)))
        return tuple(_check(key.item(i), v, args[0], rules) for i, v in enumerate(value))
    if origin in (Mapping, dict) or hint in (dict, Mapping) or origin is typing.Mapping:
        if not isinstance(value, Mapping):
            raise ParamError(f"{key} must be a mapping, got {value!r}")
        keys = _choices(rules)
        stray = [k for k in value if keys is not None and k not in keys]
        if stray:
            raise ParamError(f"{key} has key {stray[0]!r}; its keys must be among {list(keys)}")
        if len(args) == 2:
            return {k: _check(key.sub(k), v, args[1], {**rules, "choices": None}) for k, v in value.items()}
        return dict(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ParamError(f"{key} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParamError(f"{key} must be an integer, got {value!r}")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
            raise ParamError(f"{key} must be a finite number, got {value!r}")
        value = float(value)
    elif hint is str and (not isinstance(value, str) or not value):
        raise ParamError(f"{key} must be a non-empty string, got {value!r}")
    low, high, choices = rules.get("low"), rules.get("high"), _choices(rules)
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


# --------------------------------------------------------------------------- the params file

MAX_DEPTH = 64  # nesting a params file may have, aliases expanded (deeper is a mistake or an attack, not settings)
MAX_VALUES = 100_000  # values it may hold, aliases expanded (a billion-laughs file holds 10⁹ in a few lines)


class RefusedYAML(yaml.MarkedYAMLError):
    """YAML that parses, but that a params file must not hold (its problem is the message)."""


class ParamsLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` for params files.  It refuses a key written twice in one mapping (YAML
    keeps the last without a word) and a key that is not a string (``on:`` is read as ``True``).
    Aliases stay (``yaml.safe_dump`` writes one for a value used twice), but a document whose aliases
    expand past :data:`MAX_VALUES` values (one alias of a list of aliases … : a billion-laughs bomb)
    or past :data:`MAX_DEPTH` levels, or that holds an alias inside the value it names, is refused.
    A value YAML resolves but cannot build (``2026-02-30``, ``0x_``, ``!!int ""``) is a YAML error of
    its line, not an exception from inside the loader."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        if self._depth >= MAX_DEPTH:  # before the composer's recursion runs out
            raise RefusedYAML(problem=f"nested more than {MAX_DEPTH} levels deep", problem_mark=self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> yaml.Node:
        document = super().compose_document()
        _expanded(document, 1, {}, set())
        return document

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as error:  # a constructor failing on a value its tag promised (``!!int ""``, ``!!bool x``, ``2026-02-30``)
            written = " ".join(repr(node.value)[:80].split())
            raise RefusedYAML(
                problem=f"{written} cannot be read as {node.tag.rsplit(':', 1)[-1]} ({error})", problem_mark=node.start_mark
            ) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[str, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                problem = (
                    f"key {key_node.value!r} is read as {type(key).__name__} {key!r}, not a string: quote it"
                    if isinstance(key_node, yaml.ScalarNode)
                    else f"a {key_node.id} cannot be a key: keys are strings"
                )
                raise RefusedYAML(problem=problem, problem_mark=key_node.start_mark)
            if key in first:
                raise RefusedYAML(
                    problem=f"key {key!r} written twice (first at line {first[key].line + 1})", problem_mark=key_node.start_mark
                )
            first[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def _expanded(node: yaml.Node, level: int, seen: dict[int, tuple[int, int]], open_nodes: set[int]) -> tuple[int, int]:
    """How many values ``node`` holds and how many levels deep, every alias expanded (an alias is
    its anchor's node itself, each counted once in ``seen``); refused past the limits or on a loop."""
    if id(node) in open_nodes:
        raise RefusedYAML(problem="an alias inside the value it names (a loop)", problem_mark=node.start_mark)
    if id(node) not in seen:
        open_nodes.add(id(node))
        pairs = node.value if isinstance(node, yaml.MappingNode) else []
        children = node.value if isinstance(node, yaml.SequenceNode) else [child for pair in pairs for child in pair]
        below = [_expanded(child, level + 1, seen, open_nodes) for child in children]
        open_nodes.discard(id(node))
        seen[id(node)] = (1 + sum(values for values, _ in below), 1 + max((levels for _, levels in below), default=0))
    values, levels = seen[id(node)]
    if values > MAX_VALUES:
        raise RefusedYAML(problem=f"holds more than {MAX_VALUES:,} values once its aliases are expanded", problem_mark=node.start_mark)
    if level + levels - 1 > MAX_DEPTH:
        raise RefusedYAML(problem=f"nested more than {MAX_DEPTH} levels deep once its aliases are expanded", problem_mark=node.start_mark)
    return values, levels


def parse_params(text: str, name: str) -> Any:
    """The YAML document of a params file's text, read by :class:`ParamsLoader`; anything it cannot
    read is a :class:`~crisscross.core.errors.ParamError` of one line, ``name:line: what``."""
    loader = None
    try:
        loader = ParamsLoader(text)  # refuses control characters at once
        return loader.get_single_data()
    except RefusedYAML as error:
        raise ParamError(f"{name}:{error.problem_mark.line + 1}: {error.problem}") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = " ".join(": ".join(str(part) for part in (error.context, error.problem) if part).split())
        raise ParamError(f"{name}{f':{mark.line + 1}' if mark else ''}: not valid YAML ({problem})") from None
    except yaml.reader.ReaderError as error:
        line = text.count("\n", 0, error.position) + 1
        raise ParamError(f"{name}:{line}: not valid YAML (character #x{error.character:04x} is not allowed)") from None
    finally:
        if loader is not None:
            loader.dispose()
