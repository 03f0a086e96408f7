"""Inline SVG charts for report.html: horizontal bars (with std whiskers), grouped bars, the transfer chart.

Plain strings, no JavaScript and no external assets, so the page opens
anywhere (a laptop offline, a CI artifact viewer) and prints cleanly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac"]
"""Categorical colours (one per cell), colour-blind friendly enough for up to ten series."""

INK = "#1f2933"
MUTED = "#7b8794"
GRID = "#e4e7eb"
FONT = "font-family=\"-apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif\""


def _svg_open(width: int, height: float) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" style="max-width:100%;height:auto" {FONT} font-size="12">')


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _text_width(text: str, size: float = 12) -> float:
    return len(text) * size * 0.58


@dataclass
class Bar:
    """One bar: a label, a value in [0, scale], optional std whisker and marker (e.g. pass@k)."""

    label: str
    value: float | None
    colour: str
    std: float | None = None
    marker: float | None = None
    note: str | None = None
    """Text after the bar (defaults to the formatted value)."""


def _fmt(value: float | None, scale: float) -> str:
    if value is None:
        return "—"
    return f"{value:.2f}" if scale <= 1.0 else (f"{value:.1f}" if value < 100 else f"{value:.0f}")


def hbars(bars: list[Bar], *, scale: float = 1.0, width: int = 560, row: int = 26, label_width: int | None = None,
          marker_name: str | None = None, percent_axis: bool = True, intervals: int = 4) -> str:
    """A horizontal bar chart; ``None`` values draw an empty track with "no data"."""
    if not bars:
        return ""
    scale = scale if scale > 0 else 1.0
    lw = label_width or int(min(240, max(_text_width(b.label) for b in bars) + 14))
    note_w = 70
    plot_w = max(120, width - lw - note_w)
    top = 22
    height = top + row * len(bars) + 8
    out = [_svg_open(width, height)]
    for i in range(intervals + 1):  # grid lines and axis labels (0, 25, 50, 75, 100 % by default)
        x = lw + plot_w * i / intervals
        v = scale * i / intervals
        label = f"{round(100 * v / scale)}%" if percent_axis and scale <= 1.0 else _tick(v)
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 6}" stroke="{GRID}"/>')
        out.append(f'<text x="{x:.1f}" y="{top - 9}" fill="{MUTED}" font-size="10" text-anchor="middle">{label}</text>')
    bh = row * 0.62
    for i, b in enumerate(bars):
        y = top + i * row + (row - bh) / 2
        cy = y + bh / 2
        out.append(f'<text x="{lw - 8}" y="{cy + 4:.1f}" fill="{INK}" text-anchor="end">{escape(_clip(b.label, lw))}</text>')
        out.append(f'<rect x="{lw}" y="{y:.1f}" width="{plot_w}" height="{bh:.1f}" rx="3" fill="#f5f7fa"/>')
        if b.value is None:
            out.append(f'<text x="{lw + 6}" y="{cy + 4:.1f}" fill="{MUTED}" font-style="italic">'
                       f'{escape(b.note or "no data")}</text>')
            continue
        w = plot_w * max(0.0, min(b.value, scale)) / scale
        out.append(f'<rect x="{lw}" y="{y:.1f}" width="{w:.1f}" height="{bh:.1f}" rx="3" fill="{b.colour}">'
                   f'<title>{escape(b.label)}: {_fmt(b.value, scale)}</title></rect>')
        if b.std is not None and b.std > 0:
            x0 = lw + plot_w * max(0.0, b.value - b.std) / scale
            x1 = lw + plot_w * min(scale, b.value + b.std) / scale
            out.append(f'<path d="M{x0:.1f},{cy:.1f}H{x1:.1f}M{x0:.1f},{cy - 4:.1f}V{cy + 4:.1f}'
                       f'M{x1:.1f},{cy - 4:.1f}V{cy + 4:.1f}" stroke="{INK}" stroke-width="1.3" fill="none"/>')
        if b.marker is not None:
            mx = lw + plot_w * max(0.0, min(b.marker, scale)) / scale
            out.append(f'<path d="M{mx:.1f},{cy - 6:.1f}L{mx + 5:.1f},{cy:.1f}L{mx:.1f},{cy + 6:.1f}L{mx - 5:.1f},'
                       f'{cy:.1f}Z" fill="#ffffff" stroke="{INK}" stroke-width="1.3">'
                       f'<title>{escape(marker_name or "marker")}: {_fmt(b.marker, scale)}</title></path>')
        note = b.note if b.note is not None else _fmt(b.value, scale)
        out.append(f'<text x="{lw + plot_w + 8}" y="{cy + 4:.1f}" fill="{INK}" font-weight="600">{escape(note)}</text>')
    out.append("</svg>")
    return "".join(out)


def grouped_hbars(groups: list[tuple[str, list[Bar]]], *, scale: float = 1.0, width: int = 560, bar: int = 14) -> str:
    """Groups of bars (e.g. one group per domain, one bar per cell), each group under its heading."""
    if not groups:
        return ""
    lw = 24
    note_w = 104
    plot_w = width - lw - note_w
    top = 20
    heights = [22 + bar * len(bs) + 4 * (len(bs) - 1) + 10 for _, bs in groups]
    height = top + sum(heights)
    out = [_svg_open(width, height)]
    for i in range(5):
        x = lw + plot_w * i / 4
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 4}" stroke="{GRID}"/>')
        label = f"{25 * i}%" if scale <= 1.0 else _fmt(scale * i / 4, scale)
        out.append(f'<text x="{x:.1f}" y="{top - 8}" fill="{MUTED}" font-size="10" text-anchor="middle">{label}</text>')
    y = top
    for (name, bars), h in zip(groups, heights, strict=True):
        out.append(f'<text x="{lw}" y="{y + 15}" fill="{INK}" font-weight="600">{escape(name)}</text>')
        by = y + 22
        for b in bars:
            out.append(f'<rect x="{lw}" y="{by}" width="{plot_w}" height="{bar}" rx="2" fill="#f5f7fa"/>')
            if b.value is not None:
                w = plot_w * max(0.0, min(b.value, scale)) / scale
                out.append(f'<rect x="{lw}" y="{by}" width="{w:.1f}" height="{bar}" rx="2" fill="{b.colour}">'
                           f'<title>{escape(name)} · {escape(b.label)}: {_fmt(b.value, scale)}</title></rect>')
            note = b.note if b.note is not None else _fmt(b.value, scale)
            out.append(f'<text x="{lw + plot_w + 6}" y="{by + bar - 3}" fill="{INK}" font-size="11">{escape(note)}</text>')
            by += bar + 4
        y += h
    out.append("</svg>")
    return "".join(out)


def transfer_chart(rows: list[tuple[str, float | None, float | None]], *, baseline: str, candidate: str,
                   width: int = 760) -> str:
    """Per harness: baseline and candidate pass@1 as paired bars, with the gain written beside them."""
    if not rows:
        return ""
    lw = int(min(220, max(_text_width(h) for h, _, _ in rows) + 16))
    gain_w = 90
    plot_w = width - lw - gain_w
    top = 40
    row = 46
    height = top + row * len(rows) + 6
    base_c, cand_c = "#9aa5b1", "#2f6fdb"
    out = [_svg_open(width, height),
           f'<rect x="{lw}" y="4" width="12" height="12" rx="2" fill="{base_c}"/>'
           f'<text x="{lw + 18}" y="14" fill="{INK}">{escape(baseline)} (baseline)</text>',
           f'<rect x="{lw + 30 + _text_width(baseline + " (baseline)"):.0f}" y="4" width="12" height="12" rx="2" '
           f'fill="{cand_c}"/><text x="{lw + 48 + _text_width(baseline + " (baseline)"):.0f}" y="14" fill="{INK}">'
           f'{escape(candidate)}</text>',
           f'<text x="{width - 8}" y="14" fill="{MUTED}" text-anchor="end">gain (pass@1)</text>']
    for i in range(5):
        x = lw + plot_w * i / 4
        out.append(f'<line x1="{x:.1f}" y1="{top - 8}" x2="{x:.1f}" y2="{height - 4}" stroke="{GRID}"/>')
        out.append(f'<text x="{x:.1f}" y="{top - 12}" fill="{MUTED}" font-size="10" text-anchor="middle">{25 * i}%</text>')
    for i, (harness, b, c) in enumerate(rows):
        y = top + i * row
        out.append(f'<text x="{lw - 8}" y="{y + 22}" fill="{INK}" text-anchor="end" font-weight="600">'
                   f'{escape(_clip(harness, lw))}</text>')
        for j, (v, col, name) in enumerate(((b, base_c, baseline), (c, cand_c, candidate))):
            by = y + 4 + j * 17
            out.append(f'<rect x="{lw}" y="{by}" width="{plot_w}" height="14" rx="2" fill="#f5f7fa"/>')
            if v is not None:
                out.append(f'<rect x="{lw}" y="{by}" width="{plot_w * max(0.0, min(v, 1.0)):.1f}" height="14" rx="2" '
                           f'fill="{col}"><title>{escape(harness)} · {escape(name)}: {v:.3f}</title></rect>')
                out.append(f'<text x="{lw + plot_w * max(0.0, min(v, 1.0)) + 4:.1f}" y="{by + 11}" fill="{INK}" '
                           f'font-size="10">{v:.2f}</text>')
        if b is not None and c is not None:
            g = c - b
            col = "#1a7f37" if g > 1e-12 else ("#c62828" if g < -1e-12 else MUTED)
            out.append(f'<text x="{width - 8}" y="{y + 26}" fill="{col}" text-anchor="end" font-size="16" '
                       f'font-weight="700">{g * 100:+.1f} pt</text>')
        else:
            out.append(f'<text x="{width - 8}" y="{y + 26}" fill="{MUTED}" text-anchor="end">—</text>')
    out.append("</svg>")
    return "".join(out)


def nice_axis(value: float, max_ticks: int = 5) -> tuple[float, int]:
    """(axis maximum, number of intervals) with a round step (1, 2, 2.5 or 5 × 10ⁿ) covering ``value``."""
    if value <= 0:
        return 1.0, 4
    exp = math.floor(math.log10(value / max_ticks))
    for mult in (1, 2, 2.5, 5, 10, 20):
        step = mult * 10**exp
        n = math.ceil(value / step - 1e-9)
        if n <= max_ticks:
            return round(step * n, 10), max(n, 1)
    return float(10 ** (exp + 2)), 5  # pragma: no cover - the loop always finds a step


def _tick(value: float) -> str:
    return f"{value:.0f}" if abs(value - round(value)) < 1e-9 else f"{value:.3g}"


def _clip(text: str, px: float) -> str:
    limit = max(4, int((px - 12) / (12 * 0.58)))
    return text if len(text) <= limit else text[: limit - 1] + "…"
