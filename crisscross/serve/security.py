"""The app's guards, each a small pure piece the app wires in: CSRF tokens, a per-client rate
limit, a request size limit, and image paths confined to the image folder."""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def csrf_token(secret: bytes, session: str) -> str:
    """The token a session's page sends back with each submit (HMAC of the session's token hash,
    so it needs no server-side state and survives a restart)."""
    return hmac.new(secret, f"csrf:{session}".encode(), hashlib.sha256).hexdigest()


def csrf_ok(secret: bytes, session: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(csrf_token(secret, session), given)


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


async def _too_large(send: Send, max_bytes: int) -> None:
    body = f'{{"detail":"request body over {max_bytes} bytes"}}'.encode()
    await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def confined(path: str, root: str) -> Path | None:
    """``path`` as a file inside ``root`` (symlinks followed), or None when it leaves the folder,
    names no file, or is not a local path."""
    if "\0" in path or "://" in path:
        return None
    resolved, base = os.path.realpath(path), os.path.realpath(root)
    if not (resolved == base or resolved.startswith(base.rstrip("/") + "/")):
        return None
    return Path(resolved) if os.path.isfile(resolved) else None


def image_root(paths: list[str]) -> str:
    """The folder all image paths share: the default image folder when none is given."""
    local = [os.path.realpath(p) for p in paths if "://" not in p]
    return os.path.commonpath([os.path.dirname(p) for p in local]) if local else os.getcwd()
