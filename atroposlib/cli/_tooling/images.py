"""Finding the images of a multimodal group (for ``view-run-multimodal``).

Images may arrive as PIL images, base64 strings (with or without a ``data:image/...;base64,``
prefix), raw bytes, dicts carrying one of those (``{"url": ...}``, ``{"image_url": {"url": ...}}``),
lists of any of these, ``image_url`` parts of chat messages, or data URIs inside the decoded prompt.
Anything that does not decode is skipped.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from typing import Any

DATA_URI_RE = re.compile(r"data:image/[a-zA-Z0-9.+-]+;base64,([A-Za-z0-9+/=]+)")
_TEXT_FIELD_RE = re.compile(r'"text"\s*:\s*"((?:[^"\\]|\\.)*)"')
MAX_IMAGES = 16


def decode_image(value: Any) -> Any | None:
    """A PIL image from one image value, or None if it is not a decodable image."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(value, Image.Image):
        return value
    if isinstance(value, dict):
        inner = value.get(
            "image_url", value.get("url", value.get("image", value.get("data", value.get("bytes"))))
        )
        return decode_image(inner) if inner is not value else None
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("data:"):
            comma = text.find(",")
            if comma == -1:
                return None
            text = text[comma + 1 :]
        try:
            value = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return None
    if isinstance(value, (bytes, bytearray)):
        try:
            img = Image.open(io.BytesIO(bytes(value)))
            img.load()
            return img
        except (UnidentifiedImageError, OSError, ValueError):
            return None
    return None


def _flatten(value: Any, out: list[Any], depth: int = 0) -> None:
    if depth > 4 or len(out) >= MAX_IMAGES:
        return
    if isinstance(value, (list, tuple)):
        for v in value:
            _flatten(v, out, depth + 1)
    elif value:
        out.append(value)


def _message_images(messages: Any) -> list[Any]:
    found: list[Any] = []
    if not isinstance(messages, list):
        return found
    for conv in messages:
        for msg in conv if isinstance(conv, list) else [conv]:
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and part.get("type") in ("image_url", "image"):
                        found.append(part.get("image_url") or part.get("image") or part.get("url"))
        if found:
            break  # the prompt's images are the same in every sequence of a group
    return found


def group_images(group: dict[str, Any], prompt_text: str = "") -> list[Any]:
    """The distinct PIL images of ``group``: its ``images`` field first, then messages, then the prompt."""
    candidates: list[Any] = []
    _flatten(group.get("images"), candidates)
    if not candidates:
        candidates = _message_images(group.get("messages"))
    if not candidates and prompt_text:
        candidates = [m.group(0) for m in DATA_URI_RE.finditer(prompt_text)][:MAX_IMAGES]
    images, seen = [], set()
    for c in candidates:
        img = decode_image(c)
        if img is None:
            continue
        key = (img.size, img.mode, img.tobytes()[:4096])
        if key not in seen:
            seen.add(key)
            images.append(img)
    return images


def text_prompt(prefix: str) -> str:
    """The human text of a multimodal prompt.

    If the prompt is a serialised content list, the first ``"text": "..."`` value; else the text after
    an ``[Image]`` marker; else the whole prompt. Inline data URIs are shortened for display.
    """
    if '"type": "text"' in prefix or '"type":"text"' in prefix:
        match = _TEXT_FIELD_RE.search(prefix)
        if match:
            try:
                import json

                return json.loads(f'"{match.group(1)}"')
            except ValueError:
                return match.group(1)
    if "[Image]" in prefix:
        return prefix.split("[Image]", 1)[1].strip()
    return DATA_URI_RE.sub("data:image/…(inline image)", prefix)
