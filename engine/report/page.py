"""Assemble the report page and write it atomically as ``RUN_DIR/report.html`` (owner-only)."""
from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from privcube.report.markup import esc
from privcube.report.rundata import RunData, load_run, mechanism_sections

CSS = """
body{font-family:"DejaVu Sans","Liberation Sans",Arial,Helvetica,sans-serif;margin:0 auto;max-width:1100px;
padding:1.2em 2em 3em;color:#222;line-height:1.4}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
.note{color:#555;font-size:.9em}nav a{margin-right:1em}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0}td,th{border:1px solid #ddd;padding:.2em .5em;text-align:left;
vertical-align:top}th{background:#f3f3f3}table.summary td:first-child{font-weight:bold}
figure{margin:.8em 0}figcaption{color:#555;font-size:.85em}svg.plot{max-width:100%;height:auto}
details summary{cursor:pointer;color:#335;margin:.4em 0}
.warn{background:#fff4d6;border-left:4px solid #d9a400;padding:.4em .8em}
.nonprivate{border:3px solid #c0392b;padding:.4em 1em;background:#fff5f5}
.banner{color:#fff;background:#c0392b;font-weight:bold;padding:.4em .8em;margin:.4em -1em .8em}
pre{white-space:pre-wrap;font-size:.8em}
.grid{display:flex;flex-wrap:wrap;gap:0 1.5em}.grid figure{flex:1 1 460px;max-width:100%}
"""


def _sections(run: RunData) -> list[tuple[str, str, str]]:
    """(anchor, nav title, html) for each section that has something to show."""
    from privcube.report import marginals, sections, selection

    draw = mechanism_sections(run.mechanism)["draw"]  # a job kind's own sections (relational: links; census: levels)
    relational: dict[str, str] = draw(run) if draw else {}
    parts = [("warnings", "Warnings", sections.warnings(run)),
             ("overview", "Overview", sections.overview(run)),
             ("expected-error", "Expected error", sections.expected_error(run)),
             ("privacy-split", "Privacy split", relational.get("privacy-split", "")),
             ("levels", "Levels", relational.get("levels", "")),
             ("budget", "Budget split", sections.budget_split(run)),
             ("dp-error", "DP error", relational.get("dp-error", "")),
             ("iterations", "Link iterations", relational.get("iterations", "")),
             ("degrees", "Degrees", relational.get("degrees", "")),
             ("trace", "Selection trace", selection.selection_trace(run)),
             ("ledger", "Ledger", sections.ledger(run)),
             ("marginals", "Answers", marginals.published_marginals(run)),
             ("nonprivate", "NON-PRIVATE evaluation", sections.nonprivate(run))]
    return [p for p in parts if p[2]]


def render_report(run_dir: str | Path, *, replan: Callable[[dict[str, Any]], Any] | None = None) -> str:
    """The report of a finished run folder as one self-contained HTML document (no external resources);
    ``replan`` recomputes a plan the run did not store (see :func:`privcube.report.rundata.load_run`)."""
    from privcube.core import __version__

    run = load_run(run_dir, replan)
    parts = _sections(run)
    nav = "".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t, _ in parts)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = f"privcube report: {run.path.resolve().name} ({run.mechanism})"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{esc(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1>"
            f"<p class=\"note\">Written {esc(stamp)} by privcube {esc(__version__)} from the run folder "
            f"{esc(str(run.path.resolve()))}. A self-contained page: nothing is loaded from the network. Making "
            "it is post-processing of the released outputs and spends no privacy budget.</p>"
            f"<nav>{nav}</nav>{''.join(html for _, _, html in parts)}</body></html>\n")


def write_report(run_dir: str | Path, *, replan: Callable[[dict[str, Any]], Any] | None = None) -> Path:
    """Render the report of ``run_dir`` and write ``run_dir/report.html`` atomically; returns its path."""
    from privcube.core.atomic import atomic_write_text

    html = render_report(run_dir, replan=replan)
    target = Path(run_dir) / "report.html"
    atomic_write_text(target, html)
    return target
