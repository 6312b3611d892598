"""Sessions a rater's sign-in opens: apart from the token, stored hashed, revoked by sign-out and by
a new token, ended by idle time and by lifetime, Secure behind TLS; sign-in only from the app's
own pages (OWASP ASVS 4.0, V3 session management; CSRF origin checks)."""

from __future__ import annotations

import pytest

from crisscross.annotate.store import OPERATOR, SCHEMA_VERSION, SessionPolicy, Store, StoreError, redact, token_hash
from crisscross.serve.app import SECURE_SESSION_COOKIE, SESSION_COOKIE
from tests.serve.round import ORIGIN, Clock, RoundFiles, browser, make_app, query, token_holder

NOW = 1_800_000_000.0


def _signed_in(store: Store, files: RoundFiles, name: str = "ann", **config):
    client = browser(make_app(store, files, **config))
    token = store.add_rater(name, NOW)
    assert client.post("/signin", data={"token": token}, follow_redirects=False).status_code == 303
    return client, token


def _stored_sessions(store: Store) -> list[tuple[str, str]]:
    return query(store.location, "SELECT id_hash, rater FROM sessions ORDER BY rater")


def test_the_cookie_is_a_fresh_random_session_and_only_its_hash_is_kept(store: Store, round_files: RoundFiles):
    ann, token = _signed_in(store, round_files)
    again = browser(make_app(store, round_files))
    again.post("/signin", data={"token": token})
    first, second = ann.cookies[SESSION_COOKIE], again.cookies[SESSION_COOKIE]
    assert len({first, second, token}) == 3 and len(first) >= 43  # 256 random bits each
    assert sorted(_stored_sessions(store)) == sorted([(token_hash(first), "ann"), (token_hash(second), "ann")])
    assert ann.get("/api/batch").status_code == again.get("/api/batch").status_code == 200
    stolen = browser(make_app(store, round_files))
    stolen.cookies.set(SESSION_COOKIE, token)  # the sign-in token is no session
    assert stolen.get("/api/batch").status_code == 401


def test_sign_out_revokes_the_session_on_the_server(store: Store, round_files: RoundFiles):
    ann, _ = _signed_in(store, round_files)
    copied = ann.cookies[SESSION_COOKIE]
    out = ann.post("/signout", follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/signin"
    replay = browser(make_app(store, round_files))
    replay.cookies.set(SESSION_COOKIE, copied)  # a cookie kept from before the sign-out signs nobody in
    assert replay.get("/api/batch").status_code == 401 and _stored_sessions(store) == []
    assert replay.get("/", follow_redirects=False).headers["location"] == "/signin"


def test_a_new_token_revokes_the_raters_sessions_and_only_theirs(store: Store, round_files: RoundFiles):
    ann, _ = _signed_in(store, round_files, "ann")
    bob, _ = _signed_in(store, round_files, "bob")
    store.add_rater("ann", NOW, replace=True)  # serve add-rater ann --new-token
    assert ann.get("/api/batch").status_code == 401
    assert bob.get("/api/batch").status_code == 200


def test_sessions_end_after_their_idle_time_and_their_lifetime(store: Store, round_files: RoundFiles):
    clock = Clock()
    policy = SessionPolicy(idle=600.0, lifetime=3600.0, touch_every=60.0)
    ann, token = _signed_in(store, round_files, clock=clock, sessions=policy)
    clock.now += 601
    assert ann.get("/api/batch").status_code == 401  # idle too long
    ann.post("/signin", data={"token": token})
    started = clock.now
    while clock.now - started + 500 <= 3600:  # busy all along: idle never reached
        clock.now += 500
        assert ann.get("/api/batch").status_code == 200
    clock.now += 500
    assert ann.get("/api/batch").status_code == 401  # past the lifetime however busy


def test_behind_tls_the_cookie_is_secure_host_only_and_hsts_is_sent(store: Store, round_files: RoundFiles):
    client = browser(make_app(store, round_files, public_url="https://rate.example.org"), base_url="https://rate.example.org")
    client.headers["Origin"] = "https://rate.example.org"
    response = client.post("/signin", data={"token": store.add_rater("ann", NOW)}, follow_redirects=False)
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{SECURE_SESSION_COOKIE}=") and "; secure" in cookie.lower() and "path=/" in cookie.lower()
    assert "domain=" not in cookie.lower() and "max-age=43200" in cookie.lower()
    assert response.headers["strict-transport-security"].startswith("max-age=")
    assert client.get("/api/batch").status_code == 200
    plain = browser(make_app(store, round_files)).post("/signin", data={"token": store.add_rater("bob", NOW)}, follow_redirects=False)
    assert "secure" not in plain.headers["set-cookie"].lower() and "strict-transport-security" not in plain.headers


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},  # login CSRF: a page elsewhere posting its own token
        {"Origin": "null"},
        {"Referer": "https://evil.example/page"},
        {},  # neither: browsers always send Origin with a POST
    ],
)
def test_sign_in_and_out_from_another_origin_are_refused(store: Store, round_files: RoundFiles, headers: dict[str, str]):
    from fastapi.testclient import TestClient

    client = TestClient(make_app(store, round_files), headers=headers)
    response = client.post("/signin", data={"token": store.add_rater("ann", NOW)}, follow_redirects=False)
    assert response.status_code == 403 and "set-cookie" not in response.headers and _stored_sessions(store) == []
    assert "did not come from the app's own pages" in response.json()["detail"]


