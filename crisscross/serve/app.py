"""The ASGI app raters use: sign in with a token, rate one batch at a time, submit it whole.

Routes: ``/signin`` (a page whose script posts the link's ``#token=…`` fragment, so the token
never appears in a URL the server or a proxy logs; a good token opens a server-side session whose
random id is the cookie), ``/signout`` (ends the session), ``/`` (the rater page), ``/api/batch`` (the
rater's batch as JSON: texts, image URLs, instructions, scale, examples, BISON's options by number;
no item ids, caption ids, gold flags or sampling methods), ``/api/submit`` (a whole batch, with the CSRF header), ``/api/image`` and
``/api/example`` (image bytes of the items the rater was shown or of the examples, confined to the
image folder), ``/static/*`` (the page's own CSS and JS; nothing loads from elsewhere).

Operators watch the campaign: ``/operator/signin`` and ``/operator/signout`` as above, with an
operator's token; ``/operator`` (the operator page) and ``/api/operator/campaign`` (its figures,
:func:`crisscross.campaign.monitor.campaign_report`, counted by the store at each request, the raters'
QC report rebuilt at most every ``AppConfig.qc_refresh`` seconds; the page polls it, less often when
it answers slowly).  The roles never mix: a rater's session is refused on the operator's routes and an
operator's on the rater's (403), and without a session they answer 401 (the pages redirect to sign-in).

Bodies, paths and queries are parsed strictly (no coercion, every number bounded, unknown keys
refused) and every refusal is ``{"detail": "<one line>"}``; a POST must come from the app's own
origin; every response carries the security headers.

Under adaptive replication (``AppConfig.replication``, a rule other than ``fixed``) each stored
submit closes the batch's items whose stop rule has decided them, so the store hands out only the
judgments still needed.
"""

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import quote

import pandas as pd
import pyarrow as pa
from fastapi import Depends, FastAPI, Form, Header, HTTPException, Query, Request
from fastapi import Path as InPath
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.security import APIKeyCookie
from pydantic import BaseModel, ConfigDict, Field

from crisscross.annotate.catalog import Catalog
from crisscross.annotate.store import OPERATOR, RATER, ROLES, Answer, Assignment, Refused, SessionPolicy, Store, TaskRow, token_hash
from crisscross.campaign.monitor import QC_REFRESH, CampaignInputs, RaterReportCache, campaign_report
from crisscross.campaign.replication import FIXED, ReplicationSettings, rated_judgments, replication_decisions
from crisscross.core.errors import InputError
from crisscross.core.ids import CAPTION_KIND, split_id
from crisscross.core.io import confined, is_uri
from crisscross.formats.schema import DEFAULT_RULES, JudgmentRules
from crisscross.serve import assets
from crisscross.serve.examples import worked_examples
from crisscross.serve.security import (
    HEADERS,
    HSTS,
    BodyLimit,
    RateLimiter,
    SecurityHeaders,
    csrf_ok,
    csrf_token,
    first_problem,
    image_root,
    same_origin,
)
from crisscross.tasktypes import task_type
from crisscross.tasktypes.base import AnswerError, Example, ExampleSide, Option

SESSION_COOKIE = "crisscross_session"
# Behind TLS the cookie takes the __Host- prefix: browsers then keep it only if it is Secure, for this host, on path /.
SECURE_SESSION_COOKIE = "__Host-crisscross_session"
CSRF_HEADER = "X-CSRF-Token"
MAX_ANSWERS = 1000
MAX_TEXT = 256  # characters of a batch id, an answer or a token: longer is none of them
NO_NUL = r"^[^\x00]*$"  # no text the app takes holds NUL: PostgreSQL cannot store it, and no id or answer has one
POSITION_MAX = 2**31 - 1  # positions are int32 in the tasks table and INTEGER in the store: a larger number is no position


