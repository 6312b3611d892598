"""The rater app fuzzed from its own OpenAPI schema with Schemathesis: every route, requests built to
the schema and requests built to break it, sent signed in (as an operator on the operator's routes,
as a rater on the others) and with the page's CSRF token and Origin.  Checked on every response: no server error, a status and content type the schema
documents, a body that matches its schema, and every request that breaks the schema refused.

``positive_data_acceptance`` is left out on purpose: a request the schema allows may still be
refused for what the schema cannot say (a batch that is not yours: 403; an image not in your
batch: 404; a score outside 0–5: 422), and those refusals are the point.
"""

from __future__ import annotations

from collections import Counter

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
from tests.serve.round import ORIGIN, RoundFiles, browser, tasks_table

NOW = 1_800_000_000.0
EXAMPLES = 100  # per route and mode (routes without parameters or body have no negative mode): ≥ 1,000 requests
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance, negative_data_rejection]
OPEN = {"rate_per_second": 1e9, "burst": 1e9, "ip_rate_per_second": 1e9, "signins_per_minute": 1e9}


def test_every_route_holds_to_its_schema_under_generated_requests(store: Store, round_files: RoundFiles):
    config = AppConfig(replicas=2, **OPEN)
    api = create_api(store, Round.of(tasks_table(), load_catalog(str(round_files.items)), str(round_files.images)), config)
    app = guarded(api, config)
    schema = schemathesis.openapi.from_dict(api.openapi())
    schema.app = app
    page = browser(app)
    token = store.add_rater("ann", NOW)
    page.post("/signin", data={"token": token})
    signed = {"session": page.cookies[SESSION_COOKIE], "csrf": page.get("/api/batch").json()["csrf"]}  # ann holds a batch now
    operator_page = browser(app)
    boss = store.add_operator("boss", NOW)
    operator_page.post("/operator/signin", data={"token": boss})
    signed["operator"] = operator_page.cookies[SESSION_COOKIE]
    sent: Counter[tuple[str, str]] = Counter()
    statuses: Counter[int] = Counter()
    by_route: Counter[tuple[str, int]] = Counter()

    def fuzz(operation, mode: GenerationMode) -> None:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
        def check(case) -> None:
            negated = {name for name, _ in negated_parameters(case._meta)}  # what a negative case broke stays broken
            session = signed["operator"] if operation.path.startswith(("/operator", "/api/operator")) else signed["session"]
            cookies = {} if SESSION_COOKIE in negated else {SESSION_COOKIE: session}
            headers = {"Origin": ORIGIN, **({} if CSRF_HEADER in negated else {CSRF_HEADER: signed["csrf"]})}
            response = case.call(headers=headers, cookies=cookies)
            case.validate_response(response, checks=CHECKS)
            if store.session_rater(signed["session"], config.clock(), config.sessions) is None:  # it signed out: sign in again
                page.post("/signin", data={"token": token})
                signed.update(session=page.cookies[SESSION_COOKIE], csrf=page.get("/api/batch").json()["csrf"])
            if store.session_operator(signed["operator"], config.clock(), config.sessions) is None:
                operator_page.post("/operator/signin", data={"token": boss})
                signed["operator"] = operator_page.cookies[SESSION_COOKIE]
            sent[(operation.label, mode.value)] += 1
            statuses[response.status_code] += 1
            by_route[(operation.label, response.status_code)] += 1

        check()

    for result in schema.get_all_operations():
        operation = result.ok()
        negatable = bool(list(operation.iter_parameters())) or bool(operation.get_request_payload_content_types())
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if negatable else (GenerationMode.POSITIVE,):
            fuzz(operation, mode)
    total = sum(sent.values())
    print(f"schemathesis: {total} requests over {len(sent)} route × mode pairs; statuses {dict(sorted(statuses.items()))}")
    assert total >= 1000 and statuses[500] == 0
    routes = {label for label, _ in sent}
    assert len(routes) == 14  # every route of the app was fuzzed, and each got past the sign-in check
    assert {label for label, status in by_route if status not in (401, 429)} == routes