def test_the_apps_own_referer_or_its_public_origin_is_accepted(store: Store, round_files: RoundFiles):
    from fastapi.testclient import TestClient

    referred = TestClient(make_app(store, round_files), headers={"Referer": f"{ORIGIN}/signin"})
    assert referred.post("/signin", data={"token": store.add_rater("ann", NOW)}, follow_redirects=False).status_code == 303
    proxied = browser(make_app(store, round_files, public_url="http://rate.example.org:8443"))
    assert proxied.post("/signin", data={"token": store.add_rater("bob", NOW)}, follow_redirects=False).status_code == 403
    proxied.headers["Origin"] = "http://rate.example.org:8443"
    assert proxied.post("/signin", data={"token": store.add_rater("cy", NOW)}, follow_redirects=False).status_code == 303
    default_port = browser(make_app(store, round_files, public_url="https://rate.example.org:443/"))
    default_port.headers["Origin"] = "https://rate.example.org"  # browsers leave the default port out of Origin
    assert default_port.post("/signin", data={"token": store.add_rater("dan", NOW)}, follow_redirects=False).status_code == 303


def test_signing_in_again_ends_the_session_the_browser_had(store: Store, round_files: RoundFiles):
    ann, token = _signed_in(store, round_files)
    before = ann.cookies[SESSION_COOKIE]
    ann.post("/signin", data={"token": token})
    assert ann.cookies[SESSION_COOKIE] != before and [h for h, _ in _stored_sessions(store)] == [token_hash(ann.cookies[SESSION_COOKIE])]


# What each earlier schema lacks: its upgrade only adds these tables.
ADDED_SINCE = {"1": ("sessions", "operators", "operator_sessions"), "2": ("operators", "operator_sessions")}
# Indexes added to tables every schema has: init() creates them on a database of any schema.
LATER_INDEXES = ("judgments_item_kind", "judgments_type", "judgments_time")


def _indexes(store: Store) -> set[str]:
    with store._transaction(write=False) as run:
        if store.backend.name == "sqlite":
            return {name for (name,) in run("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()}
        return {name for (name,) in run("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()").fetchall()}


@pytest.mark.parametrize("schema", sorted(ADDED_SINCE))
def test_an_earlier_schemas_database_is_upgraded_in_place(store: Store, schema: str):
    with store._transaction() as run:
        for table in ADDED_SINCE[schema]:
            run(f"DROP TABLE {table}")
        for index in LATER_INDEXES:
            run(f"DROP INDEX {index}")
        run(f"UPDATE meta SET value = '{schema}' WHERE key = 'schema'")
    assert not _indexes(store) & {*LATER_INDEXES, "operator_sessions_operator"}
    token = store.add_rater("ann", NOW)
    store.init()
    assert {*LATER_INDEXES, "operator_sessions_operator", "sessions_rater"} <= _indexes(store)
    assert query(store.location, "SELECT value FROM meta WHERE key = 'schema'") == [(SCHEMA_VERSION,)] and SCHEMA_VERSION == "3"
    assert token_holder(store, token) == "ann" and store.session_rater(store.sign_in(token, NOW, SessionPolicy())[1], NOW, SessionPolicy())
    boss = store.add_operator("boss", NOW)
    assert token_holder(store, boss, OPERATOR) == "boss" and token_holder(store, boss) is None
    assert store.session_operator(store.sign_in(boss, NOW, SessionPolicy(), OPERATOR)[1], NOW, SessionPolicy()) == "boss"


def test_a_database_of_a_later_schema_is_refused(store: Store):
    with store._transaction() as run:
        run("UPDATE meta SET value = '4' WHERE key = 'schema'")
    with pytest.raises(StoreError, match="has schema 4, this version reads 3"):
        store.init()


def test_the_operator_s_commands_upgrade_an_earlier_schema_as_serve_does(store: Store, capsys: pytest.CaptureFixture[str]):
    """``remove-operator`` and ``status`` on a schema-2 database: the operators' tables are added,
    then the command answers as on a new one (an unknown name is one line, exit 2)."""
    from crisscross.pipelines import cli

    with store._transaction() as run:
        for table in ADDED_SINCE["2"]:
            run(f"DROP TABLE {table}")
        run("UPDATE meta SET value = '2' WHERE key = 'schema'")
    assert cli.main(["serve", "remove-operator", "boss", "--db", store.location]) == 2
    assert capsys.readouterr().err.strip().endswith("no operator 'boss' in " + redact(store.location))
    assert query(store.location, "SELECT value FROM meta WHERE key = 'schema'") == [(SCHEMA_VERSION,)]
