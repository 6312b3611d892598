"""The app's guards, each a small pure piece the app wires in: CSRF tokens, the same-origin check,
a per-client rate limit, a request size limit, security headers on every response, and the
image folder shared by the items' paths (paths are confined to it by ``core.io.confined``)."""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from crisscross.core.io import is_uri

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


HEADERS = {  # every page of the project's apps: nothing loads from elsewhere, no inline script, no framing
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer browsers send "Origin: null" with the page's own
    # POSTs, and sign-in checks Origin; the page loads nothing from elsewhere, so nothing leaves.
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
HSTS = ("Strict-Transport-Security", "max-age=31536000")  # only when raters reach the app over https


def csrf_token(secret: bytes, session: str) -> str:
    """The token a session's page sends back with each submit (HMAC of the session's token hash,
    so it needs no server-side state and survives a restart)."""
    return hmac.new(secret, f"csrf:{session}".encode(), hashlib.sha256).hexdigest()


def csrf_ok(secret: bytes, session: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(csrf_token(secret, session), given)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of an absolute http(s) URL, lower-cased as browsers send Origin; None otherwise."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.netloc:
        return None
    host = parts.netloc.lower().rpartition("@")[2]
    return f"{scheme}://{host.removesuffix(f':{_DEFAULT_PORTS[scheme]}')}"  # browsers leave a default port out


def same_origin(origin: str | None, referer: str | None, wanted: str) -> bool:
    """Whether a state-changing request comes from the app's own pages (OWASP's CSRF "verifying
    origin with standard headers"): its Origin, or without one its Referer's origin, is ``wanted``'s.
    A request that shows neither is refused: browsers send Origin with every POST."""
    given = origin if origin not in (None, "") else referer
    expected = origin_of(wanted)
    return given is not None and expected is not None and origin_of(given) == expected


class RateLimiter:
    """Token buckets per client key (``rate`` requests a second, bursts up to ``burst``); the
    least recently seen keys are forgotten beyond ``max_keys``, so memory stays bounded."""

    def __init__(self, rate: float, burst: float, max_keys: int = 10_000) -> None:
        self.rate, self.burst, self.max_keys = rate, burst, max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, key: str, now: float) -> bool:
        with self._lock:
            tokens, seen = self._buckets.pop(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - seen) * self.rate)
            allowed = tokens >= 1.0
            self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
            return allowed


class BodyLimit:
    """ASGI middleware refusing request bodies over ``max_bytes`` with 413, whether the client
    declares the length or streams the body in chunks."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await _too_large(send, self.max_bytes)
            return
        seen = 0
        refused = False  # the 413 is sent; the app is told the client left and its output dropped

        async def limited_receive() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    await _too_large(send, self.max_bytes)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not refused:
                await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not refused:  # after a refusal the app's complaint about the cut body is moot
                raise


class SecurityHeaders:
    """ASGI middleware giving every response ``headers`` (those it does not set itself), whatever
    produced it: a route, a refusal of the body limit, or the server error handler's 500."""

    def __init__(self, app: ASGIApp, headers: Mapping[str, str]) -> None:
        self.app = app
        self.headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                given = list(message.get("headers") or [])
                present = {name.lower() for name, _ in given}
                message["headers"] = given + [(name, value) for name, value in self.headers if name not in present]
            await send(message)

        await self.app(scope, receive, with_headers)


async def _too_large(send: Send, max_bytes: int) -> None:
    body = f'{{"detail":"request body over {max_bytes} bytes"}}'.encode()
    await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def image_root(paths: list[str]) -> str:
    """The folder all image paths share: the default image folder when none is given."""
    local = [os.path.realpath(p) for p in paths if not is_uri(p)]
    return os.path.commonpath([os.path.dirname(p) for p in local]) if local else os.getcwd()


def first_problem(error: Any) -> str:
    """A malformed request's first problem (a validation error's ``errors()``) as one line: where (``body.answers.0.score``) and what."""
    first = error.errors()[0] if error.errors() else {"loc": (), "msg": "malformed request"}
    where = ".".join(str(part) for part in first.get("loc", ()))
    text = f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "malformed request"))
    return " ".join(text.split())  # a key the client sent is part of ``where``: its line breaks do not split the line
