"""WCAG checks of an HTML snippet, each for one issue key, on BeautifulSoup's parse (``lxml``).

* ``missing_alt_text`` (WCAG 1.1.1): every ``<img>`` has a non-empty ``alt`` (``alt=""`` is allowed only with
  ``role="presentation"`` or ``"none"``);
* ``missing_label`` (1.3.1, 3.3.2, 4.1.2): every form control (``input`` other than hidden, submit, reset,
  button and image; ``select``; ``textarea``) has a name: a ``<label for>`` naming its ``id``, an enclosing
  ``<label>`` with text, ``aria-label`` or ``aria-labelledby`` naming an element with text;
* ``missing_link_text`` (2.4.4, 4.1.2): every ``<a href>`` has text, an ``aria-label``, or an image with ``alt``.
"""

from __future__ import annotations

from collections.abc import Callable

from bs4 import BeautifulSoup, Tag

UNLABELLED_INPUTS = {"hidden", "submit", "reset", "button", "image"}


def _text(tag: Tag) -> str:
    return tag.get_text(" ", strip=True)


def alt_text_ok(soup: BeautifulSoup) -> bool:
    for img in soup.find_all("img"):
        alt = img.get("alt")
        decorative = str(img.get("role", "")).lower() in ("presentation", "none")
        if alt is None or (not str(alt).strip() and not decorative):
            return False
    return True


def _named(control: Tag, soup: BeautifulSoup) -> bool:
    if str(control.get("aria-label", "")).strip():
        return True
    for ref in str(control.get("aria-labelledby", "")).split():
        target = soup.find(id=ref)
        if target is not None and _text(target):
            return True
    control_id = control.get("id")
    if control_id and any(_text(label) for label in soup.find_all("label", attrs={"for": control_id})):
        return True
    parent = control.find_parent("label")
    return parent is not None and bool(_text(parent))


def labels_ok(soup: BeautifulSoup) -> bool:
    for control in soup.find_all(["input", "select", "textarea"]):
        if control.name == "input" and str(control.get("type", "text")).lower() in UNLABELLED_INPUTS:
            continue
        if not _named(control, soup):
            return False
    return True


def link_text_ok(soup: BeautifulSoup) -> bool:
    for link in soup.find_all("a", href=True):
        images = [str(img.get("alt", "")).strip() for img in link.find_all("img")]
        if not (_text(link) or str(link.get("aria-label", "")).strip() or any(images)):
            return False
    return True


RULES: dict[str, Callable[[BeautifulSoup], bool]] = {
    "missing_alt_text": alt_text_ok,
    "missing_label": labels_ok,
    "missing_link_text": link_text_ok,
}
