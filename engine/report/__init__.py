"""``privcube report``: one self-contained HTML page a person reads, written into a finished run folder.

The page (``RUN_DIR/report.html``) needs no network at view time: plots are inline SVG rendered by
matplotlib's SVG backend (no browser, no JavaScript), styles are inline, nothing is fetched. It shows
the plan's expected error per query group, the budget split, the ledger, the AIM+GReM selection trace,
published marginals beside the synthetic records' marginals, and, only when the run asked for it, the
realised (NON-PRIVATE) errors. Everything shown is read from the run folder; rendering is
post-processing of released outputs and spends no privacy budget.
"""
from __future__ import annotations

from privcube.report.page import render_report, write_report

__all__ = ["render_report", "write_report"]
