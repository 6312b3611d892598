"""Compiled kernels that import numba on their first call, not when their module is imported.

numba takes 0.2–0.3 s to import, and the modules holding kernels (top-K selection, rank counting)
are imported by stage commands that call them late or never: ``crisscross filter --help`` should
not pay for a compiler.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

Kernel = TypeVar("Kernel", bound=Callable[..., Any])

_LOCK = threading.Lock()  # block-pair threads may make the first call together
_PENDING: dict[str, list[Callable[..., Any]]] = {}  # module name → its kernels not compiled yet


def njit(function: Kernel) -> Kernel:
    """``numba.njit(cache=True, nogil=True)(function)``, made on the first call of any kernel of its module.

    The compiled dispatchers then replace the module's names for all its kernels at once: numba
    resolves a kernel's calls to another kernel through the module's globals when it compiles, and
    later calls from Python reach the dispatcher without this wrapper.
    """
    _PENDING.setdefault(function.__module__, []).append(function)

    @functools.wraps(function)
    def first_call(*args: Any) -> Any:
        compile_module(function.__module__)
        return function.__globals__[function.__name__](*args)

    return first_call  # type: ignore[return-value]


def compile_module(module: str) -> None:
    """Swap in numba dispatchers for ``module``'s kernels (compilation itself happens per signature on call)."""
    with _LOCK:
        pending = _PENDING.pop(module, [])
        if pending:
            import numba

            for function in pending:
                function.__globals__[function.__name__] = numba.njit(cache=True, nogil=True)(function)
