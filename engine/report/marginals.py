"""Published answers in the report: a few marginals as bars (with confidence intervals when the answer
files carry ``ci_low``/``ci_high``), beside the synthetic records' marginals when records were written."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from privcube.report import figures
from privcube.report.markup import figure, section
from privcube.report.rundata import RunData, synthetic_marginal
from privcube.report.sections import group_label

MAX_CELLS = 40
MAX_PLOTS = 4


def value_column(frame: pd.DataFrame) -> str:
    """The released value: ``published`` when the file has it, else ``estimate``."""
    return "published" if "published" in frame.columns else "estimate"


def cell_labels(frame: pd.DataFrame, attrs: list[str]) -> list[str]:
    """Readable cell names: schema labels (``<attr>_label``) when present, else codes; queries by description."""
    if not attrs or "description" in frame.columns or "query" in frame.columns:
        col = "description" if "description" in frame.columns else "query" if "query" in frame.columns else None
        return [str(v) for v in frame[col]] if col else ["total"] * len(frame)
    parts = [frame[f"{a}_label"].astype(str) if f"{a}_label" in frame.columns else frame[a].astype(str) for a in attrs]
    return [" · ".join(p) for p in zip(*parts)] if len(attrs) > 1 else [str(v) for v in parts[0]]


def _pick(groups: list[dict[str, Any]], marginal_only: bool) -> list[dict[str, Any]]:
    """A few small groups, fewest attributes and cells first: marginals (to set beside records) or any groups."""
    pool = [g for g in groups if not marginal_only or (g.get("marginal") and g.get("attributes"))]
    pool.sort(key=lambda g: (len(g.get("attributes") or []), int(g.get("rows") or 0) > MAX_CELLS,
                             int(g.get("rows") or 0)))
    ones = [g for g in pool if len(g.get("attributes") or []) <= 1]
    more = [g for g in pool if len(g.get("attributes") or []) > 1]
    head = ones[: MAX_PLOTS - min(len(more), MAX_PLOTS // 2)]  # a mix: some one-way, then two-way groups
    return (head + more + ones[len(head):])[:MAX_PLOTS]


def published_marginals(run: RunData) -> str:
    """Bars of a few published answer groups, synthetic records beside them when the run made records."""
    files = run.record_files()
    domain = (run.config.get("resolved") or {}).get("domain") or {}
    picked = _pick(run.groups, marginal_only=bool(files))
    if not picked:
        return ""
    figs, truncated = [], False
    for i, g in enumerate(picked):
        frame = run.answers(g)
        attrs = list(g.get("attributes") or [])
        col = value_column(frame)
        if len(frame) > MAX_CELLS:
            frame, truncated = frame.iloc[:MAX_CELLS], True
        syn = None
        if files and attrs and all(a in domain for a in attrs):
            counts = synthetic_marginal(files, attrs, tuple(int(domain[a]) for a in attrs))
            syn = counts[tuple(frame[a].to_numpy(dtype=np.int64) for a in attrs)]
        ci = (frame["ci_low"], frame["ci_high"]) if {"ci_low", "ci_high"} <= set(frame.columns) else None
        label = group_label({"attributes": attrs, "queries": g.get("queries"), "by": g.get("by")})
        what = "published answers" if col == "published" else "noisy estimates"  # not "published published"
        svg = figures.compare(f"marginal-{i}", f"{label}: {what}" + (" vs synthetic records" if syn is not None
                                                                    else ""),
                              cell_labels(frame, attrs), frame[col].to_numpy(dtype=float), syn, ci)
        figs.append(figure(svg, f"{label}: the released noisy answers ('{col}' column)"
                                + (", with their confidence intervals" if ci is not None else "")
                                + ("; beside them the counts of the synthetic records" if syn is not None else "")))
    title = "Published marginals and synthetic records" if files else "Published answers"
    note = (f"{len(picked)} of {len(run.groups)} answer groups plotted (answers/ holds all)."
            + (f" Groups with more than {MAX_CELLS} answers show their first {MAX_CELLS}." if truncated else ""))
    if files:
        note += " Synthetic records are post-processing of the published marginals: they spend no budget."
    return section("marginals", title, f'<div class="grid">{"".join(figs)}</div>', note=note)
