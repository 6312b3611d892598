"""The id layer: canonical ids, and the forms published datasets write them in.

Canonical ids are strings ``<namespace>:img:<native>`` and ``<namespace>:cap:<native>``, so an id
says which collection and which modality it belongs to, and tables from different datasets can be
joined without collisions.  Each namespace has an :class:`IdScheme` that converts both ways
between canonical ids and the published forms:

* ``coco``: images ``COCO_val2014_%012d.jpg`` or the COCO integer id, captions
  ``COCO_val2014:sentid:<N>`` (CxC) or the caption annotation integer id (ECCV Caption);
* ``f30k``: images by Flickr file name ``<N>.jpg``, captions ``<N>.jpg#<index>``;
* anything else: the native value as given (generic tables).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from crisscross.core.registry import Registry

IMAGE_KIND = "img"
CAPTION_KIND = "cap"


class IdFormError(ValueError):
    """A value is in none of the forms a scheme accepts."""


def make_id(namespace: str, kind: str, native: object) -> str:
    if not namespace or ":" in namespace:
        raise IdFormError(f"namespace must be non-empty and without ':', got {namespace!r}")
    if kind not in (IMAGE_KIND, CAPTION_KIND):
        raise IdFormError(f"kind must be {IMAGE_KIND!r} or {CAPTION_KIND!r}, got {kind!r}")
    native_text = str(native).strip()
    if not native_text:
        raise IdFormError(f"empty native id for {namespace}:{kind}")
    return f"{namespace}:{kind}:{native_text}"


def _canonical_parts(text: str) -> tuple[str, str, str] | None:
    """:func:`split_id` without the error, for a value that may be canonical or not."""
    parts = text.split(":", 2)
    if len(parts) != 3 or parts[1] not in (IMAGE_KIND, CAPTION_KIND) or not parts[2]:
        return None
    return parts[0], parts[1], parts[2]


def split_id(canonical: str) -> tuple[str, str, str]:
    """``coco:img:42`` → ``("coco", "img", "42")``."""
    parts = _canonical_parts(canonical)
    if parts is None:
        raise IdFormError(f"not a canonical id: {canonical!r}")
    return parts


@dataclass(frozen=True)
class IdScheme:
    """Plain scheme: the native value is also the published form."""

    namespace: str

    def image(self, native: object) -> str:
        return make_id(self.namespace, IMAGE_KIND, native)

    def caption(self, native: object) -> str:
        return make_id(self.namespace, CAPTION_KIND, native)

    def native(self, canonical: str, kind: str) -> str:
        """The native part, checked against the scheme so malformed canonical ids fail here."""
        namespace, found_kind, native = split_id(canonical)
        if namespace != self.namespace or found_kind != kind:
            raise IdFormError(f"{canonical!r} is not a {self.namespace} {kind} id")
        return self._native_image(native) if kind == IMAGE_KIND else self._native_caption(native)

    def published_image(self, canonical: str) -> str:
        return self.native(canonical, IMAGE_KIND)

    def published_caption(self, canonical: str) -> str:
        return self.native(canonical, CAPTION_KIND)

    def parse_image(self, value: object) -> str:
        """Canonical id from the canonical, published or native form."""
        return self._parse(value, IMAGE_KIND, self._native_image)

    def parse_caption(self, value: object) -> str:
        return self._parse(value, CAPTION_KIND, self._native_caption)

    def parse(self, value: object, kind: str) -> str:
        """``parse_image`` or ``parse_caption`` by kind (``img`` / ``cap``)."""
        return self.parse_image(value) if kind == IMAGE_KIND else self.parse_caption(value)

    def _parse(self, value: object, kind: str, to_native: Callable[[str], str]) -> str:
        # A canonical id must be of this namespace and kind: "coco:cap:5" is never an image id,
        # and the plain scheme must not nest another namespace's id inside its own.
        try:
            text = str(value).strip()
        except ValueError as error:  # an int of more digits than Python converts to text
            raise IdFormError(f"not a {self.namespace} {kind} id: {error}") from error
        if _canonical_parts(text) is None:  # a test, not a caught error: millions of ids are parsed
            return make_id(self.namespace, kind, to_native(text))
        return make_id(self.namespace, kind, self.native(text, kind))

    def _native_image(self, text: str) -> str:
        return text

    def _native_caption(self, text: str) -> str:
        return text


def _number(digits: str, what: str) -> int:
    """``int(digits)`` of an id's digits: more digits than Python converts (4300) is no id either."""
    try:
        return int(digits)
    except ValueError as error:
        raise IdFormError(f"not a {what}: {len(digits)} digits, more than Python converts to a number") from error


