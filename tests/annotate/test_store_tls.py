"""The store's PostgreSQL URL takes libpq's ``sslmode`` and ``sslrootcert``: checked against the run's
scratch server (no TLS) and a private one serving TLS with a certificate made here."""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from crisscross.annotate.store import Store, StoreError
from tests import scratch_postgres

NOW = 1_800_000_000.0


def on_tls(store: Store) -> bool:
    """Whether the store's connection to PostgreSQL is encrypted, as the server sees it."""
    with store._transaction(write=False) as run:
        return bool(run("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()[0])


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PostgreSQL wants them (the key readable by the server's user only)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crisscross test server")])
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert, secret = folder / "server.crt", folder / "server.key"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    secret.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    secret.chmod(0o600)
    user = scratch_postgres.account()
    if user:
        os.chown(secret, user.pw_uid, user.pw_gid)
    return cert, secret


@pytest.fixture(scope="module")
def tls_server() -> Iterator[tuple[scratch_postgres.Server, Path]]:
    """A private PostgreSQL serving TLS only to those who ask (as a default server does), and its certificate."""
    folder = Path(tempfile.mkdtemp(prefix="crisscross-tls-"))
    folder.chmod(0o755)  # the server's user reads the files here
    try:
        cert, key = self_signed(folder)
        settings = {**scratch_postgres.SETTINGS, "ssl": "on", "ssl_cert_file": str(cert), "ssl_key_file": str(key)}
        try:
            with scratch_postgres.private(settings) as server:
                yield server, cert
        except scratch_postgres.Unavailable as error:
            pytest.fail(f"PostgreSQL with TLS: {error}", pytrace=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_by_default_tls_is_used_where_offered_and_plain_where_not(tls_server, postgres_database: str) -> None:
    server, _ = tls_server
    assert on_tls(Store(server.url("postgres")))
    store = Store(postgres_database)  # the run's scratch server offers no TLS: prefer falls back, as libpq's does
    store.init()
    assert not on_tls(store)


def test_verify_full_checks_the_certificate_against_the_root_given(tls_server) -> None:
    server, cert = tls_server
    assert on_tls(Store(f"{server.url('postgres')}?sslmode=verify-full&sslrootcert={cert}"))
    assert not on_tls(Store(f"{server.url('postgres')}?sslmode=disable"))
    with pytest.raises(StoreError, match="certificate verify failed") as refused:  # the system's CAs do not know it
        on_tls(Store(f"{server.url('postgres')}?sslmode=verify-full"))
    assert server.password not in str(refused.value)


def test_modes_that_require_tls_refuse_a_server_without_it(postgres_database: str) -> None:
    for mode in ("require", "verify-ca", "verify-full"):
        with pytest.raises(StoreError, match=f"offers no TLS, which sslmode={mode} requires"):
            Store(f"{postgres_database}?sslmode={mode}").init()
    store = Store(f"{postgres_database}?sslmode=disable")
    store.init()
    assert not on_tls(store)


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("sslmode=allow", "sslmode 'allow' is not supported; use one of disable, prefer, require, verify-ca, verify-full"),
        ("sslmode=verify-full&sslrootcert=/nowhere/ca.pem", "sslrootcert /nowhere/ca.pem is not a file"),
        ("sslcert=client.pem", "unsupported URL parameter 'sslcert'; this store reads sslmode, sslrootcert"),
    ],
)
def test_a_setting_the_store_cannot_honour_is_refused_not_ignored(query: str, said: str) -> None:
    with pytest.raises(StoreError, match=said) as refused:
        Store(f"postgresql://crisscross:s3cret@127.0.0.1:5432/round?{query}")
    assert "s3cret" not in str(refused.value)


def test_every_connection_shares_one_tls_context(tls_server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a verifying context loads the CA bundle; pg8000 used to build one for every connection."""
    server, cert = tls_server
    built = []
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: built.append(1) or real(*a, **k))
    url = f"{server.url('postgres')}?sslmode=verify-ca&sslrootcert={cert}"
    assert all(on_tls(Store(url)) for _ in range(5))
    assert len(built) <= 1  # none when an earlier test of this process already made it
