"""Small HTML helpers: every string that reaches the page goes through :func:`esc`."""
from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any


def esc(value: Any) -> str:
    """HTML-escaped text of ``value`` (quotes included, so it is safe in attributes too)."""
    return html.escape(str(value), quote=True)


def num(value: Any, digits: int = 4) -> str:
    """A number as readable text (``—`` for missing), already escaped."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return esc(value)
    if isinstance(value, int):
        return esc(f"{value:,}")
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return esc(f"{value:.{digits}g}")
        return esc(f"{value:.{digits}g}" if abs(value) < 1 else f"{value:,.{max(digits - 1, 0)}f}".rstrip("0").rstrip("."))
    return esc(value)


def compact(value: Any) -> str:
    """Short one-line text of a JSON-like value (lists of attributes joined), escaped."""
    if isinstance(value, float):
        return num(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return esc(",".join(value) or "(total)")
    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str, separators=(", ", ": "))
        return esc(text if len(text) <= 160 else text[:159] + "…")
    return esc(value)


def table(header: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """An HTML table; ``header`` is plain text (escaped here), cells are already-escaped HTML."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    head = f"<thead><tr>{head}</tr></thead>" if head else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{esc(cls)}">{head}<tbody>{body}</tbody></table>'


def section(anchor: str, title: str, body: str, note: str = "") -> str:
    """A titled page section; ``body`` is HTML, ``note`` plain text shown under the title."""
    lead = f'<p class="note">{esc(note)}</p>' if note else ""
    return f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{lead}{body}</section>'


def figure(svg: str, caption: str) -> str:
    """An inline SVG plot with a plain-text caption."""
    return f'<figure>{svg}<figcaption>{esc(caption)}</figcaption></figure>'
