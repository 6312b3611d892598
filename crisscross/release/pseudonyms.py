"""Pseudonymous rater ids: a keyed hash of the worker id, with the key kept out of the release.

A plain hash of a crowd-platform worker id can be reversed by hashing candidate ids, so the
release uses HMAC-SHA256 with a secret salt.  The salt comes from an environment variable or a
file outside the release folder (created once, readable by its owner only); without it nobody can
link a pseudonym to a worker, and with the same salt every release names a rater the same way,
so raters stay comparable across versions.  Simulated raters are not people: they are named under
a public key (:data:`PUBLIC_SALT`), so a simulated release is byte-identical wherever it is built.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from crisscross.core.errors import InputError, ParamError

PREFIX = "rater-"
DIGEST_CHARS = 16  # 64 bits: collisions need ~4 billion raters
MIN_SALT_BYTES = 16
NEW_SALT_BYTES = 32


@dataclass(frozen=True)
class Salt:
    """The secret key and where it came from (the place, never the value, goes into reports)."""

    key: bytes
    origin: str

    def __post_init__(self) -> None:
        if len(self.key) < MIN_SALT_BYTES:
            raise ParamError(f"the pseudonym salt from {self.origin} has {len(self.key)} bytes; it needs at least {MIN_SALT_BYTES}")


# Simulated raters' key: public on purpose, since there is nobody to protect and a demo release must
# come out the same on every machine (the secret salt is made per machine).
PUBLIC_SALT = Salt(b"crisscross: simulated raters are not people", "the public key of simulated raters")


def pseudonym(worker: str, salt: Salt) -> str:
    """``rater-<16 hex>``: HMAC-SHA256 of the worker id under the salt."""
    digest = hmac.new(salt.key, worker.encode("utf-8"), hashlib.sha256).hexdigest()
    return PREFIX + digest[:DIGEST_CHARS]


def pseudonyms(workers: Iterable[str], salt: Salt, simulated: Collection[str] = ()) -> dict[str, str]:
    """Worker id → pseudonym for each distinct worker (under :data:`PUBLIC_SALT` for the
    ``simulated`` ones); refuses a collision rather than merging two raters."""
    table = {w: pseudonym(w, PUBLIC_SALT if w in simulated else salt) for w in sorted(set(workers))}
    if len(set(table.values())) != len(table):
        raise ParamError(f"two workers share a pseudonym under the salt from {salt.origin}: use another salt")
    return table


def load_salt(env_var: str, salt_file: str, out: str, environ: Mapping[str, str] | None = None) -> Salt:
    """The salt from ``$env_var`` if set, else from ``salt_file`` (created with a fresh random salt,
    mode 0600, when missing).  A salt file inside the release folder ``out`` is refused: it would
    ship the key with the pseudonyms."""
    environ = os.environ if environ is None else environ
    value = environ.get(env_var)
    if value:
        return Salt(value.encode("utf-8"), f"${env_var}")
    path = Path(salt_file).expanduser()
    release = Path(out).resolve()
    if path.resolve() == release or release in path.resolve().parents:
        raise ParamError(f"the salt file {path} lies inside the release folder {out}: keep it outside, or the release would carry its key")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(NEW_SALT_BYTES) + "\n")
    try:
        key = path.read_bytes().strip()
    except OSError as error:
        raise InputError(f"cannot read the pseudonym salt file {path}: {error.strerror}") from error
    return Salt(key, str(path))
