"""AIM+GReM's selection trace in the report: budget per round, annealing, which marginals were selected."""
from __future__ import annotations

from privcube.report import figures
from privcube.report.markup import compact, esc, figure, num, section, table
from privcube.report.rundata import RunData

MAX_ROUNDS = 200


def _clique(row: dict) -> str:
    if row.get("final_round") == "spread":  # aim-grem's last round: no selection, the selected cliques' residuals
        return "(final: spread)"
    return ",".join(row.get("clique") or []) or "(total)"


def selection_trace(run: RunData) -> str:
    """Plot and table of ``mechanism_report.trace`` (one row per round); empty for other mechanisms."""
    mr = run.mechanism_report
    rows = [r for r in mr.get("trace") or [] if isinstance(r, dict)]
    if not rows:
        return ""
    shown = rows[:MAX_ROUNDS]
    svg = figures.trace("trace", [int(r.get("round", i + 1)) for i, r in enumerate(shown)],
                        [float(r.get("rho_select") or 0.0) for r in shown],
                        [float(r.get("rho_measure") or 0.0) for r in shown],
                        [float(r.get("sigma") or 0.0) for r in shown],
                        [bool(r.get("annealed")) for r in shown], [_clique(r) for r in shown])
    init = mr.get("init") or {}
    note = (f"{len(rows)} rounds ({esc(mr.get('measure', ''))} measurements, {esc(mr.get('update', ''))} updates); "
            f"ρ used {float(mr.get('rho_used') or 0):.6g} of {float(mr.get('rho_total') or 0):.6g}.")
    if init:
        note += f" Initialisation: {init.get('attributes', '?')} one-way marginals at σ = {float(init.get('sigma0', 0)):.4g}."
    if len(rows) > MAX_ROUNDS:
        note += f" The plot shows the first {MAX_ROUNDS} rounds; the table lists all."
    header = ["round", "selected marginal", "ρ select", "ρ measure", "σ", "residuals measured", "annealed", "final"]
    body_rows = [[num(r.get("round")), esc(_clique(r)), num(r.get("rho_select")), num(r.get("rho_measure")),
                  num(r.get("sigma")), compact([",".join(t) or "(total)" for t in r.get("measured") or []]),
                  esc("yes" if r.get("annealed") else ""), esc("yes" if r.get("final") else "")] for r in rows]
    body = figure(svg, "ρ spent per round (selection + measurement); ▼ marks rounds after which the budget per "
                       "round was annealed (increased); σ is the measurement noise.") + \
        f"<details open><summary>Trace ({len(rows)} rounds)</summary>{table(header, body_rows)}</details>"
    return section("trace", "AIM+GReM selection trace", body, note=note)
