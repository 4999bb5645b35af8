"""HTML for one scored group, as ``view-run`` shows it (pure functions, no Gradio).

A group is shown as: a header (env, step, seq, score summary), the shared prompt once, a score
histogram, and every completion sorted by score (best first), coloured from red (lowest) to green
(highest), with the tokens the trainer learns from (mask != -100) highlighted and a strip showing
where the trained positions lie.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from atroposlib.cli._tooling.sources import GroupRecord
from atroposlib.cli._tooling.text import (
    conversation_text,
    decode,
    decode_group,
    mask_runs,
    split_conversations,
    trained_count,
)

STYLE = """
<style>
.av-group{font-family:system-ui,sans-serif;font-size:14px;line-height:1.45}
.av-head{display:flex;flex-wrap:wrap;gap:.4em 1.2em;align-items:baseline;margin-bottom:.6em}
.av-head .av-env{font-size:1.2em;font-weight:700}
.av-chip{background:#eef;border-radius:4px;padding:0 .4em;color:#223}
.av-prompt{white-space:pre-wrap;background:#f6f6f6;border:1px solid #ddd;border-radius:6px;padding:.6em;
  max-height:22em;overflow:auto;font-family:ui-monospace,monospace;font-size:13px;color:#222}
.av-comp{border-radius:6px;padding:.5em .7em;margin:.5em 0;border-left:6px solid #999;color:#111}
.av-comp-head{display:flex;gap:1em;font-weight:600;margin-bottom:.3em}
.av-score{font-size:1.1em}
.av-text{white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:13px;max-height:26em;overflow:auto}
.av-trained{background:rgba(255,214,0,.55);border-bottom:2px solid #b88a00}
.av-untrained{color:#555}
.av-strip{display:block;width:100%;height:8px;margin:.25em 0 .4em 0}
.av-legend{font-size:12px;color:#444;margin:.3em 0}
.av-empty{padding:2em;color:#555;font-size:1.1em}
.av-hist text{font-size:11px;fill:#333}
</style>
"""


@dataclass
class Completion:
    """One sequence of a group as displayed."""

    index: int
    score: float
    segments: list[tuple[bool | None, str]]  # (trained?, text); None = unknown trained-ness
    trained: int
    total: int
    runs: list[tuple[bool, int]] = field(default_factory=list)  # (trained?, length in tokens)


@dataclass
class GroupDisplay:
    """Everything shown for one group; built by :func:`build_display`."""

    prompt: str
    completions: list[Completion]  # sorted by score, best first
    scores: list[float]
    note: str = ""


def score_colors(score: float, low: float, high: float) -> tuple[str, str]:
    """``(background, border)`` CSS colours: red for the group's lowest score, green for its highest."""
    t = 0.5 if high <= low else (score - low) / (high - low)
    hue = round(120 * max(0.0, min(1.0, t)))
    return f"hsl({hue},70%,92%)", f"hsl({hue},65%,38%)"


def _strip_chars(segments: list[tuple[bool | None, str]], n: int) -> list[tuple[bool | None, str]]:
    """Drop the first ``n`` characters across ``segments`` (the shared prompt)."""
    out = []
    for trained, text in segments:
        if n >= len(text):
            n -= len(text)
            continue
        out.append((trained, text[n:]))
        n = 0
    return out


def build_display(group: dict[str, Any], tokenizer: Any | None) -> GroupDisplay:
    """Split ``group`` into prompt and completions, with trained spans where they can be known.

    With a tokenizer and tokens the texts are decoded (special tokens kept) run by run of equal mask
    state; without one, chat ``messages`` are shown; without either, raw token ids.
    """
    scores = [float(s) for s in group.get("scores") or []]
    tokens = group.get("tokens") or []
    masks = group.get("masks") or []
    messages = group.get("messages") if isinstance(group.get("messages"), list) else None
    comps: list[Completion] = []
    note = ""
    if tokens and tokenizer is not None:
        decoded = decode_group(group, tokenizer)
        prompt = decoded.prefix
        for i, row in enumerate(tokens):
            mask = masks[i] if i < len(masks) else None
            runs = mask_runs(row, mask)
            segments = [(trained, decode(tokenizer, ids)) for trained, ids in runs]
            comps.append(
                Completion(i, scores[i], _strip_chars(segments, len(prompt)), trained_count(mask), len(row),
                           [(t, len(ids)) for t, ids in runs])
            )  # fmt: skip
    elif messages and len(messages) == len(scores):
        shared, replies = split_conversations(messages)
        prompt = conversation_text(shared)
        note = "no tokenizer: showing messages; the strip shows the trained token positions"
        for i, reply in enumerate(replies):
            row = tokens[i] if i < len(tokens) else []
            mask = masks[i] if i < len(masks) else None
            runs = [(t, len(ids)) for t, ids in mask_runs(row, mask)]
            comps.append(
                Completion(
                    i, scores[i], [(None, conversation_text(reply))], trained_count(mask), len(row), runs
                )
            )
    else:
        prompt = ""
        note = "no tokenizer and no messages: showing token ids (trained ids highlighted)"
        for i, row in enumerate(tokens):
            mask = masks[i] if i < len(masks) else None
            runs = mask_runs(row, mask)
            segments = [(t, " ".join(map(str, ids)) + " ") for t, ids in runs]
            comps.append(
                Completion(
                    i, scores[i], segments, trained_count(mask), len(row), [(t, len(ids)) for t, ids in runs]
                )
            )
    comps.sort(key=lambda c: -c.score)
    return GroupDisplay(prompt=prompt, completions=comps, scores=scores, note=note)


def histogram_svg(scores: Sequence[float], title: str = "Scores", width: int = 320, height: int = 130) -> str:
    """An inline SVG bar chart of ``scores``: one bar per distinct value when there are at most 12
    (typical rewards), else 10 equal-width bins between min and max."""
    values = [s for s in scores if isinstance(s, (int, float)) and math.isfinite(s)]
    esc = html.escape
    if not values:
        return f'<svg class="av-hist" width="{width}" height="24"><text x="4" y="16">{esc(title)}: no scores</text></svg>'
    low, high = min(values), max(values)
    distinct = sorted(set(values))
    if len(distinct) <= 12:
        centers = distinct
        counts = [values.count(v) for v in distinct]
        labels = [f"{v:g}" for v in distinct]
    else:
        n_bins = 10
        step = (high - low) / n_bins
        counts = [0] * n_bins
        for v in values:
            counts[min(n_bins - 1, int((v - low) / step))] += 1
        centers = [low + (b + 0.5) * step for b in range(n_bins)]
        labels = [f"{low:.3g}"] + [""] * (n_bins - 2) + [f"{high:.3g}"]
    top, left, bottom = 30, 6, 18
    plot_h = height - top - bottom
    bar_w = (width - 2 * left) / len(counts)
    peak = max(counts)
    parts = [
        f'<svg class="av-hist" role="img" aria-label="{esc(title)} histogram" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        f'<text x="{left}" y="12">{esc(title)} (n={len(values)})</text>',
    ]
    for b, (count, center, label) in enumerate(zip(counts, centers, labels, strict=True)):
        h = plot_h * count / peak
        x = left + b * bar_w
        _, color = score_colors(center, low, high)
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{top + plot_h - h:.1f}" width="{max(bar_w - 2, 1):.1f}" height="{h:.1f}" '
            f'fill="{color}" opacity="0.8"><title>{esc(label or f"{center:.3g}")}: {count}</title></rect>'
        )
        mid = x + bar_w / 2
        if count:
            parts.append(
                f'<text x="{mid:.1f}" y="{top + plot_h - h - 3:.1f}" text-anchor="middle">{count}</text>'
            )
        if label:
            parts.append(f'<text x="{mid:.1f}" y="{height - 4}" text-anchor="middle">{esc(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def mask_strip_svg(runs: Sequence[tuple[bool, int]]) -> str:
    """A thin bar: trained token positions in amber, untrained in grey."""
    total = sum(n for _, n in runs)
    if not total:
        return ""
    rects, x = [], 0
    for trained, n in runs:
        color = "#e0a800" if trained else "#cfcfcf"
        rects.append(f'<rect x="{x}" y="0" width="{n}" height="1" fill="{color}"/>')
        x += n
    return (
        f'<svg class="av-strip" viewBox="0 0 {total} 1" preserveAspectRatio="none" aria-label="token mask">'
        + "".join(rects)
        + "</svg>"
    )


def _segments_html(segments: Sequence[tuple[bool | None, str]]) -> str:
    out = []
    for trained, text in segments:
        cls = "av-trained" if trained else ("av-untrained" if trained is False else "")
        out.append(f'<span class="{cls}">{html.escape(text)}</span>' if cls else html.escape(text))
    return "".join(out)


def render_group(record: GroupRecord, tokenizer: Any | None, position: str = "") -> str:
    """The HTML for one group (see module docstring). ``position`` is e.g. "group 3 of 10"."""
    display = build_display(record.group, tokenizer)
    esc = html.escape
    scores = display.scores
    low, high = (min(scores), max(scores)) if scores else (0.0, 0.0)
    mean = sum(scores) / len(scores) if scores else 0.0
    head = [f'<span class="av-env">{esc(record.label)}</span>']
    if record.env_id is not None:
        head.append(f'<span class="av-chip">env_id {record.env_id}</span>')
    head.append(f'<span class="av-chip">step {record.step if record.step is not None else "–"}</span>')
    if record.seq is not None:
        head.append(f'<span class="av-chip">seq {record.seq}</span>')
    if record.origin and record.origin != f"seq {record.seq}":
        head.append(f'<span class="av-chip">{esc(record.origin)}</span>')
    head.append(f"<span>{len(scores)} sequences · mean {mean:.3g} · min {low:.3g} · max {high:.3g}</span>")
    if position:
        head.append(f"<span>{esc(position)}</span>")
    parts = [STYLE, '<div class="av-group">', '<div class="av-head">', *head, "</div>"]
    parts.append("<h4>Prompt</h4>")
    parts.append(f'<div class="av-prompt">{esc(display.prompt) or "<i>(no shared prompt)</i>"}</div>')
    parts.append(histogram_svg(scores, "Scores of this group"))
    parts.append(
        '<div class="av-legend"><span class="av-trained">highlighted</span> = trained tokens '
        "(mask ≠ -100); completions sorted by score, coloured red (lowest) to green (highest)</div>"
    )
    if display.note:
        parts.append(f'<div class="av-legend">{esc(display.note)}</div>')
    for rank, comp in enumerate(display.completions, start=1):
        bg, border = score_colors(comp.score, low, high)
        parts.append(
            f'<div class="av-comp" data-score="{comp.score:g}" style="background:{bg};border-left-color:{border}">'
            f'<div class="av-comp-head"><span class="av-score">Score {comp.score:g}</span>'
            f"<span>#{rank}</span><span>sequence {comp.index}</span>"
            f"<span>trained {comp.trained}/{comp.total} tokens</span></div>"
            f"{mask_strip_svg(comp.runs)}"
            f'<div class="av-text">{_segments_html(comp.segments)}</div></div>'
        )
    parts.append("</div>")
    return "".join(parts)


def render_empty(message: str) -> str:
    """Placeholder shown when there is no group to display."""
    return f'{STYLE}<div class="av-group"><div class="av-empty">{html.escape(message)}</div></div>'
