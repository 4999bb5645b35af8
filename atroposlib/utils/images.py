"""Pictures of data-set rows as base64 PNG, the form the chat route and a group's ``images`` carry.

A row's picture may be a Pillow image (hub sets with an ``Image`` feature), raw bytes (Parquet), the hub's
``{"bytes": ..., "path": ...}`` dict, a data URI, a base64 string, a file path (relative paths are taken
from the data file's folder) or an ``http(s)`` URL (fetched with a time limit). :func:`image_base64`
turns any of them into base64 PNG, checking with Pillow that it really is a picture;
:class:`ImageError` says in one line why not.
"""

from __future__ import annotations

import base64
import binascii
import io
from pathlib import Path
from typing import Any, Optional

from PIL import Image, UnidentifiedImageError


class ImageError(ValueError):
    """A value that is not a readable picture; the message says why in one line."""


def _png(image: Image.Image, max_side: Optional[int]) -> str:
    if image.mode not in ("RGB", "RGBA", "L"):
        image = image.convert("RGBA" if "A" in image.mode else "RGB")
    if max_side and max(image.size) > max_side:
        image = image.copy()
        image.thumbnail((max_side, max_side))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _open(data: bytes, what: str) -> Image.Image:
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (UnidentifiedImageError, OSError) as exc:
        raise ImageError(f"{what} is not a picture Pillow can read ({type(exc).__name__})") from None
    return image


def _fetch(url: str, timeout: float) -> bytes:
    import requests

    try:
        response = requests.get(url, timeout=timeout)
        response.raise_for_status()
    except requests.RequestException as exc:
        raise ImageError(f"cannot fetch {url}: {type(exc).__name__}") from None
    return response.content


def image_bytes(value: Any, base_dir: Optional[Path] = None, timeout: float = 20.0) -> bytes | Image.Image:
    """The encoded picture of ``value`` (bytes), or the Pillow image itself (see the module docstring)."""
    if isinstance(value, Image.Image):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, dict):
        if value.get("bytes"):
            return bytes(value["bytes"])
        if value.get("path"):
            return image_bytes(value["path"], base_dir, timeout)
        raise ImageError("an image dict needs 'bytes' or 'path'")
    if not isinstance(value, str) or not value.strip():
        raise ImageError(f"expected a picture, got {type(value).__name__}")
    text = value.strip()
    if text.startswith(("http://", "https://")):
        return _fetch(text, timeout)
    if text.startswith("data:"):
        text = text.split(",", 1)[-1]
    elif len(text) < 1024:
        path = Path(text.removeprefix("file://"))
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if path.is_file():
            return path.read_bytes()
        if "/" in text or "." in text[-5:]:
            raise ImageError(f"no such picture file: {path}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("a string picture must be a file path, a URL, a data URI or base64") from None


def image_base64(
    value: Any, base_dir: Optional[Path] = None, max_side: Optional[int] = None, timeout: float = 20.0
) -> str:
    """``value`` as base64 PNG, scaled down to ``max_side`` pixels on its longer side when larger.

    Raises :class:`ImageError` when ``value`` is not a readable picture."""
    data = image_bytes(value, base_dir, timeout)
    image = data if isinstance(data, Image.Image) else _open(data, "the image")
    return _png(image, max_side)


def data_url(image_b64: str) -> str:
    """A ``data:`` URL of a base64 PNG."""
    return f"data:image/png;base64,{image_b64}"
