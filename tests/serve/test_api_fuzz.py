"""The rater app fuzzed from its own OpenAPI schema with Schemathesis: every route, requests built to
the schema and requests built to break it, sent signed in (as an operator on the operator's routes,
as a rater on the others) and with the page's CSRF token and Origin, each to the app on SQLite and on
PostgreSQL.  Checked on every response: no server error, a status and content type the schema
documents, a body that matches its schema, and every request that breaks the schema refused; and
the two backends answer every request alike.

``positive_data_acceptance`` is left out on purpose: a request the schema allows may still be
refused for what the schema cannot say (a batch that is not yours: 403; an image not in your
batch: 404; a score outside 0–5: 422), and those refusals are the point.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode
from schemathesis.generation.meta import negated_parameters

from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.store import Store
from crisscross.serve.app import CSRF_HEADER, SESSION_COOKIE, AppConfig, Round, create_api, guarded
from tests.conftest import DATABASES
from tests.serve.round import ORIGIN, RoundFiles, browser, make_store, tasks_table

NOW = 1_800_000_000.0
EXAMPLES = 100  # per route and mode (routes without parameters or body have no negative mode): ≥ 1,000 requests
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance, negative_data_rejection]
OPEN = {"rate_per_second": 1e9, "burst": 1e9, "ip_rate_per_second": 1e9, "signins_per_minute": 1e9}


@dataclass
class Side:
    """The app over one backend of the store, with a rater and an operator signed in as its pages sign in."""

    backend: str
    store: Store
    api: Any
    app: Any  # the api behind the guards a deployment has (Origin, CSRF, rate limits)
    config: AppConfig
    rater_token: str
    operator_token: str
    page: Any = None
    operator_page: Any = None
    signed: dict[str, str] = field(default_factory=dict)
    statuses: list[int] = field(default_factory=list)

    @classmethod
    def open(cls, backend: str, store: Store, round_files: RoundFiles) -> Side:
        config = AppConfig(replicas=2, **OPEN)
        api = create_api(store, Round.of(tasks_table(), load_catalog(str(round_files.items)), str(round_files.images)), config)
        side = cls(backend, store, api, guarded(api, config), config, store.add_rater("ann", NOW), store.add_operator("boss", NOW))
        side.page, side.operator_page = browser(side.app), browser(side.app)
        side.sign_in_rater()  # ann holds a batch now
        side.sign_in_operator()
        return side

    def sign_in_rater(self) -> None:
        self.page.post("/signin", data={"token": self.rater_token})
        self.signed.update(session=self.page.cookies[SESSION_COOKIE], csrf=self.page.get("/api/batch").json()["csrf"])

    def sign_in_operator(self) -> None:
        self.operator_page.post("/operator/signin", data={"token": self.operator_token})
        self.signed["operator"] = self.operator_page.cookies[SESSION_COOKIE]

    def send(self, case: Any) -> Any:
        """The case as its route's signed-in user sends it (what the case broke stays broken), checked; signed in again if it signed out."""
        negated = {name for name, _ in negated_parameters(case._meta)}
        session = self.signed["operator"] if case.operation.path.startswith(("/operator", "/api/operator")) else self.signed["session"]
        cookies = {} if SESSION_COOKIE in negated else {SESSION_COOKIE: session}
        headers = {"Origin": ORIGIN, **({} if CSRF_HEADER in negated else {CSRF_HEADER: self.signed["csrf"]})}
        response = case.call(app=self.app, headers=headers, cookies=cookies)
        case.validate_response(response, checks=CHECKS)
        if self.store.session_rater(self.signed["session"], self.config.clock(), self.config.sessions) is None:
            self.sign_in_rater()
        if self.store.session_operator(self.signed["operator"], self.config.clock(), self.config.sessions) is None:
            self.sign_in_operator()
        self.statuses.append(response.status_code)
        return response


def test_every_route_holds_to_its_schema_under_generated_requests(request: pytest.FixtureRequest, round_files: RoundFiles):
    """Each request is drawn once and sent to the app on every backend of the store (``DATABASES``):
    drawing is most of the cost, and the backends must answer alike."""
    sides = [Side.open(name, make_store(location(request)), round_files) for name, location in DATABASES.items()]
    schema = schemathesis.openapi.from_dict(sides[0].api.openapi())
    schema.app = sides[0].app
    sent: Counter[tuple[str, str]] = Counter()
    by_route: Counter[tuple[str, int]] = Counter()

    def fuzz(operation, mode: GenerationMode) -> None:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
        def check(case) -> None:
            by_route.update((operation.label, side.send(case).status_code) for side in sides)
            sent[(operation.label, mode.value)] += 1

        check()

    for result in schema.get_all_operations():
        operation = result.ok()
        negatable = bool(list(operation.iter_parameters())) or bool(operation.get_request_payload_content_types())
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if negatable else (GenerationMode.POSITIVE,):
            fuzz(operation, mode)
    total = sum(sent.values())
    for side in sides:
        print(
            f"schemathesis, {side.backend}: {len(side.statuses)} requests over {len(sent)} route × mode pairs; statuses {dict(sorted(Counter(side.statuses).items()))}"
        )
    assert total >= 1000 and all(len(side.statuses) == total and 500 not in side.statuses for side in sides)
    assert sides[0].statuses == sides[1].statuses  # the same requests, the same answers, whichever database keeps the state
    routes = {label for label, _ in sent}
    assert len(routes) == 14  # every route of the app was fuzzed, and each got past the sign-in check
    assert {label for label, status in by_route if status not in (401, 429)} == routes