# Patterns are used with ``fullmatch`` (``$`` would also accept a trailing newline) and ASCII
# digits only (``\d`` alone accepts any Unicode digit, which would make non-ASCII ids).
_COCO_FILE = re.compile(r"(?:.*/)?COCO_(?:train|val|test)2014_(\d{12})\.jpg", re.ASCII)
_COCO_2017_FILE = re.compile(r"(?:.*/)?(\d{12})\.jpg", re.ASCII)
_COCO_SENTID = re.compile(r"COCO_(?:train|val|test)2014:sentid:(\d+)", re.ASCII)
_DIGITS = re.compile(r"(\d+)", re.ASCII)


@dataclass(frozen=True)
class CocoIdScheme(IdScheme):
    """MS-COCO: integer image and caption-annotation ids; CxC's published string forms."""

    namespace: str = "coco"
    subset: str = "val2014"

    def published_image(self, canonical: str) -> str:
        return f"COCO_{self.subset}_{self.coco_int(canonical, IMAGE_KIND):012d}.jpg"

    def published_caption(self, canonical: str) -> str:
        return f"COCO_{self.subset}:sentid:{self.coco_int(canonical, CAPTION_KIND)}"

    def coco_int(self, canonical: str, kind: str) -> int:
        return _number(self.native(canonical, kind), f"COCO {kind} id")

    def _native_image(self, text: str) -> str:
        match = _COCO_FILE.fullmatch(text) or _COCO_2017_FILE.fullmatch(text) or _DIGITS.fullmatch(text)
        if not match:
            raise IdFormError(f"not a COCO image id or file name: {text!r}")
        return str(_number(match.group(1), "COCO image id"))

    def _native_caption(self, text: str) -> str:
        match = _COCO_SENTID.fullmatch(text) or _DIGITS.fullmatch(text)
        if not match:
            raise IdFormError(f"not a COCO caption id: {text!r}")
        return str(_number(match.group(1), "COCO caption id"))


_FLICKR_FILE = re.compile(r"(?:.*/)?(\d+)\.jpg", re.ASCII)
_FLICKR_CAPTION = re.compile(r"(?:.*/)?(\d+)\.jpg#(\d+)", re.ASCII)
_FLICKR_BARE_CAPTION = re.compile(r"(\d+)#(\d+)", re.ASCII)


@dataclass(frozen=True)
class FlickrIdScheme(IdScheme):
    """Flickr30k: images by Flickr photo number, captions ``<photo>.jpg#<index>``."""

    namespace: str = "f30k"

    def published_image(self, canonical: str) -> str:
        return f"{self.native(canonical, IMAGE_KIND)}.jpg"

    def published_caption(self, canonical: str) -> str:
        photo, _, index = self.native(canonical, CAPTION_KIND).partition("#")
        return f"{photo}.jpg#{index}"

    def caption_native(self, photo: object, index: int) -> str:
        return f"{self._native_image(str(photo))}#{int(index)}"

    def _native_image(self, text: str) -> str:
        match = _FLICKR_FILE.fullmatch(text) or _DIGITS.fullmatch(text)
        if not match:
            raise IdFormError(f"not a Flickr30k image file name: {text!r}")
        return match.group(1)

    def _native_caption(self, text: str) -> str:
        match = _FLICKR_CAPTION.fullmatch(text) or _FLICKR_BARE_CAPTION.fullmatch(text)
        if not match:
            raise IdFormError(f"not a Flickr30k caption id: {text!r}")
        return f"{match.group(1)}#{_number(match.group(2), 'Flickr30k caption index')}"


ID_SCHEMES: Registry[IdScheme] = Registry("id scheme")
ID_SCHEMES.register("coco")(CocoIdScheme)
ID_SCHEMES.register("f30k")(FlickrIdScheme)


@functools.cache
def scheme_for(namespace: str) -> IdScheme:
    """The scheme of a namespace; namespaces without a special one get the plain scheme.  Schemes
    are frozen, so one per namespace serves every id (a release converts millions)."""
    if namespace in ID_SCHEMES.names():
        return ID_SCHEMES.create(namespace)
    return IdScheme(namespace)


def scheme_of(canonical: str) -> IdScheme:
    return scheme_for(split_id(canonical)[0])


@functools.lru_cache(maxsize=1 << 17)
def published(canonical: str, kind: str) -> str:
    """A canonical id in the form its dataset publishes it (COCO file name, sentid, Flickr name);
    remembered for the last 131,072 ids, since a table of pairs names each image a dozen times."""
    scheme = scheme_of(canonical)
    return scheme.published_caption(canonical) if kind == CAPTION_KIND else scheme.published_image(canonical)
