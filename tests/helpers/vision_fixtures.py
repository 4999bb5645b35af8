"""Pictures and data files in the hub schemas of the vision environments, drawn with Pillow.

:func:`write_vision_fixtures` writes a folder with one PNG per row and one JSONL file per environment
(``ocr_vqa.jsonl``, ``clevr.jsonl``, ``clocks.jsonl``, ``pixmo_count.jsonl``, ``pixmo_points.jsonl``), the
pictures named by paths relative to the files. ``tests/fixtures/vision/`` is its output (the README's
commands read it); tests write their own copies. :func:`picture_answers` maps each picture, as the
environments send it (base64 PNG), to its rows' gold answers, for scripted responders.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from atroposlib.utils.images import image_base64

BOOKS = [
    ("Gardens of Stone", "Mira Vale", "Gardening"),
    ("The Last Harbour", "J.K. Rowan", "Mystery"),
    ("Cooking with Fire", "Ana Ortiz", "Cookbooks"),
]
SCENES = [(3, 1, "How many circles are there?", "3"), (2, 2, "Is there a red square?", "yes"),
          (4, 0, "Is there a red square?", "no"), (1, 3, "How many squares are there?", "3")]  # fmt: skip
CLOCKS = [(3, 5), (10, 40), (12, 0), (7, 15)]
COUNTS = [(5, "red circles"), (2, "red circles"), (7, "red circles"), (0, "red circles")]
POINTS = [
    ("Where is the red dot?", [(25.0, 25.0)]),
    ("Point at the red dots.", [(20.0, 70.0), (70.0, 30.0)]),
    ("Where are the red dots?", [(50.0, 50.0), (80.0, 80.0), (15.0, 85.0)]),
]


def book_cover(title: str, author: str) -> Image.Image:
    image = Image.new("RGB", (160, 220), (40, 70, 120))
    draw = ImageDraw.Draw(image)
    draw.rectangle((8, 8, 151, 211), outline=(240, 220, 150), width=3)
    draw.text((16, 40), title, fill=(255, 255, 255))
    draw.text((16, 180), author, fill=(240, 220, 150))
    return image


def scene(circles: int, squares: int) -> Image.Image:
    image = Image.new("RGB", (240, 160), (200, 200, 200))
    draw = ImageDraw.Draw(image)
    for k in range(circles):
        draw.ellipse((10 + 50 * k, 20, 50 + 50 * k, 60), fill=(40, 90, 220))
    for k in range(squares):
        draw.rectangle((10 + 50 * k, 100, 50 + 50 * k, 140), fill=(220, 40, 40))
    return image


def clock(hour: int, minute: int) -> Image.Image:
    image = Image.new("RGB", (200, 200), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    draw.ellipse((10, 10, 190, 190), outline=(0, 0, 0), width=4)
    for tick in range(12):
        angle = math.radians(tick * 30)
        draw.line((100 + 80 * math.sin(angle), 100 - 80 * math.cos(angle),
                   100 + 88 * math.sin(angle), 100 - 88 * math.cos(angle)), fill=(0, 0, 0), width=3)  # fmt: skip
    for length, angle, width in ((50, (hour % 12 + minute / 60) * 30, 6), (75, minute * 6, 3)):
        rad = math.radians(angle)
        draw.line(
            (100, 100, 100 + length * math.sin(rad), 100 - length * math.cos(rad)),
            fill=(0, 0, 0),
            width=width,
        )
    return image


def dots(points: list[tuple[float, float]], size: tuple[int, int] = (200, 150)) -> Image.Image:
    image = Image.new("RGB", size, (250, 250, 240))
    draw = ImageDraw.Draw(image)
    for x, y in points:
        cx, cy = x / 100 * size[0], y / 100 * size[1]
        draw.ellipse((cx - 6, cy - 6, cx + 6, cy + 6), fill=(220, 30, 30))
    return image


def _save(image: Image.Image, folder: Path, name: str) -> str:
    (folder / "images").mkdir(parents=True, exist_ok=True)
    image.save(folder / "images" / name, format="PNG")
    return f"images/{name}"


def _write(folder: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    path = folder / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_vision_fixtures(folder: Path) -> dict[str, Path]:
    """Write the pictures and data files into ``folder``; return the data files by environment name."""
    folder.mkdir(parents=True, exist_ok=True)
    ocr = [
        {"image": _save(book_cover(t, a), folder, f"book{k}.png"), "questions": [
            "What is the title of this book?", "Who wrote this book?", f"Is this a {g} book?", "Is this a comedy book?"],
         "answers": [t, a, "Yes", "No"], "genre": g}
        for k, (t, a, g) in enumerate(BOOKS)
    ]  # fmt: skip
    clevr = [
        {
            "image": _save(scene(c, s), folder, f"scene{k}.png"),
            "problem": q,
            "solution": f"<answer> {a} </answer>",
        }
        for k, (c, s, q, a) in enumerate(SCENES)
    ]
    clocks = [
        {"image": _save(clock(h, m), folder, f"clock{k}.png"), "hour": h, "minute": m}
        for k, (h, m) in enumerate(CLOCKS)
    ]
    counts = [
        {"image_url": _save(dots([(10 + 15 * i, 50.0) for i in range(n)]), folder, f"count{k}.png"),
         "label": label, "count": n, "image_sha256": f"sha{k}"}
        for k, (n, label) in enumerate(COUNTS)
    ]  # fmt: skip
    points = [
        {"image_url": _save(dots(p), folder, f"points{k}.png"), "question": q,
         "points": [{"x": x, "y": y} for x, y in p], "response": "", "alt_text": ["red dot"]}
        for k, (q, p) in enumerate(POINTS)
    ]  # fmt: skip
    return {
        "ocr_vqa": _write(folder, "ocr_vqa.jsonl", ocr),
        "clevr": _write(folder, "clevr.jsonl", clevr),
        "pixmo_clocks": _write(folder, "clocks.jsonl", clocks),
        "pixmo_count": _write(folder, "pixmo_count.jsonl", counts),
        "pixmo_point_explanations": _write(folder, "pixmo_points.jsonl", points),
    }


def picture_answers(data_file: Path, answer_of: Any, image_field: str = "image") -> dict[str, Any]:
    """``{base64 PNG as sent: answer_of(row)}`` for every row of ``data_file``."""
    rows = [json.loads(line) for line in data_file.read_text().splitlines() if line.strip()]
    return {image_base64(row[image_field], data_file.parent, max_side=1024): answer_of(row) for row in rows}


def sent_picture(messages: list[dict[str, Any]]) -> str:
    """The base64 picture of a chat request's user turn."""
    for message in messages:
        if isinstance(message.get("content"), list):
            for part in message["content"]:
                if part.get("type") == "image_url":
                    return part["image_url"]["url"].split(",", 1)[1]
    raise AssertionError("no picture in the request")
