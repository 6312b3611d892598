"""The release browser (``crisscross browse``): a local, read-only page over a release's pairs.

Routes: ``/`` (the page), ``/static/*`` (its own CSS and JS), ``/api/release`` (name, version,
the filters' values with counts, the card's plots), ``/api/pairs`` (one page of pairs, filtered and
sorted in DuckDB: :mod:`crisscross.release.query`), ``/api/pairs/{key}`` (a pair, its judgments,
their spread and a machine label's cut and signals), ``/api/image`` (an image the release pairs,
whole or as a thumbnail, read only from the images folder given), ``/plots/{name}`` (the card's
PNGs).  It changes nothing, so there is no sign-in and no POST; it listens on this machine unless
told otherwise, and it follows the rater app's rules: strict queries, one-line refusals, the same
security headers (CSP: nothing from elsewhere, no inline script), text never rendered as HTML.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Collection
from functools import lru_cache
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi import Path as InPath
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response

from crisscross.core.images import UnreadableImageError, load_rgb
from crisscross.core.io import confined
from crisscross.release.query import LABELLED_BY, MAX_PAGE, SORTS, Filters, ReleaseView
from crisscross.serve import browse_assets
from crisscross.serve.security import HEADERS, RateLimiter, SecurityHeaders, first_problem

THUMBNAIL = 320  # pixels of a thumbnail's longer side
MAX_ID = 256
PLOTS = "plots"
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def create_browser(
    view: ReleaseView, images: str | None, *, hosts: Collection[str] = LOCAL_HOSTS, rate_per_second: float = 1000.0
) -> SecurityHeaders:
    """The page over ``view``; images are read from ``images`` (None: none are shown).  A request
    must name one of ``hosts`` in its Host header: a page elsewhere that points a host name of its
    own at this machine (DNS rebinding) is refused, so only this machine's browser reads the release."""
    api = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, title="crisscross release browser")
    per_address = RateLimiter(rate_per_second, rate_per_second * 2)  # far above a person's page (≤ 100 thumbnails at once)
    choices = view.choices()
    plots = sorted(p.name for p in (view.path / PLOTS).glob("*.png")) if (view.path / PLOTS).is_dir() else []

    @api.exception_handler(RequestValidationError)
    async def malformed(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": first_problem(error)}, status_code=422)

    @api.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        named = host_of(request.headers.get("host", ""))
        if named not in hosts:
            detail = f"host {named or 'not given'} is not this page's: open it at 127.0.0.1, or start browse with --allow-host {named}"
            return JSONResponse({"detail": detail[:300]}, status_code=400)
        if not per_address.allow(request.client.host if request.client else "unknown", time.monotonic()):
            return JSONResponse({"detail": "too many requests: slow down"}, status_code=429, headers={"Retry-After": "1"})
        response: Response = await call_next(request)
        return response

    @api.get("/", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        return HTMLResponse(browse_assets.BROWSE_HTML)

    @api.get("/static/{name}")
    def static(name: Annotated[str, InPath(max_length=64)]) -> Response:
        if name not in browse_assets.STATIC:
            raise HTTPException(404, "no such file")
        body, media = browse_assets.STATIC[name]
        return Response(body, media_type=media, headers={"Cache-Control": "no-cache"})

    @api.get("/api/release")
    def release() -> dict[str, Any]:
        info = view.info
        return {
            "name": info.get("name"),
            "version": info.get("version"),
            "simulated": bool(info.get("simulated")),
            "choices": choices,
            "sorts": list(SORTS),
            "plots": plots,
            "images": images is not None,
        }

    def one_of(field: str, value: str | None) -> str | None:
        present = {str(v) for v, _ in choices[field]}
        if value is not None and value not in present:
            raise HTTPException(422, f"{field}: {value!r} is none of this release's ({', '.join(sorted(present)) or 'none'})")
        return value

    @api.get("/api/pairs")
    def pairs(
        task_type: Annotated[str | None, Query(max_length=MAX_ID)] = None,
        split: Annotated[str | None, Query(max_length=MAX_ID)] = None,
        method: Annotated[str | None, Query(max_length=MAX_ID)] = None,
        labelled_by: Annotated[Literal[LABELLED_BY] | None, Query()] = None,  # type: ignore[valid-type]
        positive: Annotated[Literal["yes", "no"] | None, Query()] = None,
        score_min: Annotated[float | None, Query(ge=0.0, le=5.0)] = None,
        score_max: Annotated[float | None, Query(ge=0.0, le=5.0)] = None,
        sort: Annotated[Literal[tuple(SORTS)], Query()] = "release",  # type: ignore[valid-type]
        order: Annotated[Literal["asc", "desc"], Query()] = "asc",
        offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    ) -> dict[str, Any]:
        filters = Filters(
            task_type=one_of("task_type", task_type),
            split=one_of("split", split),
            method=one_of("method", method),
            labelled_by=labelled_by,
            positive=None if positive is None else positive == "yes",
            score_min=score_min,
            score_max=score_max,
            sort=sort,
            descending=order == "desc",
            offset=offset,
            limit=limit,
        )
        total, rows = view.page(filters)
        return {"total": total, "offset": offset, "rows": rows}

    @api.get("/api/pairs/{key}")
    def pair(key: Annotated[int, InPath(ge=0, le=2**62)]) -> dict[str, Any]:
        found = view.pair(key)
        if found is None:
            raise HTTPException(404, f"no pair {key} in this release")
        return found

    @api.get("/api/image")
    def image(
        id: Annotated[str, Query(max_length=MAX_ID, pattern=r"^[^\x00/\\]*$")],
        size: Annotated[Literal["thumb", "full"], Query()] = "thumb",
    ) -> Response:
        if images is None:
            raise HTTPException(404, "no images folder: start browse with --images FOLDER")
        found = next((f for name in view.image_files_of(id) if (f := confined(os.path.join(images, name), images))), None)
        if found is None:
            raise HTTPException(404, f"image {id} is not in the images folder")
        if size == "full":
            return FileResponse(found, headers={"Cache-Control": "private, max-age=3600"})
        try:
            body = thumbnail(str(found), os.stat(found).st_mtime_ns)
        except UnreadableImageError as error:
            raise HTTPException(404, f"image {id} cannot be decoded: {error}") from None
        return Response(body, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"})

    @api.get("/plots/{name}")
    def plot(name: Annotated[str, InPath(max_length=64)]) -> Response:
        found = confined(str(view.path / PLOTS / name), str(view.path / PLOTS)) if name in plots else None
        if found is None:
            raise HTTPException(404, "no such plot")
        return FileResponse(found, media_type="image/png")

    return SecurityHeaders(api, HEADERS)


def host_of(header: str) -> str:
    """The host a Host header names, without its port (``[::1]:8001`` → ``::1``)."""
    try:
        return urlsplit(f"//{header}").hostname or ""
    except ValueError:  # a port that is no number, an unclosed bracket
        return ""


@lru_cache(maxsize=1024)  # thumbnails are 10–30 kB: at most about 30 MB held
def thumbnail(path: str, modified: int) -> bytes:
    """A JPEG of the image at most :data:`THUMBNAIL` pixels on its longer side (``modified``: a
    changed file is made anew), decoded under the pixel limit as every image the project reads."""
    from PIL import Image

    picture = Image.fromarray(load_rgb(path))
    picture.thumbnail((THUMBNAIL, THUMBNAIL))
    out = io.BytesIO()
    picture.save(out, format="JPEG", quality=85)
    return out.getvalue()
