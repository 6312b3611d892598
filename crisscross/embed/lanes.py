"""Several batches encoded at once in one process, with the bytes of one at a time.

Multi-threaded kernels (OpenBLAS, torch's intra-op pool, MKL) split a product's sums by thread
count, so the numeric policy computes with one kernel thread and the vectors' bytes do not follow
the machine.  The cores come back from whole batches side by side: each *lane* is a thread with its
own loaded copy of the model (no state that a model writes is shared between threads, so a tokenizer
that is not thread-safe is no concern; what it only reads, such as use-m3's weights, is read once
per process), and every batch is computed exactly as it would be alone, with the same
single-threaded kernels.  The number of lanes therefore changes the speed, never the bytes.  An
encoder whose work is Python throughout gains nothing from threads, so its one lane can be the
calling thread itself (``Lanes(..., inline=True)``).
"""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from crisscross.embed.encoders.base import Encoder

Result = TypeVar("Result")
Item = TypeVar("Item")


class Lanes:
    """A pool of loaded encoders, one per thread; a task borrows whichever encoder is free."""

    def __init__(self, encoders: list[Encoder], *, inline: bool = False) -> None:
        """``inline``: one lane that is the calling thread, for an encoder that holds the interpreter
        lock (``Encoder.holds_interpreter``): a lane thread could not run beside the caller, and
        handing over each batch and its result cost it the lock twice (all of COCO with
        ``bow-glove50`` alone: 0.82× the embed's time)."""
        if not encoders:
            raise ValueError("lanes need at least one encoder")
        if inline and len(encoders) > 1:
            raise ValueError("an inline lane has one encoder")
        self.width = len(encoders)
        self._free: queue.SimpleQueue[Encoder] = queue.SimpleQueue()
        for encoder in encoders:
            self._free.put(encoder)
        self._pool = None if inline else ThreadPoolExecutor(self.width, thread_name_prefix="encode-lane")

    def submit(self, task: Callable[[Encoder], Result]) -> Future[Result]:
        """Run ``task`` on a lane with an encoder no other task holds meanwhile (at once, inline)."""
        if self._pool is not None:
            return self._pool.submit(self._borrow, task)
        done: Future[Result] = Future()
        try:
            done.set_result(self._borrow(task))
        except BaseException as error:  # raised where the result is asked for, as from a lane
            done.set_exception(error)
        return done

    def _borrow(self, task: Callable[[Encoder], Result]) -> Result:
        encoder = self._free.get()
        try:
            return task(encoder)
        finally:
            self._free.put(encoder)

    def map(self, task: Callable[[Encoder, Item], Result], items: Iterable[Item]) -> Iterator[Result]:
        """``task`` of every item, in the items' order."""
        window = InOrder(self)
        for item in items:
            yield from window.put(lambda encoder, item=item: task(encoder, item))
        yield from window.drain()


class InOrder:
    """Tasks given one at a time (as a Beam ``DoFn`` gets its batches), results back in the same
    order; enough are in flight to keep every lane busy, and no more, so memory stays bounded."""

    def __init__(self, lanes: Lanes) -> None:
        self._lanes = lanes
        self._pending: deque[Future[Any]] = deque()

    def put(self, task: Callable[[Encoder], Result]) -> list[Result]:
        """Start ``task``; the results of the oldest tasks once more than the lanes are waiting."""
        self._pending.append(self._lanes.submit(task))
        done = []
        while len(self._pending) > self._lanes.width:
            done.append(self._pending.popleft().result())
        return done

    def drain(self) -> list[Result]:
        """The results of every task still in flight, oldest first."""
        done = [future.result() for future in self._pending]
        self._pending.clear()
        return done


def lane_count(lanes: int, threads: int, cores: int) -> int:
    """Lanes for ``lanes`` as set (0: as many as fill ``cores`` with ``threads`` kernel threads each)."""
    return lanes or max(1, cores // max(1, threads))