@dataclass(frozen=True)
class AppConfig:
    replicas: int
    timeout: float = 3600.0  # seconds before an unsubmitted assignment is released
    max_request_bytes: int = 256 * 1024
    rate_per_second: float = 10.0  # per signed-in session
    burst: float = 40.0
    ip_rate_per_second: float = 200.0  # per client address, whatever its cookies
    signins_per_minute: float = 20.0  # per client address, checked before the token is
    replication: ReplicationSettings = field(default_factory=ReplicationSettings)  # when an item has judgments enough
    rules: JudgmentRules = DEFAULT_RULES  # what a judgment may hold, as import checks it
    sessions: SessionPolicy = field(default_factory=SessionPolicy)
    public_url: str | None = None  # the address raters reach (serve --url): its origin is the one POSTs must come from
    campaign: CampaignInputs = field(default_factory=CampaignInputs)  # what the operator page reads besides the store
    qc_refresh: float = QC_REFRESH  # the operator page's QC report is rebuilt at most this often (seconds; monitor.RaterReportCache)
    clock: Callable[[], float] = field(default=time.time, compare=False)

    @property
    def secure(self) -> bool:
        """Whether raters reach the app over TLS (a proxy in front of it): then the cookie is Secure."""
        return (self.public_url or "").lower().startswith("https://")

    @property
    def session_cookie(self) -> str:
        return SECURE_SESSION_COOKIE if self.secure else SESSION_COOKIE


class _Strict(BaseModel):
    """A body as the page sends it, nothing coerced: a boolean is no number, a string no score,
    an unknown key an error."""

    model_config = ConfigDict(strict=True, extra="forbid")


class AnswerIn(_Strict):
    position: int = Field(ge=0, le=POSITION_MAX)
    score: float | None = None
    answer: str | None = Field(default=None, max_length=MAX_TEXT, pattern=NO_NUL)
    seconds: float | None = None  # the time the item was on screen; None when the page did not measure it


class SubmitIn(_Strict):
    batch_id: str = Field(max_length=MAX_TEXT, pattern=NO_NUL)
    answers: list[AnswerIn] = Field(max_length=MAX_ANSWERS)


class Detail(BaseModel):
    """Every refusal's body: one line saying what to do."""

    detail: str


class Submitted(BaseModel):
    stored: bool  # False: this batch was already stored (a double submit)
    batch_id: str


_MEANINGS = {
    400: "the body cannot be parsed as the route's media type",
    401: "not signed in: open your sign-in link",
    403: "not yours (the other role's, a batch not assigned to you), not from this site's pages, or without the page's CSRF token",
    404: "no such file, image or example",
    409: "the batch cannot be taken any more",
    413: "request body too large",
    422: "the request is malformed or a value breaks the judgment rules",
    429: "too many requests",
}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The refusals a route documents (every route can be rate limited): JSON whatever the route's
    own media type, as :class:`Detail` says."""
    body = {"application/json": {"schema": Detail.model_json_schema()}}
    return {code: {"description": _MEANINGS[code], "content": body} for code in sorted({*codes, 429})}


@dataclass(frozen=True)
class SignIn:
    """How one of the store's roles (``annotate/store.ROLES``) signs in: under ``prefix`` (the
    store's ``sign_in`` finds the token's holder in this role only), sent to ``target`` once in;
    ``page`` and ``failed`` the HTML."""

    role: str
    prefix: str
    target: str
    page: str
    failed: str


SIGN_INS: dict[str, SignIn] = {
    RATER: SignIn(RATER, "", "/", assets.SIGNIN_HTML, assets.SIGNIN_FAILED_HTML),
    OPERATOR: SignIn(OPERATOR, "/operator", "/operator", assets.OPERATOR_SIGNIN_HTML, assets.OPERATOR_SIGNIN_FAILED_HTML),
}

_HTML = {"content": {"text/html": {}}, "description": "an HTML page"}
_IMAGE = {"content": {"image/*": {}}, "description": "the image file"}


@dataclass(frozen=True)
class Round:
    """What the app shows besides the store: the items' texts and image files, and the examples."""

    catalog: Catalog
    images: str  # the image folder every served file must lie in
    examples: Mapping[str, Sequence[Example]]
    tasks: Mapping[tuple[str, int], TaskRow]  # (batch, position) → row, for image lookups
    seed: int = 0  # base.seed: orders the two images of a VERIFY-TRIPLE item, as the exports do

    @classmethod
    def of(cls, tasks: pa.Table, catalog: Catalog, images: str | None, seed: int = 0) -> "Round":
        """The round of a tasks table; ``images`` defaults to the folder the items' images share."""
        rows = [
            TaskRow(r["batch_id"], int(r["position"]), r["item_id"], r["task_type"], r["id_a"], r["id_b"], r["gold"])
            for r in tasks.to_pylist()
        ]
        if images is not None and not os.path.isdir(images):
            raise InputError(f"no image folder {images}")
        examples = worked_examples(catalog, {frozenset((r.id_a, r.id_b)) for r in rows}, {i for r in rows for i in (r.id_a, r.id_b)})
        root = images if images is not None else image_root(list(catalog.paths.values()))
        return cls(catalog, root, examples, {(r.batch_id, r.position): r for r in rows}, seed)

    def absent_images(self) -> list[str]:
        """The local image files the round would serve (its items' and examples') that are not there."""
        shown = {i for r in self.tasks.values() for i in (r.id_a, r.id_b)}
        shown |= {side.value for pair in self.examples.values() for e in pair for side in (e.a, e.b) if side.kind == "image"}
        paths = (self.catalog.paths[i] for i in shown if i in self.catalog.paths)
        return sorted(p for p in paths if not is_uri(p) and not os.path.isfile(p))

    def options(self, row: TaskRow) -> tuple[Option, ...]:
        """The item's options in the order shown, as the exports number them (its type's presentation)."""
        return task_type(row.task_type).options(row.item_id, row.id_a, row.id_b, self.catalog, self.seed)

    def canonical_answer(self, row: TaskRow, given: str | None) -> str | None:
        """An answer as the page gives it (an option's number, ``none``, ``both``, ``neither``) as the
        judgments table stores it (a caption id, target / decoy); :class:`Refused` otherwise."""
        try:
            return task_type(row.task_type).canonical(given, self.options(row))
        except AnswerError as error:
            raise Refused(422, f"item {row.position} {error}") from None


