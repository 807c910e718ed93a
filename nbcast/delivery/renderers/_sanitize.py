"""Neutralising what a notebook's outputs say in HTML: outputs are data, not code.

Two layers, because the class of bug (CVE-2021-32862: nbconvert rendering a
notebook's HTML outputs verbatim) is one a single missed template block brings back:

1. :func:`clean_fragment` is the ``clean_html`` filter of nbconvert's sanitizing
   mode (``sanitize_html=True``): every HTML and Markdown output and Markdown cell
   goes through it. It is bleach with an allowlist made for reports — nbconvert's
   default list has no ``thead``, ``th``, ``img`` or headings, so DataFrames and
   Markdown would come out as escaped tag soup. Elements that carry code or fetch
   something (``script``, ``style``, ``iframe``, ``object``, ``svg``, forms, …) are
   removed *with their content*; other unknown tags are dropped and their text kept.
   Links may be ``http``, ``https``, ``mailto`` or ``#fragment``; images only
   ``data:image/…``; ``style`` attributes keep bleach's safe CSS properties.
2. :func:`neutralise_document` goes over the whole rendered page once more and
   removes any element, event-handler attribute or URL that should not be there,
   whichever template block produced it.

On top, the page declares ``Content-Security-Policy: default-src 'none'; img-src
data:; style-src 'unsafe-inline'`` (:data:`CONTENT_SECURITY_POLICY`), so a browser
would neither run a script nor fetch anything even if both layers missed one.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from bs4 import BeautifulSoup

__all__ = ["CONTENT_SECURITY_POLICY", "clean_fragment", "neutralise_document"]

CONTENT_SECURITY_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

_ALLOWED_TAGS = frozenset(
    [
        "a",
        "abbr",
        "acronym",
        "b",
        "bdi",
        "bdo",
        "blockquote",
        "br",
        "caption",
        "cite",
        "code",
        "col",
        "colgroup",
        "dd",
        "del",
        "details",
        "dfn",
        "div",
        "dl",
        "dt",
        "em",
        "figcaption",
        "figure",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "hr",
        "i",
        "img",
        "ins",
        "kbd",
        "li",
        "mark",
        "ol",
        "p",
        "pre",
        "q",
        "s",
        "samp",
        "small",
        "span",
        "strong",
        "sub",
        "summary",
        "sup",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "time",
        "tr",
        "u",
        "ul",
        "var",
        "wbr",
    ]
)
_COMMON_ATTRIBUTES = frozenset({"class", "id", "title", "lang", "dir", "style"})
_TAG_ATTRIBUTES = {
    "a": frozenset({"href"}),
    "img": frozenset({"src", "alt", "width", "height"}),
    "td": frozenset({"colspan", "rowspan", "align", "valign"}),
    "th": frozenset({"colspan", "rowspan", "align", "valign", "scope"}),
    "table": frozenset({"border"}),
    "col": frozenset({"span"}),
    "colgroup": frozenset({"span"}),
    "ol": frozenset({"start", "type"}),
    "time": frozenset({"datetime"}),
}
_KILLED_WITH_CONTENT = [
    "script",
    "style",
    "iframe",
    "frame",
    "frameset",
    "object",
    "embed",
    "applet",
    "noscript",
    "template",
    "svg",
    "math",
    "form",
    "input",
    "button",
    "textarea",
    "select",
    "option",
    "link",
    "meta",
    "base",
    "audio",
    "video",
    "canvas",
    "portal",
]
_URL_ATTRIBUTES = frozenset(
    [
        "href",
        "src",
        "action",
        "formaction",
        "xlink:href",
        "srcset",
        "background",
        "poster",
        "data",
        "codebase",
        "cite",
        "longdesc",
        "usemap",
        "ping",
        "manifest",
    ]
)
_LINK_SCHEMES = ("http:", "https:", "mailto:", "#")
_CONTROL = re.compile(r"[\x00-\x20\x7f]+")
_CSS_CODE = re.compile(r"url\s*\(|expression\s*\(|@import|behavior\s*:", re.IGNORECASE)

_local = threading.local()


def _safe_link(value: str) -> bool:
    return _CONTROL.sub("", value).lower().startswith(_LINK_SCHEMES)


def _safe_image(value: str) -> bool:
    return _CONTROL.sub("", value).lower().startswith("data:image/")


def _allow_attribute(tag: str, name: str, value: str) -> bool:
    if name.startswith("on"):
        return False
    if tag == "a" and name == "href":
        return _safe_link(value)
    if tag == "img" and name == "src":
        return _safe_image(value)
    if name == "style" and _CSS_CODE.search(value):
        return False
    return name in _COMMON_ATTRIBUTES or name in _TAG_ATTRIBUTES.get(tag, ())


def _cleaner() -> Any:
    cleaner = getattr(_local, "cleaner", None)
    if cleaner is None:
        import bleach  # type: ignore[import-untyped]
        from bleach.css_sanitizer import CSSSanitizer  # type: ignore[import-untyped]

        cleaner = bleach.Cleaner(
            tags=_ALLOWED_TAGS,
            attributes=_allow_attribute,
            protocols={"http", "https", "mailto", "data"},
            strip=True,
            strip_comments=True,
            css_sanitizer=CSSSanitizer(),
        )
        _local.cleaner = cleaner
    return cleaner


def clean_fragment(fragment: Any) -> str:
    """``fragment`` (HTML from an output or a Markdown cell) with only safe markup left."""
    text = fragment.decode() if isinstance(fragment, bytes) else str(fragment)
    if "<" not in text:
        return str(_cleaner().clean(text))
    soup = BeautifulSoup(text, "html.parser")
    for element in soup.find_all(_KILLED_WITH_CONTENT):
        element.decompose()
    return str(_cleaner().clean(str(soup)))


def neutralise_document(html: str) -> str:
    """The whole page, with anything active or fetching removed (module docstring).

    Keeps the page's own ``<style>`` and ``<meta>`` elements in ``<head>``.
    """
    soup = BeautifulSoup(html, "html.parser")
    for element in soup.find_all(_KILLED_WITH_CONTENT):
        if element.name in ("style", "meta") and element.find_parent("head") is not None:
            continue
        element.decompose()
    for element in soup.find_all(True):
        for name in list(element.attrs):
            value = element.attrs[name]
            text = " ".join(value) if isinstance(value, list) else str(value)
            lowered = name.lower()
            if lowered.startswith("on") or lowered == "srcset":
                del element.attrs[name]
            elif lowered in _URL_ATTRIBUTES:
                safe = _safe_image(text) if element.name == "img" else _safe_link(text)
                if not safe:
                    del element.attrs[name]
            elif lowered == "style" and _CSS_CODE.search(text):
                del element.attrs[name]
    return str(soup)
