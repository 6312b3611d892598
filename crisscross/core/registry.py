"""Name → implementation registries, so stages choose readers, encoders and formats by name.

A spec is ``name`` or ``name:argument`` (``tfhub:/models/use``, ``precomputed:vecs.npz``); the
argument, when present, is passed to the factory.  A factory takes no argument, needs one, or
takes one ``OPTIONAL``ly (``eccv`` = the package's files, ``eccv:<folder>`` = a folder's).
Unknown names fail with the list of known ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from crisscross.core.errors import UserError

T = TypeVar("T")
OPTIONAL = "optional"  # register(..., takes_argument=OPTIONAL): ``name`` and ``name:argument`` both work


class UnknownNameError(UserError, KeyError):
    """A spec names nothing in a registry; the message lists what is registered."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly.
        return str(self.args[0])


class Registry(Generic[T]):
    """A named table of factories, filled with the ``register`` decorator."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}
        self._takes_argument: dict[str, bool | str] = {}
        self._defaults: dict[str, str] = {}

    def register(
        self, name: str, *, takes_argument: bool | str = False, default: str | None = None
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """``default``: the argument a spec without one gets (``trimmed-mean`` → ``trimmed-mean:0.2``)."""

        def add(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._factories[name] = factory
            self._takes_argument[name] = takes_argument
            if default is not None:
                self._defaults[name] = default
            return factory

        return add

    def names(self) -> list[str]:
        return sorted(self._factories)

    def create(self, spec: str, **kwargs: object) -> T:
        """Build the implementation a spec names (``name`` or ``name:argument``)."""
        name, sep, argument = spec.partition(":")
        if name not in self._factories:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
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