def _side(value: str, url: str, catalog: Catalog) -> dict[str, str]:
    """A pair side as the page gets it: caption text (shown as text), or an image URL."""
    return {"text": catalog.texts[value]} if split_id(value)[1] == CAPTION_KIND else {"image": url}


def _example_side(side: ExampleSide, url: str) -> dict[str, str]:
    return {"text": side.value} if side.kind == "text" else {"image": url}


def _item_view(item: TaskRow, batch: str, round_: Round) -> dict[str, Any]:
    """One item as the page shows it: its position and both sides, and whatever else its type
    shows (BISON: CHOOSE the target's captions by number; VERIFY-TRIPLE the two images in their
    seeded order, never which one is the target)."""

    def image_url(side: str) -> str:
        return f"/api/image/{item.position}/{side}?batch={batch}"

    view = {
        "position": item.position,
        "a": _side(item.id_a, image_url("a"), round_.catalog),
        "b": _side(item.id_b, image_url("b"), round_.catalog),
    }
    return task_type(item.task_type).page_item(view, round_.options(item), round_.catalog, image_url)


def batch_view(assignment: Assignment, round_: Round, rules: JudgmentRules = DEFAULT_RULES) -> dict[str, Any]:
    """The batch as the rater page needs it.  Built field by field from what raters may see:
    nothing of the task rows is passed through whole.  ``max_seconds``: over it the page sends no
    time for an item (it was left open), since the store refuses such a time."""
    kind = task_type(assignment.task_type)
    batch = quote(assignment.batch_id, safe="")
    summary, _, details = kind.instructions.partition("\n\n")
    view: dict[str, Any] = {
        "id": assignment.batch_id,
        "task_type": kind.name,
        "summary": summary,
        "instructions": details,
        "question": kind.question,
        "labels": list(kind.side_labels),
        "examples": [
            {
                "a": _example_side(e.a, f"/api/example/{kind.name}/{n}/a"),
                "b": _example_side(e.b, f"/api/example/{kind.name}/{n}/b"),
                "verdict": e.verdict,
            }
            for n, e in enumerate(round_.examples.get(kind.name, ()))
        ],
        "items": [_item_view(item, batch, round_) for item in assignment.items],
        "max_seconds": rules.max_seconds,
    }
    if kind.scale is not None:
        view["scale"] = {
            "min": kind.scale.low,
            "max": kind.scale.high,
            "hover": kind.scale.hover,
            "points": [
                {"score": score, "label": label, "description": criterion}
                for score, (label, criterion) in sorted(kind.scale.points.items())
            ],
        }
    answers = kind.batch_answers()
    if answers is not None:
        view["answers"] = answers
    return view


