"""Name → implementation registries, so stages choose readers, encoders and formats by name.

A spec is ``name`` or ``name:argument`` (``tfhub:/models/use``, ``precomputed:vecs.npz``); the
argument, when present, is passed to the factory.  A factory takes no argument, needs one, or
takes one ``OPTIONAL``ly (``eccv`` = the package's files, ``eccv:<folder>`` = a folder's).
Unknown names fail with the list of known ones.

A registry whose implementations take keyword options from params (readers, similarity backends,
model sources: ``Registry(kind, options=True)``) declares them: :meth:`Registry.options` is each
implementation's settings class, and :meth:`Registry.create` checks the options against it, as
the params check does (:mod:`crisscross.core.settings`).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from crisscross.core.errors import UserError
from crisscross.core.settings import checked_options

T = TypeVar("T")
OPTIONAL = "optional"  # register(..., takes_argument=OPTIONAL): ``name`` and ``name:argument`` both work


class UnknownNameError(UserError, KeyError):
    """A spec names nothing in a registry; the message lists what is registered."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly.
        return str(self.args[0])


class Registry(Generic[T]):
    """A named table of factories, filled with the ``register`` decorator."""

    def __init__(self, kind: str, *, options: bool = False, supplied: tuple[str, ...] = ()) -> None:
        """``options``: factories take keyword options, checked on :meth:`create`; ``supplied``: the
        arguments callers pass themselves (a model source's ``name``), which are no options."""
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}
        self._takes_argument: dict[str, bool | str] = {}
        self._defaults: dict[str, str] = {}
        self._checks_options = options
        self._supplied = supplied
        self._options: dict[str, type] = {}

    def register(
        self, name: str, *, takes_argument: bool | str = False, default: str | None = None, options: type | None = None
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """``default``: the argument a spec without one gets (``trimmed-mean`` → ``trimmed-mean:0.2``);
        ``options``: the settings class of the factory's keyword options, when its signature cannot
        say all (a rule across options)."""

        def add(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._factories[name] = factory
            self._takes_argument[name] = takes_argument
            if default is not None:
                self._defaults[name] = default
            if options is not None:
                self._options[name] = options
            return factory

        return add

    def names(self) -> list[str]:
        return sorted(self._factories)

    def _factory(self, name: str) -> Callable[..., T]:
        if name not in self._factories:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        return self._factories[name]

    def options(self, name: str) -> type:
        """The settings class of ``name``'s keyword options: the one registered with it, or the
        factory itself when it is a settings dataclass, else one made from its signature's keyword
        parameters (types from its annotations; one without a default is required), the
        ``supplied`` ones left out."""
        factory = self._factory(name)
        if name in self._options:
            return self._options[name]
        if dataclasses.is_dataclass(factory):
            return factory
        hints = typing.get_type_hints(factory)
        declared = []
        for parameter in inspect.signature(factory).parameters.values():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise TypeError(f"{self.kind} {name!r} takes *args or **kwargs: its options cannot be checked")
            if parameter.name not in self._supplied:
                default = dataclasses.field() if parameter.default is parameter.empty else dataclasses.field(default=parameter.default)
                declared.append((parameter.name, hints.get(parameter.name, Any), default))
        self._options[name] = dataclasses.make_dataclass(f"{name} options", declared, frozen=True, kw_only=True)
        return self._options[name]

    def create(self, spec: str, **kwargs: object) -> T:
        """Build the implementation a spec names (``name`` or ``name:argument``); a registry with
        ``options`` checks the keyword options first."""
        name, sep, argument = spec.partition(":")
        self._factory(name)
        if self._checks_options:
            given = {k: v for k, v in kwargs.items() if k not in self._supplied}
            kwargs = {**kwargs, **checked_options(self, name, given)}
        if self._takes_argument[name] == OPTIONAL:
            return self._factories[name](argument, **kwargs) if argument else self._factories[name](**kwargs)
        if self._takes_argument[name]:
            argument = argument or self._defaults.get(name, "")
            if not argument:
                raise ValueError(f"{self.kind} {name!r} needs an argument: {name}:<value>")
            return self._factories[name](argument, **kwargs)
        if sep:
            raise ValueError(f"{self.kind} {name!r} takes no argument, got {spec!r}")
        return self._factories[name](**kwargs)