def close_decided(store: Store, batch_id: str, replicas: int, settings: ReplicationSettings, now: float) -> None:
    """Close the rated items of ``batch_id`` that their stop rule has decided, on every judgment
    they have, so nobody is asked for more of them."""
    frame = pd.DataFrame(store.judgments(batch_id), columns=["item_id", "task_type", "score", "time"])
    decisions = replication_decisions(rated_judgments(frame), replicas, settings)
    decided = zip(decisions["item_id"], decisions["stopped"], decisions["reason"], strict=True)
    store.close_items({item: reason for item, stopped, reason in decided if stopped}, now)


def create_app(store: Store, round_: Round, config: AppConfig) -> SecurityHeaders:
    """The app over one store and round (``store.init()`` and ``load_tasks`` have run), guarded."""
    return guarded(create_api(store, round_, config), config)


def guarded(api: FastAPI, config: AppConfig) -> SecurityHeaders:
    """``api`` behind the body limit, with the security headers on every response: the limit's
    413, the rate limit's 429 and a server error's 500 included."""
    headers = {**HEADERS, **dict([HSTS] if config.secure else [])}
    return SecurityHeaders(BodyLimit(api, config.max_request_bytes), headers)


def create_api(store: Store, round_: Round, config: AppConfig) -> FastAPI:
    """The routes.  The OpenAPI schema is not served (``api.openapi()`` builds it, for the tests)."""
    api = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, title="crisscross rater app")
    secret = store.secret()
    cookie = config.session_cookie
    per_session = RateLimiter(config.rate_per_second, config.burst)
    per_address = RateLimiter(config.ip_rate_per_second, config.ip_rate_per_second * 2)
    signins = RateLimiter(config.signins_per_minute / 60.0, config.signins_per_minute)
    session_cookie = APIKeyCookie(name=cookie, auto_error=False, description="the session id sign-in sets (HttpOnly, SameSite=Strict)")
    qc_report = RaterReportCache(config.qc_refresh)

    @api.exception_handler(RequestValidationError)
    async def malformed(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": first_problem(error)}, status_code=422)

    @api.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Any]) -> Response:
        now = config.clock()
        address = request.client.host if request.client else "unknown"
        session = request.cookies.get(cookie)
        if not per_address.allow(address, now) or (session is not None and not per_session.allow(token_hash(session), now)):
            return JSONResponse({"detail": "too many requests: slow down"}, status_code=429, headers={"Retry-After": "1"})
        wanted = config.public_url or f"{request.url.scheme}://{request.headers.get('host', '')}"
        origin = request.headers.get("origin")
        if request.method not in ("GET", "HEAD") and not same_origin(origin, request.headers.get("referer"), wanted):
            detail = (
                f"this request did not come from the app's own pages (origin {origin or 'not given'}, the app's {wanted}): open the "
                "app and try again; behind a proxy, start serve with --url set to the address raters use"
            )
            return JSONResponse({"detail": detail}, status_code=403)
        response: Response = await call_next(request)
        return response

    def live(session: str | None) -> tuple[str, str] | None:
        """(rater name, session key) of a live session, else None."""
        name = store.session_rater(session, config.clock(), config.sessions) if session else None
        return (name, token_hash(session)) if name is not None and session else None

    def live_operator(session: str | None) -> str | None:
        """The operator a live session belongs to, else None."""
        return store.session_operator(session, config.clock(), config.sessions) if session else None

    def rater(session: Annotated[str | None, Depends(session_cookie)]) -> tuple[str, str]:
        """(rater name, session key) of the signed-in rater; 403 for an operator, 401 otherwise."""
        who = live(session)
        if who is None and live_operator(session) is not None:
            raise HTTPException(403, "this is an operator's sign-in, which cannot rate: raters sign in with their own link")
        if who is None:
            raise HTTPException(401, "sign in with the link you were given")
        return who

    def operator(session: Annotated[str | None, Depends(session_cookie)]) -> str:
        """The signed-in operator; 403 for a rater, 401 otherwise."""
        name = live_operator(session)
        if name is None and live(session) is not None:
            raise HTTPException(403, "the operator page is for the campaign's operators: a rater's sign-in cannot open it")
        if name is None:
            raise HTTPException(401, "sign in with your operator link")
        return name

    Rater = Annotated[tuple[str, str], Depends(rater)]
    Operator = Annotated[str, Depends(operator)]

    def signed_in(request: Request, session: str, page: str) -> Response:
        """The browser's cookie set to its new ``session``, its earlier one (either role's) ended;
        the token itself is never the cookie, so a session can end (sign-out, a new token, expiry)
        while the link stays theirs."""
        earlier = request.cookies.get(cookie)
        if earlier:
            store.end_session(earlier)
        response = RedirectResponse(page, status_code=303)
        response.set_cookie(
            cookie,
            session,
            httponly=True,
            samesite="strict",
            secure=config.secure,
            path="/",
            max_age=int(config.sessions.lifetime),
        )
        return response

    def signed_out(request: Request, page: str) -> Response:
        session = request.cookies.get(cookie)
        if session:
            store.end_session(session)
        response = RedirectResponse(page, status_code=303)
        response.delete_cookie(cookie, path="/", secure=config.secure, httponly=True, samesite="strict")
        return response

    def signins_allowed(request: Request) -> bool:
        address = request.client.host if request.client else "unknown"
        return signins.allow(address, config.clock())

    too_many_signins = {"detail": "too many sign-ins from your address: wait a minute"}

    def add_sign_in(pages: SignIn) -> None:
        """``<prefix>/signin`` (the page, and its POST opening a session for the token's holder in
        this role only) and ``<prefix>/signout``."""

        @api.get(f"{pages.prefix}/signin", response_class=HTMLResponse, responses={200: _HTML, **_errors()})
        def signin_page() -> HTMLResponse:
            return HTMLResponse(pages.page)

        @api.post(
            f"{pages.prefix}/signin",
            response_class=RedirectResponse,
            status_code=303,
            responses={303: {"description": "signed in"}, 401: _HTML, **_errors(400, 403, 413, 422)},
            description=f"A new session for the token's {pages.role}; another role's token signs nobody in here.",
        )
        def signin(request: Request, token: Annotated[str, Form(max_length=MAX_TEXT)]) -> Response:
            if not signins_allowed(request):
                return JSONResponse(too_many_signins, status_code=429, headers={"Retry-After": "60"})
            opened = store.sign_in(token, config.clock(), config.sessions, pages.role)
            if opened is None:
                return HTMLResponse(pages.failed, status_code=401)
            return signed_in(request, opened[1], pages.target)

        @api.post(
            f"{pages.prefix}/signout",
            response_class=RedirectResponse,
            status_code=303,
            responses={303: {"description": "signed out"}, **_errors(403, 413)},
        )
        def signout(request: Request) -> Response:
            return signed_out(request, f"{pages.prefix}/signin")

    for role in ROLES:
        add_sign_in(SIGN_INS[role])

    @api.get(
        "/",
        response_class=HTMLResponse,
        responses={200: _HTML, 303: {"description": "not signed in: to /signin; an operator: to /operator"}, **_errors()},
    )
    def page(request: Request) -> Response:
        session = request.cookies.get(cookie)
        if live(session) is None:
            return RedirectResponse("/operator" if live_operator(session) is not None else "/signin", status_code=303)
        return HTMLResponse(assets.RATER_HTML)

    @api.get(
        "/operator",
        response_class=HTMLResponse,
        responses={200: _HTML, 303: {"description": "not signed in: to /operator/signin"}, **_errors(403)},
    )
    def operator_page(request: Request) -> Response:
        session = request.cookies.get(cookie)
        if live_operator(session) is None and live(session) is None:
            return RedirectResponse("/operator/signin", status_code=303)
        operator(session)  # a rater's session: 403
        return HTMLResponse(assets.OPERATOR_HTML)

    @api.get("/api/operator/campaign", responses=_errors(401, 403))
    def campaign(name: Operator) -> dict[str, Any]:
        """The campaign's figures as the store holds them now."""
        now = config.clock()
        figures = campaign_report(store, now, config.replicas, config.timeout, config.replication, config.campaign, qc_report)
        return {"operator": name, **figures}

    @api.get("/static/{name}", responses={200: {"content": {"text/css": {}, "text/javascript": {}}}, **_errors(404, 422)})
    def static(name: Annotated[str, InPath(max_length=64)]) -> Response:
        if name not in assets.STATIC:
            raise HTTPException(404, "no such file")
        body, media = assets.STATIC[name]
        return Response(body, media_type=media, headers={"Cache-Control": "no-cache"})

    @api.get("/api/batch", responses=_errors(401))
    def batch(who: Rater) -> dict[str, Any]:
        name, session = who
        assignment = store.assignment(name, config.clock(), config.replicas, config.timeout)
        return {
            "rater": name,
            "csrf": csrf_token(secret, session),
            "batch": batch_view(assignment, round_, config.rules) if assignment else None,
        }

    def _answer(batch: str, given: AnswerIn) -> str | None:
        row = round_.tasks.get((batch, given.position))
        return round_.canonical_answer(row, given.answer) if row is not None else given.answer

    @api.post("/api/submit", responses=_errors(400, 401, 403, 409, 413, 422))
    def submit(body: SubmitIn, who: Rater, csrf: Annotated[str | None, Header(alias=CSRF_HEADER, max_length=MAX_TEXT)] = None) -> Submitted:
        name, session = who
        if not csrf_ok(secret, session, csrf):
            raise HTTPException(403, "the page's CSRF token is missing or wrong: reload the page")
        now = config.clock()
        try:
            answers = [Answer(a.position, a.score, _answer(body.batch_id, a), a.seconds) for a in body.answers]
            stored = store.submit(name, body.batch_id, answers, now, config.replicas, config.rules)
        except Refused as refused:
            raise HTTPException(refused.status, str(refused)) from None
        if stored and config.replication.rule != FIXED:  # a fixed design never stops early
            close_decided(store, body.batch_id, config.replicas, config.replication, now)
        return Submitted(stored=stored, batch_id=body.batch_id)

    @api.get("/api/image/{position}/{side}", response_class=Response, responses={200: _IMAGE, **_errors(401, 404, 422)})
    def image(
        position: Annotated[int, InPath(ge=0, le=POSITION_MAX)],
        side: Annotated[str, InPath(max_length=8)],
        batch: Annotated[str, Query(max_length=MAX_TEXT, pattern=NO_NUL)],
        who: Rater,
    ) -> Response:
        name, _ = who
        row = round_.tasks.get((batch, position)) if store.shows(name, batch, position, config.clock(), config.timeout) else None
        kind = task_type(row.task_type) if row is not None else None
        sides = kind.image_sides() if kind is not None else {}
        if row is None or kind is None or side not in sides:
            raise HTTPException(404, "no such image in your batch")
        return _image_file(kind.page_images(row.id_a, row.id_b, round_.options(row))[sides[side]], round_, "private, max-age=3600")

    @api.get("/api/example/{kind}/{number}/{side}", response_class=Response, responses={200: _IMAGE, **_errors(401, 404, 422)})
    def example_image(
        kind: Annotated[str, InPath(max_length=32)],
        number: Annotated[int, InPath(ge=0, le=POSITION_MAX)],
        side: Annotated[str, InPath(max_length=8)],
        who: Rater,
    ) -> Response:
        examples = round_.examples.get(kind, ())
        if not 0 <= number < len(examples) or side not in ("a", "b"):
            raise HTTPException(404, "no such example")
        chosen = examples[number].a if side == "a" else examples[number].b
        if chosen.kind != "image":
            raise HTTPException(404, "no such example image")
        return _image_file(chosen.value, round_, "private, max-age=86400")

    return api


def _image_file(image_id: str, round_: Round, cache: str) -> Response:
    path = round_.catalog.paths.get(image_id)
    found = confined(path, round_.images) if path else None
    if found is None:
        raise HTTPException(404, "image file not found in the image folder")
    return FileResponse(found, headers={"Cache-Control": cache})
